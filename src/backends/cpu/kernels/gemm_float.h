// Activation tiles of the packed F16/BF16 GEMM kernels (gemm_float_*.cpp), shared by the
// scalar reference and the SIMD versions.
//
// F16 and BF16 weights are packed losslessly (block_f16x16: 16 rows x 2 consecutive
// elements per 64-byte chunk). Two activation formats, both tiles of kActTile rows cut
// into blocks of 32 columns, row j of a block at a constant offset (so a kernel reaches
// every operand from one pointer per block):
//   fast    (BF16): block = kActTile rows x 32 bf16 (64 bytes each); the kernels round the
//                   weights to BF16 too and use BF16 pair dot products (vdpbf16ps).
//   precise (F32):  block = kActTile rows x 32 floats (128 bytes each); products exact in
//                   float (F16 and BF16 weights widen to F32 without rounding).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/gemm.h"
#include "core/quant_blocks.h"

namespace kiln::cpu::float_gemm {

constexpr size_t kBf16RowBytes = kPackCols16 * 2;             // one row of a BF16 tile block
constexpr size_t kF32RowBytes = kPackCols16 * 4;              // one row of an F32 tile block
constexpr size_t kBf16BlockBytes = kActTile * kBf16RowBytes;  // 512
constexpr size_t kF32BlockBytes = kActTile * kF32RowBytes;    // 1024
constexpr size_t kWBlockBytes = sizeof(block_f16x16);         // 1024: 16 weight rows x 32 columns

inline size_t bf16_tile_bytes(int64_t K) { return static_cast<size_t>(K / kPackCols16) * kBf16BlockBytes; }
inline size_t f32_tile_bytes(int64_t K) { return static_cast<size_t>(K / kPackCols16) * kF32BlockBytes; }

}  // namespace kiln::cpu::float_gemm
