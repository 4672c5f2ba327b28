// Micro-benchmark of the CPU dot-product kernels: a single-threaded GEMV
// (every row of a weight matrix against one activation row), per weight type
// and instruction set. Two matrix sizes: one that stays in the L2 cache
// (measures the kernel's arithmetic throughput) and one far larger than it
// (weights stream from L3 / memory, as in token generation).
//
// Reported: time per GEMV, weight bytes per second (bytes_per_second) and
// elements per second (items_per_second). Example:
//   bench_kernels --benchmark_filter='q4_K' --benchmark_min_time=0.2
//
// Attention (op_attention on 1 or 2 threads, per instruction set, against the
// row-by-row scalar loop it replaced, kept below as attn_rowwise):
//   tg: 1 token x 4096 cached keys; bytes_per_second is the K/V read rate.
//   pp: 512 tokens x 512 keys, causal; items_per_second counts q.k products.
//   bench_kernels --benchmark_filter='attn'

#include <benchmark/benchmark.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/thread_pool.h"
#include "core/tensor.h"
#include "core/kv_layout.h"
#include "core/quant.h"
#include "core/types.h"

namespace {

using kiln::Type;
using kiln::cpu::Isa;

struct Matrix {
    std::vector<uint8_t> weights;  // rows x row_bytes
    std::vector<uint8_t> act;      // one activation row in vec_dot_type
    size_t row_bytes = 0;
};

// Quantizing large matrices with the reference quantizers is slow, so one
// quantized block row is made and tiled (the kernels' speed does not depend
// on the values).
Matrix make_matrix(Type t, const kiln::cpu::TypeKernels& k, int64_t rows, int64_t n) {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(n)), act(static_cast<size_t>(n));
    for (auto& v : row) v = normal(rng);
    for (auto& v : act) v = normal(rng);
    Matrix m;
    m.row_bytes = kiln::row_size(t, n);
    std::vector<uint8_t> one(m.row_bytes);
    kiln::quantize(t, row.data(), one.data(), 1, n);
    m.weights.resize(m.row_bytes * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) std::copy(one.begin(), one.end(), m.weights.begin() + static_cast<ptrdiff_t>(r * m.row_bytes));
    m.act.resize(kiln::row_size(k.vec_dot_type, n));
    k.from_float(act.data(), m.act.data(), n);
    return m;
}

void BM_gemv(benchmark::State& state, Type t, Isa isa, int64_t rows, int64_t n) {
    if (!kiln::cpu::isa_supported(isa)) {
        state.SkipWithError("instruction set not supported here");
        return;
    }
    const auto& k = kiln::cpu::kernels(t, isa);
    const Matrix m = make_matrix(t, k, rows, n);
    std::vector<float> out(static_cast<size_t>(rows));
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; ++r) {
            k.vec_dot(n, &out[static_cast<size_t>(r)], m.weights.data() + r * m.row_bytes, m.act.data());
        }
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(m.weights.size()));
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * rows * n);
}

void BM_from_float(benchmark::State& state, Type t, Isa isa, int64_t n) {
    if (!kiln::cpu::isa_supported(isa)) {
        state.SkipWithError("instruction set not supported here");
        return;
    }
    const auto& k = kiln::cpu::kernels(t, isa);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng);
    std::vector<uint8_t> y(kiln::row_size(k.vec_dot_type, n));
    for (auto _ : state) {
        k.from_float(x.data(), y.data(), n);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
}

// ---- attention ------------------------------------------------------------------------------

// The attention op before the SIMD kernels (one (token, KV head) pair at a time, every K/V row
// dequantized with dequantize_row, scalar loops): the "before" of the attention benchmarks.
void attn_rowwise(const kiln::Tensor& t, std::vector<float>& buf) {
    const kiln::Tensor& q = *t.src[0];
    const kiln::Tensor& k = *t.src[1];
    const kiln::Tensor& v = *t.src[2];
    const kiln::Tensor& mask = *t.src[3];
    const float scale = t.fparams[0];
    const int64_t hd = q.ne[0], hdv = v.ne[0], n_head_kv = k.ne[1], n_tokens = q.ne[2], n_kv = k.ne[2];
    const int64_t n_rep = q.ne[1] / n_head_kv;
    buf.resize(static_cast<size_t>(hd + hdv + n_rep * hdv + 2 * n_rep));
    float *krow = buf.data(), *vrow = krow + hd, *acc = vrow + hdv, *mx = acc + n_rep * hdv, *sum = mx + n_rep;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (int64_t p = 0; p < n_tokens * n_head_kv; ++p) {
        const int64_t it = p / n_head_kv, hk = p % n_head_kv;
        const auto* m = reinterpret_cast<const float*>(mask.row(it));
        std::fill(acc, acc + n_rep * hdv, 0.0f);
        std::fill(mx, mx + n_rep, kNegInf);
        std::fill(sum, sum + n_rep, 0.0f);
        for (int64_t c = 0; c < n_kv; ++c) {
            if (m[c] == kNegInf) continue;
            kiln::dequantize_row(k.type, k.row(hk, c), krow, hd);
            kiln::dequantize_row(v.type, v.row(hk, c), vrow, hdv);
            for (int64_t r = 0; r < n_rep; ++r) {
                const auto* qr = reinterpret_cast<const float*>(q.row(hk * n_rep + r, it));
                float s = 0;
                for (int64_t j = 0; j < hd; ++j) s += qr[j] * krow[j];
                s = s * scale + m[c];
                float* a = acc + r * hdv;
                if (s > mx[r]) {
                    const float corr = mx[r] == kNegInf ? 0.0f : std::exp(mx[r] - s);
                    for (int64_t j = 0; j < hdv; ++j) a[j] = a[j] * corr + vrow[j];
                    sum[r] = sum[r] * corr + 1.0f;
                    mx[r] = s;
                } else {
                    const float e = std::exp(s - mx[r]);
                    for (int64_t j = 0; j < hdv; ++j) a[j] += e * vrow[j];
                    sum[r] += e;
                }
            }
        }
        for (int64_t r = 0; r < n_rep; ++r) {
            auto* out = reinterpret_cast<float*>(t.row(it)) + (hk * n_rep + r) * hdv;
            for (int64_t j = 0; j < hdv; ++j) out[j] = acc[r * hdv + j] / sum[r];
        }
    }
}

// One attention node over a filled F16 cache: llama-1B-like heads (32 query heads, 4 KV heads, hd 64).
struct AttnSetup {
    static constexpr int64_t hd = 64, n_head = 32, n_head_kv = 4;
    std::vector<float> qv, maskv, outv;
    std::vector<uint8_t> kv_k, kv_v;
    kiln::Tensor q, k_cache, k, v, mask, out;

    // k_panels: K stored in panels (core/kv_layout.h), as the model's F16 caches are.
    // interleaved: batched decoding instead of a causal block: token s is sequence s of n_tokens,
    // whose cells are a prompt of kPrefix consecutive cells (sequence by sequence) and then every
    // n_tokens-th cell (one per decode step, sequences in turn), as kiln-bench --parallel fills the cache.
    static constexpr int64_t kPrefix = 16;
    AttnSetup(int64_t n_tokens, int64_t n_kv, Type kv_type, bool k_panels = false, bool interleaved = false) {
        std::mt19937 rng(7);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        auto leaf = [](kiln::Tensor& t, Type type, std::array<int64_t, 4> ne, void* data) {
            t.type = type;
            t.ne = ne;
            kiln::set_contiguous_strides(t);
            t.data = data;
        };
        qv.resize(static_cast<size_t>(hd * n_head * n_tokens));
        for (auto& x : qv) x = normal(rng);
        std::vector<float> row(static_cast<size_t>(hd * n_head_kv * n_kv));
        for (auto& x : row) x = normal(rng);
        const int64_t k_cells = k_panels ? kiln::KPanels::padded_cells(n_kv) : n_kv;
        kv_k.resize(kiln::row_size(kv_type, hd * n_head_kv) * static_cast<size_t>(k_cells));
        kv_v.resize(kiln::row_size(kv_type, hd * n_head_kv) * static_cast<size_t>(n_kv));
        if (k_panels) {
            const kiln::KPanels kp{.type = kv_type, .head_dim = hd, .n_head = n_head_kv, .cells = k_cells};
            for (int64_t c = 0; c < n_kv; ++c) kp.write_cell(kv_k.data(), c, row.data() + c * hd * n_head_kv);
        } else {
            kiln::quantize(kv_type, row.data(), kv_k.data(), n_kv, hd * n_head_kv);
        }
        for (auto& x : row) x = normal(rng);
        kiln::quantize(kv_type, row.data(), kv_v.data(), n_kv, hd * n_head_kv);
        // causal: token t sits at cell n_kv - n_tokens + t
        maskv.assign(static_cast<size_t>(n_kv * n_tokens), -std::numeric_limits<float>::infinity());
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t c = 0; c <= n_kv - n_tokens + t; ++c) {
                const int64_t prompt_cells = kPrefix * n_tokens;
                const bool own = c < prompt_cells ? c / kPrefix == t : (c - prompt_cells) % n_tokens == t;
                if (!interleaved || own) maskv[static_cast<size_t>(t * n_kv + c)] = 0.0f;
            }
        }
        outv.resize(static_cast<size_t>(hd * n_head * n_tokens));
        leaf(q, Type::F32, {hd, n_head, n_tokens, 1}, qv.data());
        leaf(k_cache, kv_type, {hd * n_head_kv, k_cells, 1, 1}, kv_k.data());
        leaf(k, kv_type, {hd, n_head_kv, n_kv, 1}, kv_k.data());
        k.op = kiln::Op::View;  // the attention reads K panels through a view of the whole cache
        k.src[0] = &k_cache;
        leaf(v, kv_type, {hd, n_head_kv, n_kv, 1}, kv_v.data());
        leaf(mask, Type::F32, {n_kv, n_tokens, 1, 1}, maskv.data());
        leaf(out, Type::F32, {hd * n_head, n_tokens, 1, 1}, outv.data());
        out.op = kiln::Op::Attention;
        out.src = {&q, &k, &v, &mask};
        out.fparams[0] = 1.0f / std::sqrt(static_cast<float>(hd));
        out.iparams[0] = k_panels ? 1 : 0;
        out.iparams[1] = interleaved ? 1 : 0;  // AttentionParams::mixed_sequences
    }
    size_t kv_bytes() const { return kv_k.size() + kv_v.size(); }
};

// isa empty: the row-wise loop above (single-threaded); otherwise op_attention with KILN_CPU set.
// copies > 1: the runs cycle over that many copies of the cache (a layer's each, as the model's
// generation does), so K and V come from memory rather than the last-level cache.
void BM_attention(benchmark::State& state, std::optional<Isa> isa, int64_t n_tokens, int64_t n_kv, int n_threads,
                  bool k_panels, bool interleaved, int copies) {
    if (isa && !kiln::cpu::isa_supported(*isa)) {
        state.SkipWithError("instruction set not supported here");
        return;
    }
    AttnSetup s(n_tokens, n_kv, Type::F16, k_panels, interleaved);
    std::vector<std::vector<uint8_t>> kc(static_cast<size_t>(copies - 1), s.kv_k), vc(static_cast<size_t>(copies - 1), s.kv_v);
    int64_t run = 0;
    const char* old_env = std::getenv("KILN_CPU");
    const std::string saved = old_env ? old_env : "";
    if (isa) setenv("KILN_CPU", std::string(kiln::cpu::isa_name(*isa)).c_str(), 1);
    kiln::cpu::ThreadPool pool(n_threads);
    std::vector<uint8_t> scratch(kiln::cpu::scratch_bytes(s.out, n_threads, false, kiln::cpu::selected_isa()));
    std::vector<float> buf;
    for (auto _ : state) {
        if (copies > 1) {
            const auto c = static_cast<size_t>(run++ % copies);
            uint8_t* kd = c == 0 ? s.kv_k.data() : kc[c - 1].data();
            s.k_cache.data = s.k.data = kd;
            s.v.data = c == 0 ? s.kv_v.data() : vc[c - 1].data();
        }
        if (!isa) {
            attn_rowwise(s.out, buf);
        } else {
            pool.run([&](int ith, int nth) {
                kiln::cpu::ComputeContext ctx;
                ctx.ith = ith;
                ctx.nth = nth;
                ctx.barrier = [&] { pool.barrier(); };
                ctx.scratch = scratch.data();
                ctx.scratch_size = scratch.size();
                kiln::cpu::op_attention(s.out, ctx);
            });
        }
        benchmark::DoNotOptimize(s.outv.data());
        benchmark::ClobberMemory();
    }
    if (old_env) {
        setenv("KILN_CPU", saved.c_str(), 1);
    } else {
        unsetenv("KILN_CPU");
    }
    // K/V bytes each run reads (the whole cache for generation; causal pp reads about half of it
    // per query block, so the rate is only meaningful for tg).
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(s.kv_bytes()));
    int64_t pairs = 0;  // visible (query, key) pairs x heads
    for (float m : s.maskv) pairs += m == 0.0f;
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * pairs * AttnSetup::n_head);
}

void register_attention() {
    struct Shape {
        const char* name;
        int64_t n_tokens, n_kv;
        bool interleaved = false;
        int copies = 1;
    };
    // x32_kv1056: batched decoding, 32 sequences of 16 prompt cells + 17 decoded ones each;
    // tg1_kv4096_dram: 22 layers' caches in turn (88 MiB, the 1b model's at depth 4096), K in panels
    for (const Shape& sh : {Shape{"tg1_kv4096", 1, 4096}, Shape{"tg1_kv512", 1, 512}, Shape{"pp512_kv512", 512, 512},
                            Shape{"x32_kv1056", 32, 32 * (AttnSetup::kPrefix + 17), true},
                            Shape{"tg1_kv4096_dram", 1, 4096, false, 22}}) {
        const std::string base = std::string("attn_") + sh.name + "/f16/";
        const bool dram = sh.copies > 1;  // the model's case only: K in panels, vector kernels
        if (!dram) {
            benchmark::RegisterBenchmark((base + "rowwise_before/t1").c_str(), BM_attention, std::nullopt, sh.n_tokens,
                                         sh.n_kv, 1, false, sh.interleaved, 1)
                ->Unit(benchmark::kMicrosecond);
        }
        // K as rows (what q8_0 caches keep) and in panels (the F16 cache of the model)
        for (bool panels : {false, true}) {
            for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
                if (!kiln::cpu::isa_supported(isa) || (dram && (!panels || isa == Isa::Scalar))) continue;
                for (int nth : {1, 2}) {
                    const std::string name = base + (panels ? "k_panels/" : "k_rows/") + std::string(kiln::cpu::isa_name(isa)) +
                                             "/t" + std::to_string(nth);
                    benchmark::RegisterBenchmark(name.c_str(), BM_attention, std::optional<Isa>(isa), sh.n_tokens, sh.n_kv,
                                                 nth, panels, sh.interleaved, sh.copies)
                        ->Unit(benchmark::kMicrosecond)
                        ->UseRealTime();
                }
            }
        }
    }
}

int register_all() {
    const Type types[] = {Type::Q4_0, Type::Q8_0, Type::Q4_K, Type::Q6_K, Type::F16,  Type::BF16, Type::F32,
                          Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::IQ4_NL, Type::Q2_K, Type::Q3_K, Type::Q5_K};
    const Isa isas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon};
    constexpr int64_t n = 4096;
    for (Type t : types) {
        for (Isa isa : isas) {
            if (!kiln::cpu::isa_supported(isa)) continue;
            const std::string name = std::string(kiln::type_name(t)) + "/" + std::string(kiln::cpu::isa_name(isa));
            // ~0.6-1 MB of Q4 weights: L2-resident on most cores.
            benchmark::RegisterBenchmark(("gemv_l2/" + name).c_str(), BM_gemv, t, isa, int64_t{256}, n)
                ->Unit(benchmark::kMicrosecond);
            // 8192 rows x 4096: 18 MB (Q4_0) .. 134 MB (F32): streams from L3 or memory.
            benchmark::RegisterBenchmark(("gemv_big/" + name).c_str(), BM_gemv, t, isa, int64_t{8192}, n)
                ->Unit(benchmark::kMillisecond);
        }
    }
    for (Type t : {Type::Q4_0, Type::Q4_K, Type::F16, Type::BF16}) {
        for (Isa isa : isas) {
            if (!kiln::cpu::isa_supported(isa)) continue;
            const std::string name = std::string(kiln::type_name(t)) + "/" + std::string(kiln::cpu::isa_name(isa));
            benchmark::RegisterBenchmark(("from_float/" + name).c_str(), BM_from_float, t, isa, n)
                ->Unit(benchmark::kMicrosecond);
        }
    }
    register_attention();
    return 0;
}

const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
