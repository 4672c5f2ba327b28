// The RMS norm's scale of one row, shared by the norm op (ops_norm_rope.cpp) and by products that
// normalise their own activations (fused_acts.cpp): both must give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln::cpu {

// The sum of squares of a row is the sum, in order, of its chunks' sums: a product that normalises
// its own activations (fused_acts.h) has each thread sum the chunks it computes, and adds them up
// after a barrier, with the same bits as the norm op summing the whole row. One super-block.
inline constexpr int64_t kNormChunk = 256;

// Sum of at(j)^2 for j in [j0, j1) (at most kNormChunk) in double, in kLanes interleaved partial
// sums added at the end: the compiler turns the lanes into vector registers. One running sum was
// a chain of dependent double adds, 4 cycles each: ~1.4 us per 2048-wide row, 1.4% of a 512-token
// prompt (kiln-bench --profile, Zen 5). The order of the additions is fixed, so every build,
// instruction set and caller gives the same sum. at(j): the row's float j.
template <typename At>
double chunk_sum_squares(At at, int64_t j0, int64_t j1) {
    constexpr int kLanes = 16;
    double lane[kLanes] = {};
    int64_t j = j0;
    for (; j + kLanes <= j1; j += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
            const float v = at(j + k);
            lane[k] += static_cast<double>(v) * v;
        }
    }
    for (int k = 0; j < j1; ++j, ++k) {
        const float v = at(j);
        lane[k] += static_cast<double>(v) * v;
    }
    double sum = 0;
    for (double v : lane) sum += v;
    return sum;
}

// The sum of the chunks' sums chunk[0, n_chunks), in order.
inline double add_chunk_sums(const double* chunk, int64_t n_chunks) {
    double sum = 0;
    for (int64_t c = 0; c < n_chunks; ++c) sum += chunk[c];
    return sum;
}

// 1 / sqrt(mean(x^2) + eps) of a row of n floats whose squares sum to sum_sq, rounded to float.
inline float rms_scale(double sum_sq, int64_t n, float eps) {
    return static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
}

// The same of a row of n floats at(j).
template <typename At>
float rms_scale(At at, int64_t n, float eps) {
    double sum = 0;
    for (int64_t j = 0; j < n; j += kNormChunk) sum += chunk_sum_squares(at, j, j + kNormChunk < n ? j + kNormChunk : n);
    return rms_scale(sum, n, eps);
}

}  // namespace kiln::cpu
