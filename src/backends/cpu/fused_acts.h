// Activations a product over packed weights computes itself, from the inputs of the nodes that
// would have made them: a product whose activations are rms_norm(h) * w (h itself optionally
// a + b, the residual add before the norm) or swiglu / geglu(gate, up) takes those nodes' work
// into its own activation quantizing (ops_matmul.cpp), and the nodes are not run.
//
// Why: in generation each of those nodes is one row, a microsecond of work, and a barrier of all
// threads after it; a llama layer had 21 barriers, 7 of them after such nodes. 1b Q4_0 tg32,
// AMX Xeon (kiln-bench --profile): the norms, their weight multiplies, the residual adds and
// swiglu took ~150 us a token and ~110 us of waits at their barriers; a build that skipped them
// (wrong numbers, the upper bound) was 1.2-1.7% faster (bench/ab_builds, both orders). Fused,
// 200 steps, both orders against the unfused build: Q4_0 0.992-0.994 x the time, Q8_0 0.999,
// Q4_K_M 0.998-1.000; prompts unchanged. Where each thread summed the whole row's squares itself
// (no barrier; half the row written by the other core) the gain was ~0.2%: the sums are split.
//
// The fused results are the same bits as the nodes' own (the same float operations in the same
// order: rms_scale.h, the activation kernels), so fusing changes no output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/cpu/kernels/activations.h"
#include "core/tensor.h"

namespace kiln::cpu {

struct FusedActs {
    enum class Kind : uint8_t {
        None,
        RmsNorm,  // x = rms_norm(h, eps) [* weight]
        Glu,      // x = glu(gate, up)
    };
    Kind kind = Kind::None;
    int n_nodes = 0;  // nodes just before the product that it replaces (not run)

    // RmsNorm: h [K, rows...] F32; where add_a is set, h is the add node's result add_a + add_b
    // (both [K, rows...] F32), which the product also writes, as the add node would have.
    const Tensor* h = nullptr;
    const Tensor* add_a = nullptr;
    const Tensor* add_b = nullptr;
    const float* weight = nullptr;  // [K], broadcast over the rows; null: none
    float eps = 0;
    // Glu: gate, up [K, rows...] F32
    const Tensor* gate = nullptr;
    const Tensor* up = nullptr;
    void (*glu)(const float* g, const float* u, float* y, int64_t n) = nullptr;

    bool fused() const { return kind != Kind::None; }
    // RmsNorm: the product first sums the squares of each row's chunks (kNormChunk floats,
    // rms_scale.h), split between its threads, and needs them all before any values.
    bool needs_sums() const { return kind == Kind::RmsNorm; }
    // The sums of squares of chunks [ch0, ch1) of h's row (i1, i2, i3) into sums[ch0, ch1); with
    // a fused add, those columns of h are computed and written first. Every chunk of every row
    // must be summed once, by one thread.
    void chunk_sums(int64_t i1, int64_t i2, int64_t i3, int64_t ch0, int64_t ch1, double* sums) const;
    // Columns [c0, c1) of activation row (i1, i2, i3) into out[0, c1 - c0). RmsNorm: sums holds
    // the row's chunk sums and h is written (chunk_sums on every thread, then a barrier).
    void values(int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1, const double* sums, float* out) const;
};

// What the product group nodes[i, i + n_products) (products of one activation tensor x, packed
// weights) may fuse of the nodes just before it: x = mul(rms_norm(h), w) or rms_norm(h) [with h =
// add(a, b) just before], or x = swiglu / geglu(gate, up); all F32 rows of x's shape, and no
// result left unwritten read by any other node (Tensor::readers) or the caller (is_output).
// Kind::None where nothing fits.
FusedActs match_fused_acts(std::span<Tensor* const> nodes, size_t i, size_t n_products, const ActivationKernels& act);

}  // namespace kiln::cpu
