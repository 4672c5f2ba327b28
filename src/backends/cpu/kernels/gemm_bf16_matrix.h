// BF16 matrix tiles: the AMX-BF16 GEMM of fast-mode batches (kMatrixUnitMinRows activation
// rows or more) for weights of any type that has a BF16 decoder here (F16, BF16, Q4_K, Q6_K).
//
// Activations are rounded to BF16 (round to nearest even) in tiles of kMatrixTileRows rows:
// block b of a tile holds its 16 rows' elements 32b..32b+31, 64 bytes a row, so one block is
// one 16 x 32 A operand of tdpbf16ps, read in place. Each 16-row weight group is decoded once
// per activation slice into BF16 B operands in block_f16x16's arrangement (chunk c of a block:
// elements 2c, 2c+1 of the 16 rows; core/quant_blocks.h): the dequantized weight w, computed
// in float and rounded to BF16 once. Products of BF16 pairs are exact in float and summed in
// float over all of K inside the tile unit, so nothing per block leaves the tiles: where the
// int8 tiles store and scale every 32-element block's sums (amx_tiles.h), these store once per
// tile and K.
//
// Lower precision than the weights for F16 (8 of its 11 significant bits) and a little for
// the K-quants (d * sc * q - dmin * m, rounded to 8 bits); activations carry 8 significant bits
// per element rather than 8-bit quants per block. KL divergence: docs/engine.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/gemm.h"

namespace kiln::cpu::bf16_matrix {

constexpr size_t kRowBytes = 64;                                // 32 BF16 of one activation row
constexpr size_t kActBlockBytes = kMatrixTileRows * kRowBytes;  // 1 KiB: one A operand
constexpr size_t kWBlockBytes = 1024;                           // 16 weight rows x 32 BF16: one B operand

// Bytes of one activation tile (kMatrixTileRows rows) of K-element rows.
inline size_t tile_bytes(int64_t K) { return static_cast<size_t>(K / 32) * kActBlockBytes; }
// Per-thread scratch of the gemm (GemmTask::scratch): two groups decoded to BF16.
inline size_t scratch_bytes(int64_t K) { return 2 * static_cast<size_t>(K / 32) * kWBlockBytes; }

namespace detail {
// Column col of a tile from one row of K floats (with_resid is never set: precise mode keeps
// other kernels).
void act_scalar(const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid);
// The reference kernels of weight type t (row by row: dequantize_row, round to BF16, float sums
// in element order), null for types without BF16 kernels; the scalar mirror of the AMX ones.
const PackedKernels* kernels_scalar(Type t);
// True where the batches of weight type t take the BF16 matrix tiles: the CPU has AMX-BF16
// (CpuFeatures::amx_bf16) and the build has their kernels for t.
bool amx_batches(Type t);
// Kernels k of weight type t (scalar: the scalar reference kernels) with the BF16 matrix
// kernels as their batch kernels, and their coarse kernels' (fast mode), where amx_batches(t):
// the AMX ones on the AVX-512 side, the reference ones on the scalar side (which computes what
// the fastest kernels of the CPU compute). Precise mode's residual pairs keep k's batch_pairs
// on the AVX-512 side (the AMX int8 kernels) and k's own on the scalar side. Else k.
const PackedKernels* with_batches(Type t, const PackedKernels* k, bool scalar);
#if defined(KILN_ARCH_X86)
// The AMX-BF16 kernels of weight type t, null for types without a decoder or where the build
// has no AMX kernels (gemm_bf16_matrix_avx512amx.cpp).
const PackedKernels* kernels_amx(Type t);
#endif
}  // namespace detail

}  // namespace kiln::cpu::bf16_matrix
