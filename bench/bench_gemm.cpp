// Micro-benchmark of the packed GEMM kernels (backends/cpu/kernels/gemm.h), single
// thread: weight type x activation rows M (1 = generation, 2 = precise generation,
// 128 = a prompt ubatch) on a 2048 x 5632 matrix (the 1.1B model's FFN). With dram:1 the
// iterations cycle over copies of the matrix (512 MiB in all), so the weights stream from
// memory as in generation, not from the last-level cache.
// BM_PackedGemmDown streams generation's other shape from memory: K = 5632 (the FFN's down
// product, 2048 rows), whose activation row (22 KiB of lines in the q8 tiles, 22 KiB of floats
// in F16's) no longer stays in L1 beside a weight group; M:512 is that shape's prompt ubatch,
// whose outputs a thread adds up over K in slabs.
// BM_PackedGemmL2 runs generation's shapes on a 2048 x 256 matrix that stays in L2 (about
// 300 KiB for the 4-bit types): the kernels' own arithmetic rate, with no cache level behind
// it (the 2048 x 5632 one streams from L3, which on a Zen 4 core reads at about the rate the
// M = 1 kernels compute).
// Reported: items_per_second = multiply-adds per second (x2 for FLOP/s), and
// bytes_per_second = weight bytes streamed per second.
//   bench_gemm --benchmark_filter='q4_0/M:1'
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <vector>

#include "backends/cpu/kernels/gemm.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_repack.h"

namespace {

using kiln::Type;

void run_packed_gemm(benchmark::State& state, Type t, int64_t N, int64_t K = 2048) {
    const int64_t M = state.range(0);
    const bool precise = state.range(1) != 0;
    const bool dram = state.range(2) != 0;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    // One quantized row, tiled (speed does not depend on the values).
    std::vector<float> f(K);
    for (auto& v : f) v = nd(rng);
    const size_t rb = kiln::row_size(t, K);
    const size_t copies = dram ? (size_t{512} << 20) / (rb * N) + 1 : 1;
    std::vector<uint8_t> row(rb), rows(rb * N);
    // Huge pages where the system gives them, as the model's packed weights (Model::pack_weights) get.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t packed_bytes = (rb * N * copies + kHuge - 1) / kHuge * kHuge;
    std::unique_ptr<uint8_t, decltype(&std::free)> packed_mem(static_cast<uint8_t*>(std::aligned_alloc(kHuge, packed_bytes)),
                                                              &std::free);
    if (!packed_mem) {
        state.SkipWithError("cannot allocate the weight copies");
        return;
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(packed_mem.get(), packed_bytes, MADV_HUGEPAGE);
#endif
    std::span<uint8_t> packed(packed_mem.get(), packed_bytes);
    kiln::quantize(t, f.data(), row.data(), 1, K);
    for (int64_t n = 0; n < N; ++n) std::copy(row.begin(), row.end(), rows.begin() + n * rb);
    for (size_t c = 0; c < copies; ++c) kiln::pack_rows(t, rows.data(), rb, packed.data() + c * rb * N, K, N);
    // The kernels and activation format of the mode (F16/BF16: BF16 fast, F32 precise).
    const kiln::cpu::PackedPlan plan = kiln::cpu::packed_plan(*kiln::cpu::packed_kernels(t), K, precise, M);
    const auto& pk = *plan.k;
    const int pairs = plan.pairs;
    std::vector<uint8_t> xq(kiln::cpu::packed_act_bytes(*kiln::cpu::packed_kernels(t), K, M, precise));
    std::vector<float> x(K * M);
    for (auto& v : x) v = nd(rng);
    for (int64_t m = 0; m < M; ++m) {
        const int64_t a = m * pairs;
        pk.quantize_act(x.data() + m * K, K, pk.offset, xq.data() + (a / plan.tile_rows) * plan.tile_bytes,
                        static_cast<int>(a % plan.tile_rows), pairs == 2);
    }
    std::vector<float> y(N * M);
    // The kernels' per-thread scratch (GemmTask::scratch), 64-byte aligned.
    std::vector<uint8_t> scratch(pk.gemm_scratch_bytes ? pk.gemm_scratch_bytes(K) + 64 : 0);
    uint8_t* scratch_at = scratch.empty() ? nullptr : scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    kiln::cpu::GemmTask task{.K = K, .w = packed.data(), .w_group_bytes = rb * kiln::kPackRows, .n_groups = N / kiln::kPackRows,
                                   .x = xq.data(), .M = M, .pairs = pairs, .y = y.data(), .y_stride = N, .scratch = scratch_at};
    size_t copy = 0;
    for (auto _ : state) {
        task.w = packed.data() + copy * rb * N;
        copy = (copy + 1) % copies;
        pk.gemm(task);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetItemsProcessed(state.iterations() * K * N * M * pairs);
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(rb * N));
}

void BM_PackedGemm(benchmark::State& state, Type t) { run_packed_gemm(state, t, 5632); }
void BM_PackedGemmL2(benchmark::State& state, Type t) { run_packed_gemm(state, t, 256); }

void args(benchmark::internal::Benchmark* b) {
    b->ArgNames({"M", "precise", "dram"});
    for (int64_t m : {1, 2, 8, 128, 512}) b->Args({m, 0, 0});
    b->Args({1, 1, 0});
    b->Args({1, 0, 1});
    b->Args({1, 1, 1});
}

// F16/BF16: both modes at every size (precise = F32 products, fast = BF16).
void float_args(benchmark::internal::Benchmark* b) {
    b->ArgNames({"M", "precise", "dram"});
    for (int64_t p : {0, 1}) {
        for (int64_t m : {1, 2, 8, 128}) b->Args({m, p, 0});
    }
    b->Args({512, 0, 0});
    b->Args({1, 1, 1});
}

BENCHMARK_CAPTURE(BM_PackedGemm, q4_0, Type::Q4_0)->Apply(args);
BENCHMARK_CAPTURE(BM_PackedGemm, q8_0, Type::Q8_0)->Apply(args);
BENCHMARK_CAPTURE(BM_PackedGemm, f16, Type::F16)->Apply(float_args);
BENCHMARK_CAPTURE(BM_PackedGemm, bf16, Type::BF16)->Apply(float_args);
BENCHMARK_CAPTURE(BM_PackedGemm, q4_K, Type::Q4_K)->Apply(args);
BENCHMARK_CAPTURE(BM_PackedGemm, q6_K, Type::Q6_K)->Apply(args);

// Generation's shapes with the weights in L2.
void l2_args(benchmark::internal::Benchmark* b) {
    b->ArgNames({"M", "precise", "dram"});
    b->Args({1, 0, 0});
    b->Args({1, 1, 0});
    b->Args({2, 0, 0});
}
BENCHMARK_CAPTURE(BM_PackedGemmL2, q4_0, Type::Q4_0)->Apply(l2_args);
BENCHMARK_CAPTURE(BM_PackedGemmL2, q8_0, Type::Q8_0)->Apply(l2_args);
BENCHMARK_CAPTURE(BM_PackedGemmL2, f16, Type::F16)->Apply(l2_args);
BENCHMARK_CAPTURE(BM_PackedGemmL2, q4_K, Type::Q4_K)->Apply(l2_args);
BENCHMARK_CAPTURE(BM_PackedGemmL2, q6_K, Type::Q6_K)->Apply(l2_args);

// Generation's down-product shape (K = 5632, 2048 rows) streamed from memory.
void BM_PackedGemmDown(benchmark::State& state, Type t) { run_packed_gemm(state, t, 2048, 5632); }
void down_args(benchmark::internal::Benchmark* b) {
    b->ArgNames({"M", "precise", "dram"});
    b->Args({1, 1, 1});
    b->Args({512, 0, 0});
}
BENCHMARK_CAPTURE(BM_PackedGemmDown, q4_0, Type::Q4_0)->Apply(down_args);
BENCHMARK_CAPTURE(BM_PackedGemmDown, q8_0, Type::Q8_0)->Apply(down_args);
BENCHMARK_CAPTURE(BM_PackedGemmDown, f16, Type::F16)->Apply(down_args);
BENCHMARK_CAPTURE(BM_PackedGemmDown, q4_K, Type::Q4_K)->Apply(down_args);
BENCHMARK_CAPTURE(BM_PackedGemmDown, q6_K, Type::Q6_K)->Apply(down_args);

// Quantizing one activation row into its tile (what a product of one row, generation, does first
// on one thread while the others wait): K = 2048 (q, k, v, gate, up) and 5632 (the 1b model's down).
void BM_QuantizeAct(benchmark::State& state, Type t) {
    const int64_t K = state.range(0);
    const bool precise = state.range(1) != 0;
    const kiln::cpu::PackedPlan plan = kiln::cpu::packed_plan(*kiln::cpu::packed_kernels(t), K, precise, 1);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(K);
    for (auto& v : x) v = nd(rng);
    std::vector<uint8_t> xq(kiln::cpu::packed_act_bytes(*kiln::cpu::packed_kernels(t), K, 1, precise));
    for (auto _ : state) {
        plan.k->quantize_act(x.data(), K, plan.k->offset, xq.data(), 0, plan.pairs == 2);
        benchmark::DoNotOptimize(xq.data());
    }
    state.SetItemsProcessed(state.iterations() * K);
}
void quantize_args(benchmark::internal::Benchmark* b) {
    b->ArgNames({"K", "precise"});
    for (int64_t k : {2048, 5632}) {
        for (int64_t p : {0, 1}) b->Args({k, p});
    }
}
BENCHMARK_CAPTURE(BM_QuantizeAct, q4_0, Type::Q4_0)->Apply(quantize_args);
BENCHMARK_CAPTURE(BM_QuantizeAct, q4_K, Type::Q4_K)->Apply(quantize_args);
BENCHMARK_CAPTURE(BM_QuantizeAct, f16, Type::F16)->Apply(quantize_args);

}  // namespace

BENCHMARK_MAIN();
