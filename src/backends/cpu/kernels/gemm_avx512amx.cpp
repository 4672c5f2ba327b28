// AMX int8 GEMM for q4_0 and q8_0 weights (gemm.h) in prompts and batched decoding, on CPUs
// with AMX-INT8 (Intel Sapphire Rapids and later) where the OS grants this process the tile
// state (CpuFeatures::amx_int8): the PackedKernels::batch_pairs (precise mode) and batch of the
// VNNI kernels of gemm_avx512*.cpp from kMatrixUnitMinRows activation rows; outside precise
// mode the BF16 matrix tiles replace them where the CPU also has AMX-BF16 (gemm_bf16_matrix.h).
// Fewer rows (generation) keep the VNNI tiles, which stream the weights from memory; so do CPUs
// without AMX.
//
// One tdpbssd multiplies a 16 x 32 tile of int8 activations (one block of a 16-row activation
// tile, gemm.h's kMatrixTileRows layout, read in place) with a 32 x 16 tile of int8 weights
// (one block of a 16-row group) into 16 x 16 int32 sums: the 8,192 products that take the VNNI
// tiles 128 vpdpbusd. The block's scales differ per row and column, so every block's sums
// leave the tile (tilestored) and are scaled and added in AVX-512 registers as the VNNI tiles
// do (a conversion, a multiply by the activation's d, an FMA with the 16 weight scales); see
// amx_tiles.h for what a block costs. The products are bit-identical to the VNNI tiles' (the
// same int32 sums, the same float operations in the same order; tested).
//
// Weights: each 16-row group is unpacked once per activation slice, into the thread's scratch,
// as signed int8 in the tile's layout (row r of the B tile: elements 4r..4r+3 of the 16 weight
// rows, which is exactly register r of the VNNI tiles) with its 16 scales as floats, so the
// offset of the packed layout (q + 8, q + 128) needs no correction term.
#include "backends/cpu/kernels/gemm.h"

// The tiles are compiled where the compiler targets AMX (GCC and clang with -mamx-int8, set
// for this file by src/CMakeLists.txt) on Linux, the one system where amx_int8 is detected
// (the OS grant, cpu_features.cpp); elsewhere packed_amx has none. (MinGW's GCC 12 AMX
// intrinsics do not even assemble: their stride operand is a `long`, 32 bits on Windows.)
#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__linux__)
#include <immintrin.h>

#include <algorithm>

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

// Adds one block's int32 sums for 8 activation rows (16 weight rows each, 64 bytes a row at
// c; xd: the rows' d) to acc, as the VNNI tiles do: acc += (float(sum) * d_x) * d_w.
__attribute__((always_inline)) inline void accumulate(const int32_t* c, const float* xd, __m512 dw, __m512 (&acc)[kActTile]) {
#pragma GCC unroll 8
    for (int j = 0; j < kActTile; ++j) {
        const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * j)), _mm512_set1_ps(xd[j]));
        acc[j] = _mm512_fmadd_ps(f, dw, acc[j]);
    }
}

// One unpacked group (wu, nb blocks) x one 16-row activation tile (x): out[h][j] = the
// products of activation row 8h + j with the group's 16 rows. The accumulators are locals,
// written out once at the end.
void tile_products(const uint8_t* wu, int64_t nb, const uint8_t* x, __m512 (&out)[2][kActTile]) {
    struct Blocks {
        const uint8_t* wu;
        const uint8_t* x;
        __m512 acc0[kActTile], acc1[kActTile];
        const uint8_t* weights(int64_t b) const { return wu + b * kUnpackedBlockBytes; }
        __attribute__((always_inline)) void add(const BlockSums& s, int64_t b) {
            const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(weights(b) + kTileQuantBytes));
            const auto* xd = reinterpret_cast<const float*>(x + b * kMatrixActBlockBytes + 32 * kMatrixTileRows);
            accumulate(s[0], xd, dw, acc0);
            accumulate(s[1], xd + kActTile, dw, acc1);
        }
    } blocks{wu, x, {}, {}};
    run_block_products<false>(blocks, nb, x);
#pragma GCC unroll 8
    for (int j = 0; j < kActTile; ++j) {
        out[0][j] = blocks.acc0[j];
        out[1][j] = blocks.acc1[j];
    }
}

template <bool kQ4>
void gemm_amx(const GemmTask& t) {
    const int64_t nb = t.K / 32;
    amx_q8_gemm(
        t, q8_tile_config(), [&](const uint8_t* wg, uint8_t* buf) { unpack_group<kQ4>(wg, nb, buf); },
        [&](const uint8_t* buf, const uint8_t* x, __m512(&acc)[2][kActTile]) { tile_products(buf, nb, x, acc); });
}

size_t unpacked_bytes(int64_t K) { return static_cast<size_t>(K / 32) * kUnpackedBlockBytes; }

constexpr PackedKernels kQ4_0{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512_matrix, ActAux::Corr>, .gemm = gemm_amx<true>,
                              .tile_bytes = matrix_act_tile_bytes, .tile_rows = kMatrixTileRows, .gemm_scratch_bytes = unpacked_bytes};
constexpr PackedKernels kQ8_0{.offset = 128, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512_matrix, ActAux::Corr>, .gemm = gemm_amx<false>,
                              .tile_bytes = matrix_act_tile_bytes, .tile_rows = kMatrixTileRows, .gemm_scratch_bytes = unpacked_bytes};

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

}  // namespace kiln::cpu

#else

namespace kiln::cpu::detail {
const PackedKernels* packed_amx(Type) { return nullptr; }
}  // namespace kiln::cpu::detail

#endif
