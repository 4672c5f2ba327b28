// AMX int8 GEMM for Q4_K weights (gemm.h) in prompts and batched decoding, on CPUs where
// CpuFeatures::amx_int8; fewer than kMatrixUnitMinRows activation rows keep the AVX-512 VNNI
// kernels of gemm_kquants_avx512.cpp, and so does Q6_K (its 16-element sub-blocks would take a
// tilestored per 16 elements; see amx_tiles.h for what one costs).
//
// Each 16-row group is decoded once per activation slice by the VNNI kernels' own decoder
// (decode_kquant_group_avx512: unsigned 4-bit quants in the tile layout, and the float scale
// vectors d * sc and dmin * m). tdpbsud multiplies each 32-element sub-block's 8 x 32 signed
// activations with its 32 x 16 unsigned quants (amx_tiles.h, run_block_products), and the sums
// are scaled as tile_q4_K_decoded scales its vpdpbusd sums, operation for operation:
//   d per block (auto's prompts):  acc += (float(sum) * d_x) * (d * sc);  acc -= (dmin * m) * xsum
//   d per super-block (fast, PackedKernels::coarse):  t = sum over sub-blocks of float(sum) *
//   (d * sc), acc -= (dmin * m) * xsum per sub-block, acc += t * d_x per super-block,
// so the products are bit-identical to the VNNI kernels' (tested).
#include "backends/cpu/kernels/gemm.h"

#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "backends/cpu/kernels/amx_tiles.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

constexpr int kSubBlocks = QK_K / 32;

// One decoded group (dec, nsb super-blocks) x a pair of activation tiles (a16: their quants
// side by side; x0, x1: the tiles, for their scales and sums): out[i][j] = activation row j of
// tile i x the group's 16 rows.
template <bool kSuper>
void group_tiles(const uint8_t* dec, int64_t nsb, const uint8_t* a16, const uint8_t* x0, const uint8_t* x1, __m512 (&out)[2][kActTile]) {
    constexpr int NT = 2;
    struct Blocks {
        const uint8_t* dec;
        const uint8_t* x[2];
        __m512 acc[NT][kActTile];
        __m512 t[NT][kActTile];  // kSuper: the super-block's sum of float(sum) * (d * sc)
        const uint8_t* weights(int64_t b) const { return dec + (b / kSubBlocks) * detail::kKQuantDecodedBytes + (b % kSubBlocks) * (kPackRows * 32); }
        __attribute__((always_inline)) void add(const BlockSums& s, int64_t b) {
            const int64_t sb = b / kSubBlocks;
            const int j = static_cast<int>(b % kSubBlocks);
            const auto* scales = reinterpret_cast<const float*>(dec + sb * detail::kKQuantDecodedBytes + kSubBlocks * 8 * 64);
            const __m512 dsc = _mm512_load_ps(scales + 16 * j), dmn = _mm512_load_ps(scales + 16 * (kSubBlocks + j));
#pragma GCC unroll 2
            for (int i = 0; i < NT; ++i) {
                const uint8_t* xb = x[i] + b * kActBlockBytes;
                const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
                const auto* xsum = reinterpret_cast<const float*>(xb + 36 * kActTile);
#pragma GCC unroll 8
                for (int k = 0; k < kActTile; ++k) {
                    const __m512 sum = _mm512_cvtepi32_ps(_mm512_load_si512(s[i] + 16 * k));
                    if constexpr (kSuper) {
                        t[i][k] = j == 0 ? _mm512_mul_ps(sum, dsc) : _mm512_fmadd_ps(sum, dsc, t[i][k]);
                    } else {
                        acc[i][k] = _mm512_fmadd_ps(_mm512_mul_ps(sum, _mm512_set1_ps(xd[k])), dsc, acc[i][k]);
                    }
                    acc[i][k] = _mm512_fnmadd_ps(dmn, _mm512_set1_ps(xsum[k]), acc[i][k]);
                    // The super-block's d (every block of it holds the same).
                    if (kSuper && j == kSubBlocks - 1) acc[i][k] = _mm512_fmadd_ps(t[i][k], _mm512_set1_ps(xd[k]), acc[i][k]);
                }
            }
        }
    } blocks{dec, {x0, x1}, {}, {}};
    run_block_products<true>(blocks, nsb * kSubBlocks, a16);
#pragma GCC unroll 2
    for (int i = 0; i < NT; ++i) {
#pragma GCC unroll 8
        for (int k = 0; k < kActTile; ++k) out[i][k] = blocks.acc[i][k];
    }
}

// The VNNI kernels (gemm_kquants_avx512.cpp) for fewer rows; kSuper: their coarse variant.
template <bool kSuper>
const PackedKernels& vnni_kernels() {
    static const PackedKernels* const k = [] {
        CpuFeatures f = cpu_features();
        f.amx_int8 = false;
        const PackedKernels* v = detail::packed_kquants_avx512(Type::Q4_K, f);
        return kSuper ? v->coarse : v;
    }();
    return *k;
}

template <bool kSuper>
void gemm_amx(const GemmTask& t) {
    if (t.M * t.pairs < kMatrixUnitMinRows) {  // activation rows (precise mode: rows and residuals)
        vnni_kernels<kSuper>().gemm(t);
        return;
    }
    const int64_t nsb = t.K / QK_K;
    amx_q8_gemm(
        t, q8_tile_config(), static_cast<size_t>(nsb) * detail::kKQuantDecodedBytes, [&](const uint8_t* wg, uint8_t* buf) { detail::decode_kquant_group_avx512(Type::Q4_K, wg, nsb, buf); },
        [&](const uint8_t* buf, const uint8_t* a16, const uint8_t* x0, const uint8_t* x1, __m512(&acc)[2][kActTile]) {
            group_tiles<kSuper>(buf, nsb, a16, x0, x1, acc);
        });
}

constexpr PackedKernels kQ4_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q4K, ActScale::SuperBlock>, .gemm = gemm_amx<true>};
constexpr PackedKernels kQ4_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q4K>, .gemm = gemm_amx<false>, .coarse = &kQ4_KCoarse};

}  // namespace

namespace detail {
const PackedKernels* packed_kquants_amx(Type t) { return t == Type::Q4_K ? &kQ4_K : nullptr; }
}  // namespace detail

}  // namespace kiln::cpu

#else

namespace kiln::cpu::detail {
const PackedKernels* packed_kquants_amx(Type) { return nullptr; }
}  // namespace kiln::cpu::detail

#endif
