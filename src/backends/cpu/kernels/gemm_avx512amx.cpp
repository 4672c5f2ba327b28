// AMX int8 GEMM for q4_0 and q8_0 weights (gemm.h) in prompts and batched decoding, on CPUs
// with AMX-INT8 (Intel Sapphire Rapids and later) where the OS grants this process the tile
// state (CpuFeatures::amx_int8). Fewer activation rows (generation) keep the AVX-512 VNNI tiles
// of gemm_avx512*.cpp, which stream the weights from memory; so do CPUs without AMX.
//
// One tdpbssd multiplies an 8 x 32 tile of int8 activations (one activation tile's rows of one
// 32-element block, read in place: gemm.h's tiles store them 32 bytes apart) with a 32 x 16
// tile of int8 weights (one block of a 16-row group) into 8 x 16 int32 sums: the 4,096
// products that take the VNNI tiles 64 vpdpbusd. The block's scales differ per row and
// column, so every block's sums leave the tile (tilestored) and are scaled and added in AVX-512
// registers as the VNNI tiles do (a conversion, a multiply by the activation's d, an FMA with
// the 16 weight scales): that float work, not the tile unit, sets the pace. The products
// are bit-identical to the VNNI tiles' (the same int32 sums, the same float operations in the
// same order; tested).
//
// Weights: each 16-row group is unpacked once per activation slice into signed int8 in the
// tile's layout (row r of the B tile: elements 4r..4r+3 of the 16 weight rows, which is
// exactly register r of the VNNI tiles) with its 16 scales as floats, so the offset of the
// packed layout (q + 8, q + 128) needs no correction term.
#include "backends/cpu/kernels/gemm.h"

// The tiles are compiled where the compiler targets AMX (GCC and clang with -mamx-int8, set
// for this file by src/CMakeLists.txt); elsewhere packed_amx has none (and amx_int8 is only
// ever detected on Linux).
#if defined(__AMX_INT8__) && defined(__AMX_TILE__)
#include <immintrin.h>

// GCC 12's AVX-512 headers trigger -Wmaybe-uninitialized on their own intrinsics (as in
// gemm_avx512_tiles.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <memory>

#include "backends/cpu/kernels/amx_tiles.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

// One unpacked block of a 16-row group: the B tile (8 rows of 64 bytes), then 16 float scales.
constexpr size_t kTileQuantBytes = kPackRows * 32;
constexpr size_t kUnpackedBlockBytes = kTileQuantBytes + kPackRows * sizeof(float);

// Unpacks nb blocks of a 16-row group (packed layout at wg) into out (kUnpackedBlockBytes each).
template <bool kQ4>
void unpack_group(const uint8_t* wg, int64_t nb, uint8_t* out) {
    constexpr size_t kBlockBytes = kQ4 ? sizeof(block_q4_0x16) : sizeof(block_q8_0x16);
    const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8), sign = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = wg + b * kBlockBytes;
        uint8_t* o = out + b * kUnpackedBlockBytes;
        if constexpr (kQ4) {
            // Chunk s: low nibbles are register s (elements 4s..4s+3), high nibbles register s + 4.
#pragma GCC unroll 4
            for (int s = 0; s < 4; ++s) {
                const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * s);
                _mm512_store_si512(o + 64 * s, _mm512_sub_epi8(_mm512_and_si512(v, m4), eight));
                _mm512_store_si512(o + 64 * (s + 4), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), eight));
            }
        } else {
            // q + 128 -> q: flip the sign bit.
#pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) _mm512_store_si512(o + 64 * c, _mm512_xor_si512(_mm512_loadu_si512(blk + 32 + 64 * c), sign));
        }
        _mm512_store_ps(o + kTileQuantBytes, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))));
    }
}

// Adds one block's int32 sums (8 activation rows x 16 weight rows, 64 bytes a row at c) of the
// activation tile block xb to acc, as the VNNI tiles do: acc += (float(sum) * d_x) * d_w.
__attribute__((always_inline)) inline void accumulate(const int32_t* c, const uint8_t* xb, __m512 dw, __m512 (&acc)[kActTile]) {
    const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
#pragma GCC unroll 8
    for (int j = 0; j < kActTile; ++j) {
        const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * j)), _mm512_set1_ps(xd[j]));
        acc[j] = _mm512_fmadd_ps(f, dw, acc[j]);
    }
}

// One unpacked group (wu, nb blocks) x a pair of activation tiles (a16: their quants side by
// side; x0, x1: the tiles, for their scales): out[i][j] = the products of activation row j of
// tile i with the group's 16 rows. The accumulators are locals, written out once at the end.
void group_tiles(const uint8_t* wu, int64_t nb, const uint8_t* a16, const uint8_t* x0, const uint8_t* x1, __m512 (&out)[2][kActTile]) {
    struct Blocks {
        const uint8_t* wu;
        const uint8_t* x0;
        const uint8_t* x1;
        __m512 acc0[kActTile], acc1[kActTile];
        const uint8_t* weights(int64_t b) const { return wu + b * kUnpackedBlockBytes; }
        __attribute__((always_inline)) void add(const BlockSums& s, int64_t b) {
            const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(weights(b) + kTileQuantBytes));
            accumulate(s[0], x0 + b * kActBlockBytes, dw, acc0);
            accumulate(s[1], x1 + b * kActBlockBytes, dw, acc1);
        }
    } blocks{wu, x0, x1, {}, {}};
    run_block_products<false>(blocks, nb, a16);
#pragma GCC unroll 8
    for (int j = 0; j < kActTile; ++j) {
        out[0][j] = blocks.acc0[j];
        out[1][j] = blocks.acc1[j];
    }
}

template <bool kQ4>
const PackedKernels& vnni_kernels() {
    static const PackedKernels* const k = [] {
        CpuFeatures f = cpu_features();
        f.amx_int8 = false;
        return detail::packed_avx512(kQ4 ? Type::Q4_0 : Type::Q8_0, f);
    }();
    return *k;
}

template <bool kQ4>
void gemm_amx(const GemmTask& t) {
    const int64_t rows = t.M * t.pairs;
    if (rows < kMatrixUnitMinRows) {  // activation rows (precise mode: rows and residuals)
        vnni_kernels<kQ4>().gemm(t);
        return;
    }
    const int64_t nb = t.K / 32;
    amx_q8_gemm(
        t, q8_tile_config(), static_cast<size_t>(nb) * kUnpackedBlockBytes, [&](const uint8_t* wg, uint8_t* buf) { unpack_group<kQ4>(wg, nb, buf); },
        [&](const uint8_t* buf, const uint8_t* a16, const uint8_t* x0, const uint8_t* x1, __m512(&acc)[2][kActTile]) { group_tiles(buf, nb, a16, x0, x1, acc); });
}

constexpr PackedKernels kQ4_0{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm_amx<true>};
constexpr PackedKernels kQ8_0{.offset = 128, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm_amx<false>};

}  // namespace

namespace detail {
const PackedKernels* packed_amx(Type t) {
    switch (t) {
        case Type::Q4_0: return &kQ4_0;
        case Type::Q8_0: return &kQ8_0;
        default: return nullptr;
    }
}
}  // namespace detail

#else

namespace detail {
const PackedKernels* packed_amx(Type) { return nullptr; }
}  // namespace detail

#endif

}  // namespace kiln::cpu
