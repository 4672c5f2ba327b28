// Per-type scalar reference kernels behind core/quant.h (internal to src/core).
// Each quantize_row_* takes n elements (a multiple of the type's block size) and
// optional importance weights w (n floats, may be null).
#pragma once

#include <cstdint>

#include "core/quant_blocks.h"

namespace kiln::ref {

// Plain float formats.
void quantize_row_f16(const float* x, fp16_t* y, int64_t n, const float* w);
void dequantize_row_f16(const fp16_t* x, float* y, int64_t n);
void quantize_row_bf16(const float* x, bf16_t* y, int64_t n, const float* w);
void dequantize_row_bf16(const bf16_t* x, float* y, int64_t n);

// Legacy 32-element blocks (quant_legacy.cpp). Without w, bit-exact with the
// GGML reference quantizers (and gguf-py); with w, a weighted search.
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n, const float* w);
void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n);
void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n, const float* w);
void dequantize_row_q4_1(const block_q4_1* x, float* y, int64_t n);
void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n, const float* w);
void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n);
void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n, const float* w);
void dequantize_row_q5_1(const block_q5_1* x, float* y, int64_t n);
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n, const float* w);
void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n);
void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n, const float* w);
void dequantize_row_q8_1(const block_q8_1* x, float* y, int64_t n);

// K-quants, 256-element super-blocks (quant_kquants.cpp).
void quantize_row_q2_K(const float* x, block_q2_K* y, int64_t n, const float* w);
void dequantize_row_q2_K(const block_q2_K* x, float* y, int64_t n);
void quantize_row_q3_K(const float* x, block_q3_K* y, int64_t n, const float* w);
void dequantize_row_q3_K(const block_q3_K* x, float* y, int64_t n);
void quantize_row_q4_K(const float* x, block_q4_K* y, int64_t n, const float* w);
void dequantize_row_q4_K(const block_q4_K* x, float* y, int64_t n);
void quantize_row_q5_K(const float* x, block_q5_K* y, int64_t n, const float* w);
void dequantize_row_q5_K(const block_q5_K* x, float* y, int64_t n);
void quantize_row_q6_K(const float* x, block_q6_K* y, int64_t n, const float* w);
void dequantize_row_q6_K(const block_q6_K* x, float* y, int64_t n);
void quantize_row_q8_K(const float* x, block_q8_K* y, int64_t n, const float* w);
void dequantize_row_q8_K(const block_q8_K* x, float* y, int64_t n);

// Non-linear 4-bit (quant_iq4nl.cpp).
void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n, const float* w);
void dequantize_row_iq4_nl(const block_iq4_nl* x, float* y, int64_t n);

}  // namespace kiln::ref
