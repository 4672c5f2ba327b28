// AMX-BF16 GEMM for F16 and BF16 weights (gemm_float.h) in fast-mode prompts and batches of
// kMatrixUnitMinRows rows or more, on CPUs with AMX-BF16 where the OS grants this process the
// tile state (CpuFeatures::amx_bf16). They are PackedKernels::batch of the fast path's kernels
// (gemm_float_avx512.cpp, packed_float_avx512): fewer rows keep that path, precise mode F32.
//
// What they compute is the Bf16 path's (gemm_float.h): activations rounded to BF16 (the same
// tiles, act_bf16), F16 weights rounded to BF16 (vcvtne2ps2bf16, as that path does in
// registers), products of BF16 pairs summed in float. Only the order of the float sums differs
// (tdpbf16ps adds a row's 32 products of a block in one step), so they are checked against
// the scalar Bf16 reference with a tolerance, not bit for bit. On CPUs with AVX512-FP16 this
// is coarser than the fast path of fewer rows (Half: F16 weights as stored), which costs KL
// divergence: docs/engine.md.
//
// One tdpbf16ps multiplies an 8 x 32 BF16 activation tile (one block of one activation tile,
// rows 64 bytes apart: read in place) with a 32 x 16 weight tile (one block of a 16-row group:
// chunk c of block_f16x16 holds elements 2c, 2c+1 of the 16 rows, which is the tile's row c)
// into 8 x 16 float sums that stay in the tile over all of K: the result leaves once per tile,
// with no per-block work outside the tile unit. 2 activation tiles x 2 weight groups: four
// accumulators, each operand loaded once per block for two products.
#include "backends/cpu/kernels/gemm_float.h"

#if defined(__AMX_BF16__) && defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__linux__)
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/kernels/amx_tiles.h"  // TileConfig

namespace kiln::cpu {
namespace {

using namespace float_gemm;

// Tile registers:
//   tmm0..tmm3  float sums, [activation tile i][group g] = tmm(2i + g): 8 rows x 16 floats
//   tmm4, tmm5  activation tiles 0 and 1, one block: 8 rows x 32 BF16
//   tmm6, tmm7  groups 0 and 1, one block: 16 rows (element pairs) x 16 columns x 2 BF16
TileConfig tile_config() {
    TileConfig c;
    for (int i = 0; i < 8; ++i) {
        c.rows[i] = i < 6 ? kActTile : 16;
        c.colsb[i] = 64;
    }
    return c;
}

// One 64-byte F16 chunk rounded to BF16 in the same lanes (as the Bf16 path's
// f16_chunk_to_bf16).
inline __m512i f16_chunk_to_bf16(const uint8_t* p) {
    const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Converts nb blocks of an F16 group to BF16, same layout.
void convert_group(const uint8_t* wg, int64_t nb, uint8_t* out) {
    for (int64_t c = 0; c < nb * static_cast<int64_t>(kWBlockBytes / 64); ++c) {
        _mm512_store_si512(out + 64 * c, f16_chunk_to_bf16(wg + 64 * c));
    }
}

// Activation tiles x0 (and x1: NT = 2) x groups w0 (and w1: NG = 2), BF16 blocks kWBlockBytes
// apart, nb blocks: the sums of all of K into the tile registers tmm(2i + g).
template <int NT, int NG>
void tile_products(const uint8_t* x0, const uint8_t* x1, const uint8_t* w0, const uint8_t* w1, int64_t nb) {
    _tile_zero(0);
    if constexpr (NG == 2) _tile_zero(1);
    if constexpr (NT == 2) _tile_zero(2);
    if constexpr (NT == 2 && NG == 2) _tile_zero(3);
    for (int64_t b = 0; b < nb; ++b) {
        _tile_loadd(6, w0 + b * kWBlockBytes, 64);
        _tile_loadd(4, x0 + b * kBf16BlockBytes, kBf16RowBytes);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (NG == 2) {
            _tile_loadd(7, w1 + b * kWBlockBytes, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if constexpr (NT == 2) {
            _tile_loadd(5, x1 + b * kBf16BlockBytes, kBf16RowBytes);
            _tile_dpbf16ps(2, 5, 6);
            if constexpr (NG == 2) _tile_dpbf16ps(3, 5, 7);
        }
    }
}

// Writes tile register tmm (8 x 16 floats) to y (rows y_stride floats apart), nc rows of it.
// The intrinsics take the register number as a literal, hence one case per register.
inline void store_sums(int tmm, float* y, int64_t y_stride, int nc) {
    alignas(64) float part[kActTile * 16];
    const bool whole = nc == kActTile;
    float* dst = whole ? y : part;
    const int64_t stride = whole ? y_stride * static_cast<int64_t>(sizeof(float)) : 64;
    // GCC's _tile_stored declares no memory operand; this one clobbers memory, so the copy
    // below reads what it wrote (once per tile and K: no cost that shows).
#define KILN_TILE_STORED(n) asm volatile("tilestored %%tmm" #n ", (%0,%1,1)" : : "r"(dst), "r"(stride) : "memory")
    switch (tmm) {
        case 0: KILN_TILE_STORED(0); break;
        case 1: KILN_TILE_STORED(1); break;
        case 2: KILN_TILE_STORED(2); break;
        default: KILN_TILE_STORED(3); break;
    }
#undef KILN_TILE_STORED
    if (!whole) {
        for (int j = 0; j < nc; ++j) _mm512_storeu_ps(y + j * y_stride, _mm512_load_ps(part + 16 * j));
    }
}

template <Type T>
void gemm_amx(const GemmTask& t) {
    constexpr bool kF16 = T == Type::F16;
    const int64_t nb = t.K / kPackCols16;
    const size_t tile_bytes = bf16_tile_bytes(t.K);
    const int64_t n_tiles = (t.M + kActTile - 1) / kActTile;
    // Activation tiles in slices that stay in L2 (as the q8 kernels' are), in pairs; F16 groups
    // are converted once per slice.
    const int64_t slice = std::max<int64_t>(2, static_cast<int64_t>((size_t{1} << 20) / tile_bytes) & ~int64_t{1});
    uint8_t* cbuf = t.scratch;  // F16: two groups converted to BF16 (amx_f16_scratch_bytes)
    const TileConfig cfg = tile_config();
    _tile_loadconfig(&cfg);
    for (int64_t s0 = 0; s0 < n_tiles; s0 += slice) {
        const int64_t s1 = std::min(n_tiles, s0 + slice);
        for (int64_t g = 0; g < t.n_groups; g += 2) {
            const int ng = static_cast<int>(std::min<int64_t>(2, t.n_groups - g));
            const uint8_t* w0 = t.w + g * t.w_group_bytes;
            const uint8_t* w1 = w0 + (ng == 2 ? t.w_group_bytes : 0);
            if constexpr (kF16) {
                for (int i = 0; i < ng; ++i) convert_group(t.w + (g + i) * t.w_group_bytes, nb, cbuf + i * nb * kWBlockBytes);
                compiler_fence();  // tileloadd declares no memory operand: the stores go first
                w0 = cbuf;
                w1 = cbuf + (ng == 2 ? nb * kWBlockBytes : 0);
            }
            for (int64_t ti = s0; ti < s1; ti += 2) {
                const int nt = static_cast<int>(std::min<int64_t>(2, s1 - ti));
                const uint8_t* x0 = t.x + ti * tile_bytes;
                const uint8_t* x1 = x0 + (nt == 2 ? tile_bytes : 0);
                if (nt == 2) {
                    if (ng == 2) tile_products<2, 2>(x0, x1, w0, w1, nb);
                    else tile_products<2, 1>(x0, x1, w0, w1, nb);
                } else {
                    if (ng == 2) tile_products<1, 2>(x0, x1, w0, w1, nb);
                    else tile_products<1, 1>(x0, x1, w0, w1, nb);
                }
                for (int i = 0; i < nt; ++i) {
                    const int64_t m0 = (ti + i) * kActTile;
                    const int nc = static_cast<int>(std::min<int64_t>(kActTile, t.M - m0));
                    for (int gi = 0; gi < ng; ++gi) store_sums(2 * i + gi, t.y + m0 * t.y_stride + (g + gi) * kPackRows, t.y_stride, nc);
                }
            }
            compiler_fence();  // the next pair's conversion overwrites what these tiles read
        }
    }
    _tile_release();
}

}  // namespace

namespace float_gemm::detail {
GemmFn float_amx_gemm(Type t) {
    switch (t) {
        case Type::F16: return gemm_amx<Type::F16>;
        case Type::BF16: return gemm_amx<Type::BF16>;
        default: return nullptr;
    }
}
}  // namespace float_gemm::detail

}  // namespace kiln::cpu

#else

namespace kiln::cpu::float_gemm::detail {
GemmFn float_amx_gemm(Type) { return nullptr; }
}  // namespace kiln::cpu::float_gemm::detail

#endif
