// Scalar reference quantization: the ground truth every SIMD and GPU kernel is
// tested against, and what kiln-quantize uses to write files.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace kiln {

// Quantizes nrows rows of n_per_row floats from src into dst, which must hold
// nrows * row_size(type, n_per_row) bytes. importance, if not null, holds
// n_per_row non-negative weights (an importance matrix row: the mean squared
// activation per column); quantizers that can use it minimise the weighted
// error. Returns the bytes written.
// Throws std::invalid_argument if the type has no reference quantizer or
// n_per_row is not a multiple of its block size.
size_t quantize(Type type, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                const float* importance = nullptr);

// Converts n elements (a multiple of the block size) of a row of `type` back to float32.
// Throws std::invalid_argument as quantize does.
void dequantize_row(Type type, const void* src, float* dst, int64_t n);

// True if quantize/dequantize_row accept the type.
bool has_reference(Type type);

}  // namespace kiln
