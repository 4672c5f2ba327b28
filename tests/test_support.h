// Helpers shared by the CPU kernel and op tests: random inputs and rows through a type's own
// quantize / dequantize (what the kernels read from a cache or weight of that type).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/quant.h"
#include "core/types.h"

namespace kiln::test {

inline std::vector<float> randn(std::mt19937& rng, int64_t n, float sigma = 1.0f) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng);
    return v;
}

// Rows of ne0 values in type t's storage.
inline std::vector<uint8_t> quantize_rows(Type t, const std::vector<float>& v, int64_t ne0) {
    const int64_t rows = static_cast<int64_t>(v.size()) / ne0;
    std::vector<uint8_t> q(row_size(t, ne0) * static_cast<size_t>(rows));
    quantize(t, v.data(), q.data(), rows, ne0);
    return q;
}

inline std::vector<float> dequantize_rows(Type t, const std::vector<uint8_t>& q, int64_t ne0) {
    const size_t rb = row_size(t, ne0);
    const int64_t rows = static_cast<int64_t>(q.size() / rb);
    std::vector<float> out(static_cast<size_t>(rows * ne0));
    for (int64_t r = 0; r < rows; ++r) dequantize_row(t, q.data() + static_cast<size_t>(r) * rb, out.data() + r * ne0, ne0);
    return out;
}

}  // namespace kiln::test
