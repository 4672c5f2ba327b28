// The C API, part 2: models, contexts, batches, decoding, KV operations, performance counters.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "api/api_internal.h"

using kiln::api::copy_out;
using kiln::api::guarded;

extern "C" {

struct kiln_model_params kiln_model_default_params(void) {
    return kiln_model_params{.n_gpu_layers = 0, .use_mmap = true, .use_mlock = false, .progress_callback = nullptr,
                             .progress_callback_user_data = nullptr, .use_repack = true};
}

kiln_model* kiln_model_load(const char* path, struct kiln_model_params params) {
    return guarded(
        [&]() -> kiln_model* {
            if (!path) throw std::invalid_argument("kiln_model_load: path is NULL");
            if (params.n_gpu_layers > 0) {
                std::fprintf(stderr, "kiln: warning: no GPU backend is built; %d layers requested for offload run on the CPU\n",
                             params.n_gpu_layers);
            }
            kiln::ModelParams mp{.n_gpu_layers = params.n_gpu_layers, .use_mmap = params.use_mmap, .use_mlock = params.use_mlock,
                                 .repack = params.use_repack, .progress = {}};
            if (params.progress_callback) {
                mp.progress = [cb = params.progress_callback, ud = params.progress_callback_user_data](float p) { return cb(p, ud); };
            }
            auto m = std::make_unique<kiln_model>();
            m->model = kiln::Model::load(path, mp);
            return m.release();
        },
        static_cast<kiln_model*>(nullptr));
}

void kiln_model_free(kiln_model* model) { delete model; }

int32_t kiln_model_n_vocab(const kiln_model* m) { return static_cast<int32_t>(m->model->hparams().n_vocab); }
int32_t kiln_model_n_ctx_train(const kiln_model* m) { return static_cast<int32_t>(m->model->hparams().n_ctx_train); }
int32_t kiln_model_n_embd(const kiln_model* m) { return static_cast<int32_t>(m->model->hparams().n_embd); }
int32_t kiln_model_n_layer(const kiln_model* m) { return static_cast<int32_t>(m->model->hparams().n_layer); }
uint64_t kiln_model_size(const kiln_model* m) { return m->model->weights_bytes(); }
uint64_t kiln_model_repacked_size(const kiln_model* m) { return m->model->repacked_bytes(); }
uint64_t kiln_model_n_params(const kiln_model* m) { return static_cast<uint64_t>(m->model->n_params()); }
double kiln_model_load_ms(const kiln_model* m) { return m->model->load_ms(); }
int32_t kiln_model_desc(const kiln_model* m, char* buf, size_t n) { return copy_out(m->model->description(), buf, n); }

int32_t kiln_model_meta_count(const kiln_model* m) { return static_cast<int32_t>(m->model->file().metadata().size()); }

int32_t kiln_model_meta_key_by_index(const kiln_model* m, int32_t i, char* buf, size_t n) {
    const auto& md = m->model->file().metadata();
    if (i < 0 || static_cast<size_t>(i) >= md.size()) return -1;
    return copy_out(md[static_cast<size_t>(i)].key, buf, n);
}

int32_t kiln_model_meta_val_str(const kiln_model* m, const char* key, char* buf, size_t n) {
    if (!key) return -1;
    const kiln::gguf::Value* v = m->model->file().find(key);
    if (!v) return -1;
    return copy_out(v->type == kiln::gguf::ValueType::STRING ? v->as_string(key) : v->to_string(), buf, n);
}

struct kiln_context_params kiln_context_default_params(void) {
    return kiln_context_params{.n_ctx = 4096, .n_batch = 2048, .n_ubatch = 512, .n_threads = 0, .type_k = 1, .type_v = 1,
                               .n_seq_max = 1, .matmul_precision = 0, .cpu_mask = nullptr, .cpu_strict = false, .poll = 50,
                               .n_threads_batch = 0};
}

kiln_context* kiln_context_new(const kiln_model* model, struct kiln_context_params p) {
    return guarded(
        [&]() -> kiln_context* {
            if (!model) throw std::invalid_argument("kiln_context_new: model is NULL");
            auto type_of = [](int32_t id, const char* what) {
                const auto tr = kiln::type_traits(static_cast<uint32_t>(id));
                if (!tr || id < 0) throw std::invalid_argument(std::string("kiln_context_new: unknown ") + what + " type id " + std::to_string(id));
                return tr->type;
            };
            auto precision_of = [](int32_t v) {
                if (v < 0 || v > 2) throw std::invalid_argument("kiln_context_new: matmul_precision must be 0, 1 or 2");
                return static_cast<kiln::MatmulPrecision>(v);
            };
            auto placement_of = [](const kiln_context_params& q) {
                try {
                    return kiln::cpu::ThreadPlacement{.cpus = kiln::cpu::parse_cpu_mask(q.cpu_mask ? q.cpu_mask : ""),
                                                      .strict = q.cpu_strict, .poll = q.poll};
                } catch (const std::invalid_argument& e) {
                    throw std::invalid_argument(std::string("kiln_context_new: ") + e.what());
                }
            };
            auto c = std::make_unique<kiln_context>();
            c->owner = model;
            c->ctx = std::make_unique<kiln::Context>(
                *model->model, kiln::ContextParams{.n_ctx = p.n_ctx, .n_batch = p.n_batch, .n_ubatch = p.n_ubatch,
                                                   .n_threads = p.n_threads, .n_threads_batch = p.n_threads_batch, .type_k = type_of(p.type_k, "K cache"),
                                                   .type_v = type_of(p.type_v, "V cache"), .n_seq_max = p.n_seq_max,
                                                   .matmul_precision = precision_of(p.matmul_precision),
                                                   .placement = placement_of(p)});
            return c.release();
        },
        static_cast<kiln_context*>(nullptr));
}

void kiln_context_free(kiln_context* ctx) { delete ctx; }
uint32_t kiln_n_ctx(const kiln_context* c) { return c->ctx->n_ctx(); }
uint32_t kiln_n_batch(const kiln_context* c) { return c->ctx->params().n_batch; }
uint32_t kiln_n_seq_max(const kiln_context* c) { return c->ctx->params().n_seq_max; }
int32_t kiln_n_threads(const kiln_context* c) { return c->ctx->n_threads(); }
int32_t kiln_n_threads_batch(const kiln_context* c) { return c->ctx->n_threads_batch(); }
const kiln_model* kiln_get_model(const kiln_context* c) { return c->owner; }

kiln_batch kiln_batch_init(int32_t n_tokens_max, int32_t n_seq_max) {
    kiln_batch b{};
    if (n_tokens_max <= 0 || n_seq_max <= 0) return b;
    const auto n = static_cast<size_t>(n_tokens_max);
    b.token = static_cast<kiln_token*>(std::calloc(n, sizeof(kiln_token)));
    b.pos = static_cast<int32_t*>(std::calloc(n, sizeof(int32_t)));
    b.n_seq_id = static_cast<int32_t*>(std::calloc(n, sizeof(int32_t)));
    b.seq_id = static_cast<int32_t**>(std::calloc(n + 1, sizeof(int32_t*)));  // NULL-terminated for kiln_batch_free
    b.logits = static_cast<int8_t*>(std::calloc(n, 1));
    for (size_t i = 0; i < n; ++i) b.seq_id[i] = static_cast<int32_t*>(std::calloc(static_cast<size_t>(n_seq_max), sizeof(int32_t)));
    return b;
}

void kiln_batch_free(kiln_batch b) {
    if (b.seq_id) {
        for (size_t i = 0; b.seq_id[i]; ++i) std::free(b.seq_id[i]);
    }
    std::free(b.token);
    std::free(b.pos);
    std::free(b.n_seq_id);
    std::free(b.seq_id);
    std::free(b.logits);
}

int32_t kiln_decode(kiln_context* c, kiln_batch batch) {
    try {
        kiln::api::clear_last_error();
        if (!c || batch.n_tokens <= 0 || !batch.token) throw std::invalid_argument("kiln_decode: empty batch or NULL context");
        kiln::Batch b;
        for (int32_t i = 0; i < batch.n_tokens; ++i) {
            uint64_t seqs = 0;
            const int32_t ns = batch.n_seq_id ? batch.n_seq_id[i] : 0;
            for (int32_t s = 0; s < ns; ++s) {
                const int32_t id = batch.seq_id[i][s];
                if (id < 0 || id >= kiln::kMaxSequences) throw std::invalid_argument("kiln_decode: sequence id " + std::to_string(id) + " is out of range");
                seqs |= uint64_t{1} << id;
            }
            if (ns == 0) seqs = 1;  // no sequence given: sequence 0
            b.tokens.push_back(batch.token[i]);
            b.pos.push_back(batch.pos ? batch.pos[i] : c->ctx->seq_pos_max(0) + 1 + i);
            b.seqs.push_back(seqs);
            b.logits.push_back(batch.logits ? (batch.logits[i] != 0) : (i == batch.n_tokens - 1));
        }
        c->ctx->decode(b);
        return 0;
    } catch (const kiln::ContextFullError& e) {
        kiln::api::set_last_error(e.what());
        return 1;
    } catch (const std::exception& e) {
        kiln::api::set_last_error(e.what());
        return -1;
    }
}

float* kiln_get_logits_ith(kiln_context* c, int32_t i) {
    return guarded([&]() -> float* { return const_cast<float*>(c->ctx->logits(i)); }, static_cast<float*>(nullptr));
}

void kiln_kv_clear(kiln_context* c) { c->ctx->kv_clear(); }
bool kiln_kv_seq_rm(kiln_context* c, int32_t seq, int32_t p0, int32_t p1) {
    return guarded([&] { c->ctx->seq_rm(seq, p0, p1); return true; }, false);
}
void kiln_kv_seq_cp(kiln_context* c, int32_t src, int32_t dst, int32_t p0, int32_t p1) { c->ctx->seq_cp(src, dst, p0, p1); }
void kiln_kv_seq_keep(kiln_context* c, int32_t seq) { c->ctx->seq_keep(seq); }
void kiln_kv_seq_add(kiln_context* c, int32_t seq, int32_t p0, int32_t p1, int32_t delta) { c->ctx->seq_add(seq, p0, p1, delta); }
int32_t kiln_kv_seq_pos_max(const kiln_context* c, int32_t seq) { return c->ctx->seq_pos_max(seq); }
int32_t kiln_kv_used_cells(const kiln_context* c) { return static_cast<int32_t>(c->ctx->kv_used()); }

struct kiln_perf_context_data kiln_perf_context(const kiln_context* c) {
    const auto& p = c->ctx->perf();
    return kiln_perf_context_data{.t_load_ms = c->owner->model->load_ms(), .t_p_eval_ms = p.t_prompt_ms, .t_eval_ms = p.t_eval_ms,
                                  .t_sample_ms = p.t_sample_ms, .n_p_eval = static_cast<int32_t>(p.n_prompt),
                                  .n_eval = static_cast<int32_t>(p.n_eval), .n_sample = static_cast<int32_t>(p.n_sample)};
}
void kiln_perf_context_reset(kiln_context* c) { c->ctx->perf() = kiln::PerfCounters{}; }
uint64_t kiln_kv_bytes(const kiln_context* c) { return c->ctx->kv_bytes(); }
uint64_t kiln_compute_bytes(const kiln_context* c) { return c->ctx->compute_bytes(); }

}  // extern "C"
