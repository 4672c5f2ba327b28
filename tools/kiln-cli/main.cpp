// kiln-cli: text generation and interactive chat on the public C API (kiln.h),
// with llama-cli's flags and reports.
//
//   kiln-cli -m MODEL -p "Once upon a time" -n 64
//   kiln-cli -m MODEL -cnv [-sys "You are ..."] [--chat-template FILE]
//
// Generation streams tokens to stdout as they come; everything else (loading
// progress, settings, timings) goes to stderr, so stdout holds only the text.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "../common/cli_common.h"

namespace kt = kiln_tools;

namespace {

struct Args {
    kt::ModelArgs model;
    kt::ContextArgs ctx;
    kt::SamplingArgs sampling;
    std::string prompt;
    std::string prompt_file;
    std::string system_prompt;
    std::string chat_template_file;
    int32_t n_predict = -1;
    int32_t n_keep = 0;
    bool conversation = false;
    bool no_display_prompt = false;
    bool ignore_eos = false;
    bool special = false;
    bool no_context_shift = false;
    bool verbose = false;
};

// Multi-letter single-dash spellings of llama-cli, mapped to the long options.
const std::vector<std::pair<std::string, std::string>> kAliases = {
    {"-ngl", "--n-gpu-layers"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ub", "--ubatch-size"},
    {"-Cr", "--cpu-range"}, {"-tb", "--threads-batch"},
    {"-cnv", "--conversation"}, {"-sys", "--system-prompt"}, {"-sp", "--special"},
};

void add_options(CLI::App& app, Args& a) {
    kt::add_model_options(app, a.model);
    kt::add_context_options(app, a.ctx);
    kt::add_sampling_options(app, a.sampling);
    auto* p = kt::metavar(app.add_option("-p,--prompt", a.prompt, "prompt to start generation with"), "TEXT");
    app.add_option("-f,--file", a.prompt_file, "read the prompt from FILE")->option_text("FILE")->excludes(p);
    kt::metavar(app.add_option("-n,--n-predict", a.n_predict, "tokens to generate (-1: until end of generation or the context is full)")
        ->check(CLI::Range(-1, INT32_MAX)), "N");
    kt::metavar(app.add_option("--keep", a.n_keep, "prompt tokens kept when the context shifts (-1: all; BOS is always kept)")
        ->check(CLI::Range(-1, INT32_MAX)), "N");
    app.add_flag("--conversation", a.conversation, "interactive chat with the model's chat template (-cnv)");
    kt::metavar(app.add_option("--system-prompt", a.system_prompt, "system message for the chat (-sys)"), "TEXT");
    kt::metavar(app.add_option("--chat-template", a.chat_template_file, "Jinja chat template file (default: the model's)"), "FILE");
    app.add_flag("--no-display-prompt", a.no_display_prompt, "do not print the prompt before the generated text");
    app.add_flag("--ignore-eos", a.ignore_eos, "never end generation at end-of-generation tokens");
    app.add_flag("--special", a.special, "print control tokens' text (-sp)");
    app.add_flag("--no-context-shift", a.no_context_shift, "stop instead of discarding old tokens when the context is full");
    app.add_flag("-v,--verbose", a.verbose, "print the prompt tokens and context shifts");
}

// JSON string literal for the chat messages (the template API takes JSON).
std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out + "\"";
}

struct Message {
    std::string role;
    std::string content;
};

// Why generation stopped.
enum class Stop { Limit, EndOfGeneration, ContextFull };

// The model, context and sampler of one run, and where the sequence stands in
// the KV cache. Sequence 0 holds tokens at positions [0, n_past).
class Session {
public:
    Session(const Args& a, kiln_model* model, kiln_context* ctx, kiln_sampler* smpl)
        : a_(a), model_(model), ctx_(ctx), smpl_(smpl), n_ctx_(static_cast<int32_t>(kiln_n_ctx(ctx))),
          n_batch_(static_cast<int32_t>(kiln_n_batch(ctx))), batch_(n_batch_, 1) {
        if (a.ignore_eos) {
            // Found once: the sampler API has no logit bias, so these logits are masked before each sample.
            const int32_t n_vocab = kiln_model_n_vocab(model);
            for (kiln_token t = 0; t < n_vocab; ++t) {
                if (kiln_token_is_eog(model, t)) eog_tokens_.push_back(t);
            }
        }
    }

    int32_t n_past() const { return n_past_; }
    int32_t n_ctx() const { return n_ctx_; }
    int shift_count() const { return shift_count_; }
    void set_keep(int32_t n_keep) { n_keep_ = n_keep; }
    int32_t keep() const { return n_keep_; }

    // Drops everything from position p on (to re-evaluate a differently rendered reply).
    void truncate(int32_t p) {
        if (!kiln_kv_seq_rm(ctx_, 0, p, -1)) kt::fail_with_last_error("cannot remove tokens from the KV cache");
        n_past_ = p;
    }

    // Evaluates tokens after the current position in n_batch pieces, logits for the last one only;
    // shifts the context first if they do not fit. Returns false when they cannot fit at all.
    bool eval(const std::vector<kiln_token>& tokens) {
        const auto n = static_cast<int32_t>(tokens.size());
        while (n_past_ + n > n_ctx_) {
            if (a_.no_context_shift || !shift()) return false;
        }
        for (int32_t i = 0; i < n; i += n_batch_) {
            const int32_t m = std::min(n_batch_, n - i);
            batch_.clear();
            for (int32_t k = 0; k < m; ++k) batch_.add(tokens[static_cast<size_t>(i + k)], n_past_ + k, 0, i + k == n - 1);
            decode();
            n_past_ += m;
        }
        for (const kiln_token t : tokens) kiln_sampler_accept(smpl_, t);
        last_eval_ = tokens;
        return true;
    }

    // Samples up to n_predict tokens (-1: no limit), printing each as it comes. `keep_last`:
    // also evaluate the final token, so the KV cache holds the whole reply (for the next chat turn).
    Stop generate(int32_t n_predict, bool keep_last, std::vector<kiln_token>& out) {
        kt::StreamDecoderPtr dec(kiln_stream_decoder_new(model_, a_.special));
        if (!dec) kt::fail_with_last_error("cannot create a stream decoder");
        // A fresh decoder takes its first token as the start of the text and drops a
        // SentencePiece leading space; fed the tokens before, it prints the reply as
        // the continuation it is (" world", not "world").
        for (const kiln_token t : last_eval_) kt::stream_push(dec.get(), t);
        Stop stop = Stop::Limit;
        for (int32_t n_gen = 0; n_predict < 0 || n_gen < n_predict;) {
            if (!eog_tokens_.empty()) {
                float* logits = kiln_get_logits_ith(ctx_, -1);
                if (!logits) kt::fail_with_last_error("no logits to sample from");
                for (const kiln_token t : eog_tokens_) logits[t] = -INFINITY;
            }
            const kiln_token tok = kiln_sampler_sample(smpl_, ctx_, -1);
            if (tok < 0) kt::fail_with_last_error("sampling failed");
            kiln_sampler_accept(smpl_, tok);
            if (kiln_token_is_eog(model_, tok) && !a_.ignore_eos) {
                stop = Stop::EndOfGeneration;
                break;
            }
            out.push_back(tok);
            ++n_gen;
            const std::string piece = kt::stream_push(dec.get(), tok);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            if (n_predict >= 0 && n_gen == n_predict && !keep_last) break;
            if (n_past_ + 1 > n_ctx_) {
                // -1 means "until the context is full"; an explicit count shifts the context to go on.
                const bool may_shift = n_predict >= 0 || keep_last;
                if (!may_shift || a_.no_context_shift || !shift()) {
                    stop = Stop::ContextFull;
                    break;
                }
            }
            batch_.clear();
            batch_.add(tok, n_past_, 0, true);
            decode();
            ++n_past_;
        }
        const std::string rest = kt::stream_flush(dec.get());
        std::fwrite(rest.data(), 1, rest.size(), stdout);
        std::fflush(stdout);
        return stop;
    }

private:
    void decode() {
        const int32_t rc = kiln_decode(ctx_, batch_.get());
        if (rc == 1) kt::fail_with_last_error("the KV cache is full");
        if (rc != 0) kt::fail_with_last_error("decode failed");
    }

    // llama.cpp's context shift: keep the first n_keep tokens, drop half of the rest
    // and move the remainder back so positions stay contiguous.
    bool shift() {
        const int32_t n_left = n_past_ - n_keep_;
        const int32_t n_discard = n_left / 2;
        if (n_discard <= 0) return false;
        if (a_.verbose) {
            std::fprintf(stderr, "\nkiln-cli: context full: keeping %d tokens, discarding %d of %d\n", n_keep_, n_discard, n_left);
        }
        if (!kiln_kv_seq_rm(ctx_, 0, n_keep_, n_keep_ + n_discard)) kt::fail_with_last_error("context shift failed");
        kiln_kv_seq_add(ctx_, 0, n_keep_ + n_discard, n_past_, -n_discard);
        n_past_ -= n_discard;
        ++shift_count_;
        return true;
    }

    const Args& a_;
    kiln_model* model_;
    kiln_context* ctx_;
    kiln_sampler* smpl_;
    int32_t n_ctx_;
    int32_t n_batch_;
    kt::Batch batch_;
    std::vector<kiln_token> eog_tokens_;
    std::vector<kiln_token> last_eval_;  // the tokens evaluated last, to prime the stream decoder
    int32_t n_past_ = 0;
    int32_t n_keep_ = 0;
    int shift_count_ = 0;
};

// Tokenizes text that may contain the chat template's control-token texts. BOS is
// added as the model wants unless the text already begins with BOS's own text
// (Gemma's template writes "<bos>" itself).
std::vector<kiln_token> tokenize_prompt(kiln_model* model, const std::string& text, bool first) {
    const std::string bos = kt::bos_text(model);
    const bool has_bos_text = !bos.empty() && text.compare(0, bos.size(), bos) == 0;
    return kt::tokenize(model, text, first && !has_bos_text, true);
}

void print_prompt_tokens(kiln_model* model, const std::vector<kiln_token>& tokens) {
    std::fprintf(stderr, "kiln-cli: prompt tokens (%zu):", tokens.size());
    for (const kiln_token t : tokens) std::fprintf(stderr, " %d '%s'", t, kt::token_to_piece(model, t, true).c_str());
    std::fprintf(stderr, "\n");
}

int32_t keep_count(const Args& a, kiln_model* model, const std::vector<kiln_token>& prompt) {
    const auto n = static_cast<int32_t>(prompt.size());
    if (a.n_keep < 0 || a.n_keep > n) return n;
    const bool starts_with_bos = !prompt.empty() && prompt[0] == kiln_token_bos(model);
    return std::min(n, a.n_keep + (starts_with_bos ? 1 : 0));  // like llama.cpp, BOS is always kept
}

void run_completion(const Args& a, Session& s, kiln_model* model, const std::string& prompt_text) {
    std::vector<kiln_token> prompt = tokenize_prompt(model, prompt_text, true);
    if (prompt.empty()) {
        const kiln_token bos = kiln_token_bos(model);
        if (bos < 0) throw kt::ToolError("the prompt is empty and the model has no BOS token to start from");
        prompt.push_back(bos);
    }
    if (a.verbose) print_prompt_tokens(model, prompt);
    if (static_cast<int32_t>(prompt.size()) >= s.n_ctx()) {
        throw kt::ToolError("the prompt is " + std::to_string(prompt.size()) + " tokens but the context holds " +
                            std::to_string(s.n_ctx()));
    }
    s.set_keep(keep_count(a, model, prompt));
    std::fprintf(stderr, "kiln-cli: generate: n_prompt = %zu, n_predict = %d, n_keep = %d\n\n", prompt.size(), a.n_predict, s.keep());
    if (!a.no_display_prompt) {
        std::fwrite(prompt_text.data(), 1, prompt_text.size(), stdout);
        std::fflush(stdout);
    }
    if (!s.eval(prompt)) throw kt::ToolError("the prompt does not fit in the context");
    std::vector<kiln_token> out;
    const Stop stop = s.generate(a.n_predict, false, out);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (stop == Stop::ContextFull) std::fprintf(stderr, "kiln-cli: stopped: the context is full\n");
}

// Interactive chat. Each turn the whole history is rendered with the template and
// only what the KV cache does not hold yet is evaluated.
class Chat {
public:
    Chat(const Args& a, Session& s, kiln_model* model) : a_(a), s_(s), model_(model) {
        if (!a.chat_template_file.empty()) tmpl_ = kt::read_file(a.chat_template_file);
        if (!a.system_prompt.empty()) msgs_.push_back({"system", a.system_prompt});
    }

    void run() {
        std::fprintf(stderr, "kiln-cli: chat: type a message and press Enter; /exit or end of input quits\n\n");
        // A terminal shows what was typed; input from a pipe is echoed so the transcript reads as a dialogue.
        const bool typed_on_terminal = kt::stdin_is_terminal();
        std::string first = a_.prompt;
        bool have_first = !first.empty();
        while (true) {
            std::string line;
            if (have_first) {
                line = std::move(first);
                have_first = false;
                if (!a_.no_display_prompt) std::printf("> %s\n", line.c_str());
            } else {
                std::fputs("\n> ", stdout);
                std::fflush(stdout);
                if (!std::getline(std::cin, line)) {
                    std::fputc('\n', stdout);
                    break;
                }
                if (!line.empty() && line.back() == '\r') line.pop_back();
                if (!typed_on_terminal) std::printf("%s\n", line.c_str());
                if (line == "/exit") break;
                if (line.empty()) continue;
            }
            turn(line);
        }
        std::fflush(stdout);
    }

private:
    std::string render(bool add_generation_prompt) const {
        std::string json = "[";
        for (size_t i = 0; i < msgs_.size(); ++i) {
            if (i) json += ',';
            json += "{\"role\":" + json_string(msgs_[i].role) + ",\"content\":" + json_string(msgs_[i].content) + "}";
        }
        json += "]";
        const char* tmpl = tmpl_.empty() ? nullptr : tmpl_.c_str();
        const int32_t n = kiln_chat_apply_template_json(model_, tmpl, json.c_str(), nullptr, add_generation_prompt, nullptr, 0);
        if (n < 0) kt::fail_with_last_error("cannot apply the chat template");
        std::string out(static_cast<size_t>(n) + 1, '\0');
        kiln_chat_apply_template_json(model_, tmpl, json.c_str(), nullptr, add_generation_prompt, out.data(), n + 1);
        out.resize(static_cast<size_t>(n));
        return out;
    }

    // The text to evaluate for the newly rendered prompt, removing from the KV cache
    // what the template rendered differently than it was generated.
    std::string new_suffix(const std::string& formatted) {
        if (prev_formatted_.empty()) return formatted;
        const std::string in_kv = prev_formatted_ + reply_text_;
        if (formatted.compare(0, in_kv.size(), in_kv) == 0) return formatted.substr(in_kv.size());
        // Templates often trim the reply: re-evaluate it as rendered, if its KV positions are still known.
        if (formatted.compare(0, prev_formatted_.size(), prev_formatted_) == 0 && s_.shift_count() == reply_shift_count_) {
            s_.truncate(reply_pos_);
            return formatted.substr(prev_formatted_.size());
        }
        // After a context shift: llama.cpp's way, the difference to the history rendered without the new message.
        const Message last = msgs_.back();
        msgs_.pop_back();
        const std::string past = render(false);
        msgs_.push_back(last);
        size_t common = 0;
        while (common < past.size() && common < formatted.size() && past[common] == formatted[common]) ++common;
        return formatted.substr(common);
    }

    // The text of `reply` as it follows `before` (detokenized alone, its first
    // SentencePiece space would be dropped as if it began the text).
    std::string continuation(const std::vector<kiln_token>& before, const std::vector<kiln_token>& reply, bool special) const {
        std::vector<kiln_token> all = before;
        all.insert(all.end(), reply.begin(), reply.end());
        const std::string head = kt::detokenize(model_, before, special);
        const std::string whole = kt::detokenize(model_, all, special);
        if (whole.compare(0, head.size(), head) == 0) return whole.substr(head.size());
        return kt::detokenize(model_, reply, special);
    }

    void turn(const std::string& user) {
        msgs_.push_back({"user", user});
        const std::string formatted = render(true);
        const bool first = prev_formatted_.empty();
        const int32_t n_past_before = s_.n_past();
        const std::string suffix = new_suffix(formatted);
        const std::vector<kiln_token> tokens = tokenize_prompt(model_, suffix, first);
        if (a_.verbose) print_prompt_tokens(model_, tokens);
        if (static_cast<int32_t>(tokens.size()) + s_.keep() >= s_.n_ctx() || !s_.eval(tokens)) {
            std::fprintf(stderr, "kiln-cli: the message is %zu tokens but the context holds %d (%d in use); not sent\n",
                         tokens.size(), s_.n_ctx(), s_.n_past());
            msgs_.pop_back();
            if (s_.n_past() != n_past_before) {  // the reply was dropped from the KV cache: it now ends at the prompt
                reply_text_.clear();
                reply_pos_ = s_.n_past();
            }
            return;
        }
        if (first) s_.set_keep(keep_count(a_, model_, tokens));
        reply_pos_ = s_.n_past();
        reply_shift_count_ = s_.shift_count();
        std::vector<kiln_token> reply;
        const Stop stop = s_.generate(a_.n_predict, true, reply);
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (stop == Stop::ContextFull) std::fprintf(stderr, "kiln-cli: reply cut: the context is full\n");
        prev_formatted_ = formatted;
        reply_text_ = continuation(tokens, reply, true);
        msgs_.push_back({"assistant", continuation(tokens, reply, false)});
    }

    const Args& a_;
    Session& s_;
    kiln_model* model_;
    std::string tmpl_;
    std::vector<Message> msgs_;
    std::string prev_formatted_;  // the prompt rendered for the last reply
    std::string reply_text_;      // the last reply as evaluated (control tokens as text)
    int32_t reply_pos_ = 0;       // KV position where the last reply starts
    int reply_shift_count_ = 0;
};

int run(int argc, char** argv) {
    const kt::Stopwatch total;
    Args a;
    CLI::App app{"kiln-cli: generate text or chat with a GGUF model", "kiln-cli"};
    app.option_defaults()->always_capture_default();
    add_options(app, a);
    int exit_code = 0;
    if (!kt::parse_command_line(app, kt::translate_aliases(argc, argv, kAliases), exit_code)) return exit_code;

    std::string prompt = a.prompt;
    if (!a.prompt_file.empty()) prompt = kt::read_file(a.prompt_file);
    if (!a.conversation && !a.system_prompt.empty()) {
        std::fprintf(stderr, "kiln-cli: warning: --system-prompt is used only with --conversation\n");
    }
    if (a.verbose) std::fprintf(stderr, "kiln-cli: kiln %s (build %s)\nkiln-cli: %s\n", kiln_version(), kiln_build_commit(), kiln_system_info());

    kt::ModelPtr model = kt::load_model(a.model, false);
    kt::ContextPtr ctx = kt::new_context(model.get(), kt::context_params(a.ctx));
    kt::SamplerPtr smpl(kiln_sampler_new(kt::sampler_params(a.sampling), static_cast<int32_t>(kiln_n_ctx(ctx.get()))));
    if (!smpl) kt::fail_with_last_error("bad sampling parameters");

    std::fprintf(stderr, "kiln-cli: model: %s\n", kt::describe_model(model.get()).c_str());
    std::fprintf(stderr, "kiln-cli: context: %s\n", kt::describe_context(ctx.get(), a.ctx).c_str());
    std::fprintf(stderr, "kiln-cli: sampling: %s | seed = %u\n", kt::describe_sampler(a.sampling).c_str(), kiln_sampler_seed(smpl.get()));

    Session session(a, model.get(), ctx.get(), smpl.get());
    if (a.conversation) {
        if (!a.prompt_file.empty()) a.prompt = prompt;
        Chat(a, session, model.get()).run();
    } else {
        run_completion(a, session, model.get(), prompt);
    }
    std::fprintf(stderr, "\n");
    kt::print_timings(stderr, ctx.get(), total.ms());
    kt::print_memory(stderr, ctx.get());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "kiln-cli: %s\n", e.what());
        return 1;
    }
}
