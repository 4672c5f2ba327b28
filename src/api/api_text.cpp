// The C API, part 3: tokenizer, streaming detokenizer, chat templates, sampling.
#include <climits>

#include "api/api_internal.h"
#include "model/chat.h"
#include "model/sampling.h"

using kiln::api::copy_out;
using kiln::api::guarded;

struct kiln_stream_decoder {
    kiln::StreamDecoder dec;
    std::string pending;  // text produced but not yet copied out whole
};

struct kiln_sampler {
    kiln::SamplerChain chain;
};

namespace {

const kiln::Tokenizer& tok(const kiln_model* m) {
    if (!m) throw std::invalid_argument("model is NULL");
    return m->model->tokenizer();
}

// Copies `pending` out if it fits (then clears it); snprintf semantics either way.
int32_t drain(std::string& pending, char* buf, int32_t buf_size) {
    const int32_t n = static_cast<int32_t>(pending.size());
    if (buf && buf_size > n) {
        copy_out(pending, buf, static_cast<size_t>(buf_size));
        pending.clear();
    }
    return n;
}

}  // namespace

extern "C" {

int32_t kiln_tokenize(const kiln_model* m, const char* text, int32_t text_len, kiln_token* tokens, int32_t n_max,
                      bool add_special, bool parse_special) {
    return guarded(
        [&]() -> int32_t {
            if (!text) throw std::invalid_argument("kiln_tokenize: text is NULL");
            const std::string_view sv(text, text_len < 0 ? std::strlen(text) : static_cast<size_t>(text_len));
            const auto ids = tok(m).tokenize(sv, kiln::TokenizeOptions{.add_special = add_special, .parse_special = parse_special});
            const auto n = static_cast<int32_t>(ids.size());
            if (n > n_max || (!tokens && n > 0)) return -n;
            std::copy(ids.begin(), ids.end(), tokens);
            return n;
        },
        INT32_MIN);
}

int32_t kiln_token_to_piece(const kiln_model* m, kiln_token t, char* buf, int32_t buf_size, bool special) {
    return guarded([&] { return copy_out(tok(m).token_to_piece(t, special), buf, static_cast<size_t>(std::max(buf_size, 0))); },
                   int32_t{-1});
}

int32_t kiln_detokenize(const kiln_model* m, const kiln_token* ids, int32_t n, char* buf, int32_t buf_size,
                        bool remove_special, bool unparse_special) {
    return guarded(
        [&] {
            if (n < 0 || (n > 0 && !ids)) throw std::invalid_argument("kiln_detokenize: bad token array");
            const auto text = tok(m).detokenize(std::span<const int32_t>(ids, static_cast<size_t>(n)),
                                                kiln::DetokenizeOptions{.remove_special = remove_special,
                                                                        .unparse_special = unparse_special});
            return copy_out(text, buf, static_cast<size_t>(std::max(buf_size, 0)));
        },
        int32_t{-1});
}

kiln_token kiln_token_bos(const kiln_model* m) { return guarded([&] { return tok(m).bos(); }, kiln_token{-1}); }
kiln_token kiln_token_eos(const kiln_model* m) { return guarded([&] { return tok(m).eos(); }, kiln_token{-1}); }
kiln_token kiln_token_eot(const kiln_model* m) { return guarded([&] { return tok(m).eot(); }, kiln_token{-1}); }
bool kiln_token_is_eog(const kiln_model* m, kiln_token t) { return guarded([&] { return tok(m).is_eog(t); }, false); }
bool kiln_add_bos(const kiln_model* m) { return guarded([&] { return tok(m).add_bos(); }, false); }

kiln_stream_decoder* kiln_stream_decoder_new(const kiln_model* m, bool special) {
    return guarded(
        [&] {
            return new kiln_stream_decoder{kiln::StreamDecoder(tok(m), kiln::DetokenizeOptions{.unparse_special = special}), {}};
        },
        static_cast<kiln_stream_decoder*>(nullptr));
}

int32_t kiln_stream_decoder_push(kiln_stream_decoder* d, kiln_token t, char* buf, int32_t buf_size) {
    return guarded(
        [&] {
            d->pending += d->dec.push(t);
            return drain(d->pending, buf, buf_size);
        },
        int32_t{-1});
}

int32_t kiln_stream_decoder_flush(kiln_stream_decoder* d, char* buf, int32_t buf_size) {
    return guarded(
        [&] {
            d->pending += d->dec.flush();
            return drain(d->pending, buf, buf_size);
        },
        int32_t{-1});
}

void kiln_stream_decoder_free(kiln_stream_decoder* d) { delete d; }

int32_t kiln_chat_apply_template(const kiln_model* m, const char* tmpl, const kiln_chat_message* msgs, size_t n_msg,
                                 bool add_gen, char* buf, int32_t buf_size) {
    return guarded(
        [&] {
            if (!m) throw std::invalid_argument("kiln_chat_apply_template: model is NULL");
            nlohmann::ordered_json messages = nlohmann::ordered_json::array();
            for (size_t i = 0; i < n_msg; ++i) {
                if (!msgs[i].role || !msgs[i].content) throw std::invalid_argument("kiln_chat_apply_template: message " + std::to_string(i) + " has a NULL field");
                messages.push_back({{"role", msgs[i].role}, {"content", msgs[i].content}});
            }
            const std::string out = kiln::apply_chat(*m->model, tmpl ? tmpl : "", messages, add_gen);
            return copy_out(out, buf, static_cast<size_t>(std::max(buf_size, 0)));
        },
        int32_t{-1});
}

int32_t kiln_chat_apply_template_json(const kiln_model* m, const char* tmpl, const char* messages_json,
                                      const char* extra_json, bool add_gen, char* buf, int32_t buf_size) {
    return guarded(
        [&] {
            if (!m || !messages_json) throw std::invalid_argument("kiln_chat_apply_template_json: NULL model or messages");
            const auto messages = nlohmann::ordered_json::parse(messages_json);
            if (!messages.is_array()) throw std::invalid_argument("kiln_chat_apply_template_json: messages must be a JSON array");
            const auto extra = extra_json ? nlohmann::ordered_json::parse(extra_json) : nlohmann::ordered_json::object();
            if (!extra.is_object()) throw std::invalid_argument("kiln_chat_apply_template_json: extra must be a JSON object");
            const std::string out = kiln::apply_chat(*m->model, tmpl ? tmpl : "", messages, add_gen, extra);
            return copy_out(out, buf, static_cast<size_t>(std::max(buf_size, 0)));
        },
        int32_t{-1});
}

struct kiln_sampler_params kiln_sampler_default_params(void) {
    const kiln::SamplingParams d;
    return kiln_sampler_params{.temp = d.temp, .top_k = d.top_k, .top_p = d.top_p, .min_p = d.min_p,
                               .typical_p = d.typical_p, .penalty_last_n = d.penalty_last_n,
                               .penalty_repeat = d.penalty_repeat, .penalty_freq = d.penalty_freq,
                               .penalty_present = d.penalty_present, .seed = d.seed, .min_keep = d.min_keep};
}

kiln_sampler* kiln_sampler_new(struct kiln_sampler_params p, int32_t n_ctx) {
    return guarded(
        [&] {
            kiln::SamplingParams sp;
            sp.temp = p.temp;
            sp.top_k = p.top_k;
            sp.top_p = p.top_p;
            sp.min_p = p.min_p;
            sp.typical_p = p.typical_p;
            sp.penalty_last_n = p.penalty_last_n;
            sp.penalty_repeat = p.penalty_repeat;
            sp.penalty_freq = p.penalty_freq;
            sp.penalty_present = p.penalty_present;
            sp.seed = p.seed;
            sp.min_keep = p.min_keep;
            return new kiln_sampler{kiln::SamplerChain(sp, n_ctx)};
        },
        static_cast<kiln_sampler*>(nullptr));
}

void kiln_sampler_free(kiln_sampler* s) { delete s; }

kiln_token kiln_sampler_sample(kiln_sampler* s, kiln_context* c, int32_t idx) {
    return guarded(
        [&] {
            const double before = s->chain.t_sample_ms();
            const kiln_token t = s->chain.sample(c->ctx->logits(idx), c->ctx->n_vocab());
            auto& perf = c->ctx->perf();
            perf.t_sample_ms += s->chain.t_sample_ms() - before;
            perf.n_sample += 1;
            return t;
        },
        kiln_token{-1});
}

void kiln_sampler_accept(kiln_sampler* s, kiln_token t) {
    guarded([&] { s->chain.accept(t); return 0; }, 0);
}
void kiln_sampler_reset(kiln_sampler* s) { s->chain.reset(); }
uint32_t kiln_sampler_seed(const kiln_sampler* s) { return s->chain.seed(); }

}  // extern "C"
