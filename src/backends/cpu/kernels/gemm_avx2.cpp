// AVX2 packed GEMM kernels (gemm.h) for q4_0 and q8_0 weights, for CPUs without AVX-512
// VNNI (Haswell..Comet Lake, Zen 2/3).
//
// A 256-bit register holds one 32-bit lane for each of 8 weight rows, so each 64-byte chunk
// of an x16 block (4 quants of each of 16 rows) is two registers: rows 0-7 and rows 8-15
// (the two "halves"). Without vpdpbusd, 4 quants x 4 activation quants per lane take
// vpmaddubsw (u8 x s8 -> pairs summed to s16, saturating) and vpmaddwd with ones (-> s32):
//  - q4_0: quants 0..15 (offset 8 included) times |x| <= 127: a pair is at most 3810, and the
//    16 products an s16 lane gathers over the whole block at most 30480, so the block's 8
//    vpmaddubsw add up exactly in s16 and one vpmaddwd per block widens them; the tile's corr
//    then removes the offset.
//  - q8_0: stored quants 0..255 would saturate, so they are made signed again (q ^ 0x80, the
//    true quant) and multiplied as |w| x sign(x, w) (at most 2 * 128 * 127 per pair); the
//    tile's corr, which compensates the offset 128, is therefore not added.
// Per block and activation row: int->float, scale by the activation's d, FMA with the 8
// weight scales of the half, as the AVX-512 kernel does. A tile call takes up to 4
// activation rows x 16 weight rows: 8 independent int accumulation chains per block.
// Measured (bench_gemm, 2048 x 5632, one thread, portable build): q4_0 4.4x and q8_0 1.9x
// the MAC rate of the AVX2 per-row kernels at M = 128; at M = 1 both reach the AVX-512
// kernels' (memory-bound) rate.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/gemm.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

template <bool kQ4>
constexpr size_t kBlockBytes = kQ4 ? sizeof(block_q4_0x16) : sizeof(block_q8_0x16);

constexpr int kSubRows = 4;              // activation rows one tile call computes (16 ymm registers: 8 int accumulators + operands)
// Activation bytes kept hot per weight pass: the L2 of the AVX2-only CPUs (256-512 KiB), less
// room for the weight group.
constexpr size_t kSliceBytes = size_t{192} << 10;

inline __m256i bcast32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// An empty asm the accumulator passes through. Without it GCC reassociates the
// accumulation chains into trees of products that all live at once, which spills most of
// them with 16 ymm registers. (Saturating s16 adds, which it leaves alone, run on fewer
// ports than vpaddw on Intel: measured 18% slower for q4_0.)
inline void keep_chain(__m256i& v) {
#if defined(__GNUC__)
    __asm__("" : "+x"(v));
#else
    (void)v;
#endif
}

// s32 sums of one block against R activation rows, [row][half] with one lane per weight
// row: sum_i quant_i x activation quant_i (q4_0: stored quants, offset removed by adding
// corr; q8_0: true quants). Both halves in one pass, so each activation broadcast feeds two
// products.
template <bool kQ4, int R>
inline void block_sums(const uint8_t* qs, const uint8_t* xb, int c0, __m256i (&s)[R][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    auto xq = [&](int j, int byte) { return bcast32(xb + 32 * (c0 + j) + byte); };
    if constexpr (kQ4) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        __m256i s16[R][2];
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) s16[j][0] = s16[j][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * c));
            const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * c + 32));
            // Low nibbles: elements 4c..4c+3; rows interleaved, 2R independent chains.
            const __m256i lo0 = _mm256_and_si256(v0, m4), lo1 = _mm256_and_si256(v1, m4);
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) {
                const __m256i x = xq(j, 4 * c);
                s16[j][0] = _mm256_add_epi16(s16[j][0], _mm256_maddubs_epi16(lo0, x));
                s16[j][1] = _mm256_add_epi16(s16[j][1], _mm256_maddubs_epi16(lo1, x));
            }
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) keep_chain(s16[j][0]), keep_chain(s16[j][1]);
            // High nibbles: elements 16+4c..16+4c+3.
            const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) {
                const __m256i x = xq(j, 16 + 4 * c);
                s16[j][0] = _mm256_add_epi16(s16[j][0], _mm256_maddubs_epi16(hi0, x));
                s16[j][1] = _mm256_add_epi16(s16[j][1], _mm256_maddubs_epi16(hi1, x));
            }
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) keep_chain(s16[j][0]), keep_chain(s16[j][1]);
        }
        const auto* xc = reinterpret_cast<const int32_t*>(xb + 36 * kActTile) + c0;
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) {
            const __m256i corr = _mm256_set1_epi32(xc[j]);
            s[j][0] = _mm256_add_epi32(_mm256_madd_epi16(s16[j][0], ones), corr);
            s[j][1] = _mm256_add_epi32(_mm256_madd_epi16(s16[j][1], ones), corr);
        }
    } else {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) s[j][0] = s[j][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
            const __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * c)), flip);
            const __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * c + 32)), flip);
            const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);  // -128 -> 0x80, read as unsigned 128
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) {
                const __m256i x = xq(j, 4 * c);
                s[j][0] = _mm256_add_epi32(s[j][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(x, w0)), ones));
                s[j][1] = _mm256_add_epi32(s[j][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(x, w1)), ones));
            }
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) keep_chain(s[j][0]), keep_chain(s[j][1]);
        }
    }
}

// One group of 16 weight rows x R activation rows (columns c0..c0+R-1 of a tile; R / P
// outputs). kPrefetch: generation, the weights stream from memory once.
template <bool kQ4, int R, int P, bool kPrefetch>
void tile(const uint8_t* wg, int64_t nb, const uint8_t* xt, int c0, float* y, int64_t y_stride) {
    constexpr int NO = R / P;
    // [row][half]; one per activation row, pairs added at the end, so a pair's FMAs do not
    // form a single dependency chain. Updated once per block: with R = 4 these live in
    // memory (16 ymm registers hold the block's int sums and operands), which costs little.
    __m256 acc[R][2];
#pragma GCC unroll 4
    for (int j = 0; j < R; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
#pragma GCC unroll 1
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = wg + b * kBlockBytes<kQ4>;
        const uint8_t* xb = xt + b * kActBlockBytes;
        if constexpr (kPrefetch) prefetch_weights<kBlockBytes<kQ4>>(wp, blk);  // gemm.h
        __m256i s[R][2];
        block_sums<kQ4, R>(blk + 32, xb, c0, s);
        const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile) + c0;
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) {
                const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s[j][h]), _mm256_set1_ps(xd[j]));
                acc[j][h] = _mm256_fmadd_ps(f, dw, acc[j][h]);
            }
        }
    }
#pragma GCC unroll 4
    for (int o = 0; o < NO; ++o) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            _mm256_storeu_ps(y + o * y_stride + 8 * h, P == 2 ? _mm256_add_ps(acc[P * o][h], acc[P * o + 1][h]) : acc[P * o][h]);
        }
    }
}

using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int, float*, int64_t);

template <bool kQ4>
struct Tiles {
    // [pairs - 1][rows - 1]; odd row counts do not occur with pairs.
    static constexpr TileFn sub[2][kSubRows] = {
        {tile<kQ4, 1, 1, false>, tile<kQ4, 2, 1, false>, tile<kQ4, 3, 1, false>, tile<kQ4, 4, 1, false>},
        {nullptr, tile<kQ4, 2, 2, false>, nullptr, tile<kQ4, 4, 2, false>},
    };
    // Generation (a tile of at most 2 rows): prefetching.
    static constexpr TileFn gen[2][2] = {
        {tile<kQ4, 1, 1, true>, tile<kQ4, 2, 1, true>},
        {nullptr, tile<kQ4, 2, 2, true>},
    };
};

template <bool kQ4>
void gemm(const GemmTask& t) {
    const int64_t nb = t.K / 32;
    const size_t tile_bytes = act_tile_bytes(t.K);
    // A group (17 K bytes for q8_0: 34 KiB at K = 2048) stays in cache while the slice's
    // tiles run through it kSubRows rows at a time.
    for_each_packed_tile(t, kSliceBytes, [&](const uint8_t* wg, int64_t g, int64_t r0, int nc, bool /*first*/) {
        const uint8_t* xt = t.x + (r0 / kActTile) * tile_bytes;
        float* y = t.y + (r0 / t.pairs) * t.y_stride + g * kPackRows;
        if (nc <= 2) {
            Tiles<kQ4>::gen[t.pairs - 1][nc - 1](wg, nb, xt, 0, y, t.y_stride);
            return;
        }
        for (int c0 = 0; c0 < nc; c0 += kSubRows) {
            const int r = std::min(kSubRows, nc - c0);
            Tiles<kQ4>::sub[t.pairs - 1][r - 1](wg, nb, xt, c0, y + (c0 / t.pairs) * t.y_stride, t.y_stride);
        }
    });
}

constexpr PackedKernels kQ4_0{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx2, ActAux::Corr>, .gemm = gemm<true>};
constexpr PackedKernels kQ8_0{.offset = 128, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx2, ActAux::Corr>, .gemm = gemm<false>};

inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

inline int32_t hsum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}


// quantize_act_avx2 for groups of NB 32-element blocks sharing one d, rounding as the scalar
// reference (x * (1/d), vcvtps2dq: round to nearest even under the default MXCSR), so both
// write identical tiles.
template <int NB>
void quantize_act_groups(ActAux kind, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    // packs interleave the 128-bit lanes: 4-byte groups a0 b0 c0 d0 a1 b1 c1 d1 -> in order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    // v[4b .. 4b+3]: block b's 32 floats, into column c of the group's blocks; q: the quants.
    auto group = [&](const __m256 (&v)[4 * NB], uint8_t* blk0, int c, __m256i (&q)[4 * NB]) {
        __m256 m = _mm256_andnot_ps(sign, v[0]);
        for (int i = 1; i < 4 * NB; ++i) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        const float d = hmax8(m) / 127.0f;
        const __m256 id = _mm256_set1_ps(d > 0 ? 1.0f / d : 0.0f);
        for (int b = 0; b < NB; ++b) {
            uint8_t* blk = blk0 + b * kActBlockBytes;
            __m256i* qb = q + 4 * b;
            for (int k = 0; k < 4; ++k) qb[k] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[4 * b + k], id)), lim), nlim);
            const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(qb[0], qb[1]), _mm256_packs_epi32(qb[2], qb[3]));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 32 * c), _mm256_permutevar8x32_epi32(bytes, order));
            reinterpret_cast<float*>(blk + 32 * kActTile)[c] = d;
            write_act_aux(blk, c, kind, offset, d, hsum8(_mm256_add_epi32(qb[0], qb[1])), hsum8(_mm256_add_epi32(qb[2], qb[3])));
        }
        return d;
    };
    for (int64_t b = 0; b < K / 32; b += NB) {
        uint8_t* blk = tile + b * kActBlockBytes;
        __m256 v[4 * NB];
        __m256i q[4 * NB];
        for (int i = 0; i < 4 * NB; ++i) v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
        const float d = group(v, blk, col, q);
        if (with_resid) {
            const __m256 vd = _mm256_set1_ps(d);
            for (int i = 0; i < 4 * NB; ++i) v[i] = _mm256_sub_ps(v[i], _mm256_mul_ps(vd, _mm256_cvtepi32_ps(q[i])));
            group(v, blk, col + 1, q);
        }
    }
}

}  // namespace

namespace detail {

void quantize_act_avx2(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid) {
    if (scale == ActScale::SuperBlock) quantize_act_groups<QK_K / 32>(kind, x, K, offset, tile, col, with_resid);
    else quantize_act_groups<1>(kind, x, K, offset, tile, col, with_resid);
}

const PackedKernels* packed_avx2(Type t, const CpuFeatures& f) {
    if (!f.avx2 || !f.fma || !f.f16c) return nullptr;
    switch (t) {
        case Type::Q4_0: return &kQ4_0;
        case Type::Q8_0: return &kQ8_0;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu
