// Activation tiles and computation paths of the packed F16/BF16 GEMM kernels
// (gemm_float_*.cpp), shared by the scalar reference and the SIMD versions.
//
// F16 and BF16 weights are packed losslessly (block_f16x16: 16 rows x 2 consecutive
// elements per 64-byte chunk). Activation tiles hold kActTile rows cut into blocks of 32
// columns, row j of a block at a constant offset (so a kernel reaches every operand from
// one pointer per block). Paths (FastPath; precise mode is always F32):
//   F32  (precise): block = kActTile rows x 32 floats (128 bytes each); weights widen to
//        float exactly, products exact, float sums.
//   Bf16 (fast):    block = kActTile rows x 32 bf16 (64 bytes each); weights rounded to
//        BF16 in registers, BF16 pair dot products (vdpbf16ps), float sums.
//   Half (fast, F16 weights): block = kActTile rows x 32 fp16 (64 bytes each), each row
//        scaled by a power of two so its largest |x| is in [1, 2) (the tile ends with the
//        kActTile inverse scales, 64 bytes); weights used as stored; products and runs of
//        kHalfRun of them summed per lane in fp16 (AVX512-FP16 vfmadd231ph, one rounding
//        per step), the runs summed in float. |weights| < 65504 / (2 kHalfRun) = 511 keep
//        a run finite; larger ones make the run overflow, so precise mode or the F32
//        path is the answer for such models.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/gemm.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"

namespace kiln::cpu::float_gemm {

constexpr size_t kBf16RowBytes = kPackCols16 * 2;             // one row of a BF16 tile block
constexpr size_t kF32RowBytes = kPackCols16 * 4;              // one row of an F32 tile block
constexpr size_t kBf16BlockBytes = kActTile * kBf16RowBytes;  // 512
constexpr size_t kF32BlockBytes = kActTile * kF32RowBytes;    // 1024
constexpr size_t kWBlockBytes = sizeof(block_f16x16);         // 1024: 16 weight rows x 32 columns

inline size_t bf16_tile_bytes(int64_t K) { return static_cast<size_t>(K / kPackCols16) * kBf16BlockBytes; }
inline size_t f32_tile_bytes(int64_t K) { return static_cast<size_t>(K / kPackCols16) * kF32BlockBytes; }
constexpr int kHalfRun = 64;      // fp16 products summed per lane before widening to float
constexpr size_t kHalfTail = 64;  // after the blocks of a Half tile: float inverse scale per row
inline size_t half_tile_bytes(int64_t K) { return bf16_tile_bytes(K) + kHalfTail; }

// Power-of-two scale for a Half activation row with largest magnitude amax >= 0 (exact to
// apply and to undo): amax * scale in [1, 2), the scale clamped to 2^-100 .. 2^100; 1 for rows
// of zeros (and infinities, NaN). The common case from the exponent bits (generation calls it
// per attention row and token, where frexp and ldexp showed), the rest in half_row_scale_slow.
float half_row_scale_slow(float amax);
inline float half_row_scale(float amax) {
    const uint32_t e = std::bit_cast<uint32_t>(amax) >> 23;  // biased exponent: amax in [2^(e-127), 2^(e-126))
    if (e >= 27 && e <= 227) return std::bit_cast<float>((254u - e) << 23);  // 2^(127 - e)
    return half_row_scale_slow(amax);
}

// float -> bf16 as vcvtneps2bf16 does it: round to nearest even, subnormal inputs to (signed)
// zero, so the scalar references and the SIMD kernels round identically bit for bit.
inline bf16_t to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7f800000u) == 0) return static_cast<bf16_t>((x >> 16) & 0x8000u);
    return fp32_to_bf16(f);
}

enum class FastPath : uint8_t { F32, Bf16, Half };
// What fast mode computes through for weight type t on this CPU, the fastest measured:
// F16: Half with AVX512-FP16, else Bf16 with AVX512_BF16, else F32. BF16: F32 with
// AVX512-FP16 (those CPUs issue vdpbf16ps at a quarter of the FMA rate: half the FLOP rate
// of F32 FMAs; measured), else Bf16 with AVX512_BF16, else F32.
FastPath fast_path(Type t);

namespace detail {
// Kernels of one path (fast mode; their `precise` member is the F32 path), for tests.
const PackedKernels* float_scalar(Type t, FastPath p);
#if defined(KILN_ARCH_X86)
const PackedKernels* float_avx512(Type t, FastPath p, const CpuFeatures& f);  // null if f lacks it
#endif
}  // namespace detail

}  // namespace kiln::cpu::float_gemm
