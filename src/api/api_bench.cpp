// The C API, bench section: figures kiln-bench relates its timings to (bytes a
// generated token has to read, the default thread count). They are computed
// from the model's tensors and the context's cache layout, not measured.
#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "api/api_internal.h"
#include "backends/cpu/thread_pool.h"
#include "core/types.h"

using kiln::api::guarded;

extern "C" {

int32_t kiln_bench_default_threads(void) {
    return guarded([]() -> int32_t { return static_cast<int32_t>(kiln::cpu::physical_cores()); }, int32_t{1});
}

uint64_t kiln_bench_weight_bytes_per_token(const kiln_model* m) {
    return guarded(
        [&]() -> uint64_t {
            if (!m) throw std::invalid_argument("kiln_bench_weight_bytes_per_token: model is NULL");
            const kiln::ModelWeights& w = m->model->weights();
            // A set, so a tensor used twice (tied output = token embedding) counts once.
            std::unordered_set<const kiln::Tensor*> read;
            auto add = [&](const kiln::Tensor* t) {
                if (t) read.insert(t);
            };
            add(w.output_norm);
            add(w.output);
            for (const kiln::LayerWeights& l : w.layers) {
                for (const kiln::Tensor* t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.bq, l.bk, l.bv, l.q_norm, l.k_norm,
                                              l.post_attn_norm, l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down, l.post_ffn_norm}) {
                    add(t);
                }
            }
            uint64_t bytes = 0;
            for (const kiln::Tensor* t : read) bytes += t->nbytes();
            // The embedding lookup reads one row [n_embd] unless the whole table is already counted as the output.
            if (w.tok_embd && !read.contains(w.tok_embd)) bytes += w.tok_embd->row_bytes();
            return bytes;
        },
        uint64_t{0});
}

uint64_t kiln_bench_kv_bytes_per_token(const kiln_context* c, int32_t n_attended) {
    return guarded(
        [&]() -> uint64_t {
            if (!c) throw std::invalid_argument("kiln_bench_kv_bytes_per_token: context is NULL");
            if (n_attended < 0) throw std::invalid_argument("kiln_bench_kv_bytes_per_token: negative n_attended");
            const kiln::HParams& hp = c->ctx->model().hparams();
            const kiln::ContextParams& p = c->ctx->params();
            // One cell of one layer: a K row [n_embd_k_gqa] and a V row [n_embd_v_gqa].
            const uint64_t cell = kiln::row_size(p.type_k, hp.n_embd_k_gqa()) + kiln::row_size(p.type_v, hp.n_embd_v_gqa());
            uint64_t bytes = 0;
            for (int64_t il = 0; il < hp.n_layer; ++il) {
                const int64_t cells = hp.is_swa(il) ? std::min<int64_t>(n_attended, hp.sliding_window) : n_attended;
                bytes += cell * static_cast<uint64_t>(cells);
            }
            return bytes;
        },
        uint64_t{0});
}

bool kiln_bench_set_op_profiling(kiln_context* c, bool on) {
    return guarded(
        [&]() -> bool {
            if (!c) throw std::invalid_argument("kiln_bench_set_op_profiling: context is NULL");
            c->ctx->set_op_profiling(on);
            return true;
        },
        false);
}

int32_t kiln_bench_op_times(const kiln_context* c, kiln_bench_op_time* rows, int32_t n_max) {
    return guarded(
        [&]() -> int32_t {
            if (!c) throw std::invalid_argument("kiln_bench_op_times: context is NULL");
            if (n_max < 0 || (n_max > 0 && !rows)) throw std::invalid_argument("kiln_bench_op_times: no room for the rows");
            const std::vector<kiln::cpu::OpTime> times = c->ctx->op_times();
            for (size_t i = 0; i < times.size() && i < static_cast<size_t>(n_max); ++i) {
                const kiln::cpu::OpTime& t = times[i];
                kiln_bench_op_time& r = rows[i];
                r = {};
                std::snprintf(r.name, sizeof r.name, "%s", t.name.c_str());
                r.calls = t.calls;
                r.op_ms = t.op_ms;
                r.op_max_ms = t.op_max_ms;
                r.wait_ms = t.wait_ms;
                r.weight_bytes = t.weight_bytes;
            }
            return static_cast<int32_t>(times.size());
        },
        int32_t{-1});
}

}  // extern "C"
