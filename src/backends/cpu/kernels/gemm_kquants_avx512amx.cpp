// AMX int8 GEMM for Q4_K weights (gemm.h) in prompts and batched decoding, on CPUs where
// CpuFeatures::amx_int8: the PackedKernels::batch_pairs (precise mode) and batch of the VNNI
// kernels of gemm_kquants_avx512.cpp from kMatrixUnitMinRows activation rows (fewer keep
// those); outside precise mode the BF16 matrix tiles replace them where the CPU also has
// AMX-BF16 (gemm_bf16_matrix.h). Q6_K has no int8 tile kernels: its 16-element sub-blocks take
// two products and two tilestored per 32 elements, and measured (bench_gemm, one thread) +8%
// at 128 rows, -12% at 512.
//
// Each 16-row group is decoded once per activation slice, into the thread's scratch, by the
// VNNI kernels' own decoder (decode_kquant_group_avx512: unsigned 4-bit quants in the tile
// layout, and the float scale vectors d * sc and dmin * m). tdpbsud multiplies each 32-element
// sub-block's 16 x 32 signed activations with its 32 x 16 unsigned quants (amx_tiles.h,
// run_block_products), and the sums are scaled as tile_q4_K_decoded scales its vpdpbusd sums,
// operation for operation:
//   d per block (auto's prompts):  acc += (float(sum) * d_x) * (d * sc);  acc -= (dmin * m) * xsum
//   d per super-block (fast, PackedKernels::coarse):  t = sum over sub-blocks of float(sum) *
//   (d * sc), acc -= (dmin * m) * xsum per sub-block, acc += t * d_x per super-block,
// so the products are bit-identical to the VNNI kernels' (tested).
#include "backends/cpu/kernels/gemm.h"

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__linux__)
#include <immintrin.h>

#include "backends/cpu/kernels/amx_tiles.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

constexpr int kSubBlocks = QK_K / 32;

// One decoded group (dec, nsb super-blocks) x one 16-row activation tile (x): out[h][k] =
// activation row 8h + k x the group's 16 rows.
template <bool kSuper>
void tile_products(const uint8_t* dec, int64_t nsb, const uint8_t* x, __m512 (&out)[2][kActTile]) {
    struct Blocks {
        const uint8_t* dec;
        const uint8_t* x;
        __m512 acc[2][kActTile];
        __m512 t[2][kActTile];  // kSuper: the super-block's sum of float(sum) * (d * sc)
        const uint8_t* weights(int64_t b) const {
            return dec + (b / kSubBlocks) * detail::kKQuantDecodedBytes + (b % kSubBlocks) * (kPackRows * 32);
        }
        __attribute__((always_inline)) void add(const BlockSums& s, int64_t b) {
            const int64_t sb = b / kSubBlocks;
            const int j = static_cast<int>(b % kSubBlocks);
            const auto* scales = reinterpret_cast<const float*>(dec + sb * detail::kKQuantDecodedBytes + kSubBlocks * 8 * 64);
            const __m512 dsc = _mm512_load_ps(scales + 16 * j), dmn = _mm512_load_ps(scales + 16 * (kSubBlocks + j));
            const uint8_t* xb = x + b * kMatrixActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kMatrixTileRows);
            const auto* xsum = reinterpret_cast<const float*>(xb + 36 * kMatrixTileRows);
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
                for (int k = 0; k < kActTile; ++k) {
                    const int r = kActTile * h + k;
                    const __m512 sum = _mm512_cvtepi32_ps(_mm512_load_si512(s[h] + 16 * k));
                    if constexpr (kSuper) {
                        t[h][k] = j == 0 ? _mm512_mul_ps(sum, dsc) : _mm512_fmadd_ps(sum, dsc, t[h][k]);
                    } else {
                        acc[h][k] = _mm512_fmadd_ps(_mm512_mul_ps(sum, _mm512_set1_ps(xd[r])), dsc, acc[h][k]);
                    }
                    acc[h][k] = _mm512_fnmadd_ps(dmn, _mm512_set1_ps(xsum[r]), acc[h][k]);
                    // The super-block's d (every block of it holds the same).
                    if (kSuper && j == kSubBlocks - 1) acc[h][k] = _mm512_fmadd_ps(t[h][k], _mm512_set1_ps(xd[r]), acc[h][k]);
                }
            }
        }
    } blocks{dec, x, {}, {}};
    run_block_products<true>(blocks, nsb * kSubBlocks, x);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
        for (int k = 0; k < kActTile; ++k) out[h][k] = blocks.acc[h][k];
    }
}

template <bool kSuper>
void gemm_amx(const GemmTask& t) {
    const int64_t nsb = t.K / QK_K;
    amx_q8_gemm(
        t, q8_tile_config(), [&](const uint8_t* wg, uint8_t* buf) { detail::decode_kquant_group_avx512(Type::Q4_K, wg, nsb, buf); },
        [&](const uint8_t* buf, const uint8_t* x, __m512(&acc)[2][kActTile]) { tile_products<kSuper>(buf, nsb, x, acc); });
}

size_t decoded_bytes(int64_t K) { return static_cast<size_t>(K / QK_K) * detail::kKQuantDecodedBytes; }

// The coarse kernels take the same scratch (ops_matmul sizes it from the plan without coarse).
constexpr PackedKernels kQ4_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512_matrix, ActAux::Q4K, ActScale::SuperBlock>,
                                    .gemm = gemm_amx<true>, .tile_bytes = matrix_act_tile_bytes, .tile_rows = kMatrixTileRows, .gemm_scratch_bytes = decoded_bytes};
constexpr PackedKernels kQ4_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512_matrix, ActAux::Q4K>, .gemm = gemm_amx<false>,
                              .tile_bytes = matrix_act_tile_bytes, .tile_rows = kMatrixTileRows, .gemm_scratch_bytes = decoded_bytes};

}  // namespace

namespace detail {
const PackedKernels* packed_kquants_amx(Type t, bool coarse) { return t != Type::Q4_K ? nullptr : coarse ? &kQ4_KCoarse : &kQ4_K; }
}  // namespace detail

}  // namespace kiln::cpu

#else

namespace kiln::cpu::detail {
const PackedKernels* packed_kquants_amx(Type, bool) { return nullptr; }
}  // namespace kiln::cpu::detail

#endif
