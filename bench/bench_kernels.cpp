// Micro-benchmark of the CPU dot-product kernels: a single-threaded GEMV
// (every row of a weight matrix against one activation row), per weight type
// and instruction set. Two matrix sizes: one that stays in the L2 cache
// (measures the kernel's arithmetic throughput) and one far larger than it
// (weights stream from L3 / memory, as in token generation).
//
// Reported: time per GEMV, weight bytes per second (bytes_per_second) and
// elements per second (items_per_second). Example:
//   bench_kernels --benchmark_filter='q4_K' --benchmark_min_time=0.2

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
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
    return 0;
}

const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
