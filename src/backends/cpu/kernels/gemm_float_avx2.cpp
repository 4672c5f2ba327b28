// AVX2 packed GEMM kernels (gemm.h) for F16 and BF16 weights (block_f16x16, gemm_float.h), for
// CPUs without AVX-512 (Haswell..Comet Lake, Zen 2/3). AVX2 has no 16-bit float arithmetic, so
// both modes run the F32 path: the weights widen to float exactly in registers (vcvtph2ps, or a
// shift for BF16), the activations stay float, products are exact and summed in float (what
// precise mode computes on every CPU).
//
// Lanes: a 64-byte chunk holds elements 2i and 2i + 1 of the 16 rows. Its 8 rows of one half
// (rows 8h .. 8h + 7) widen into two registers whose lane pairs are (row, element 2i / 2i + 1):
// F16 (vcvtph2ps) rows 8h..8h+3 and 8h+4..8h+7, BF16 (interleaved with zeros) rows 8h, 8h+1,
// 8h+4, 8h+5 and the other four. Both are multiplied by the broadcast pair x[2i], x[2i+1] and
// the pairs added at the end (widen_half, row_sums).
//
// Prompts: the rows are taken in chunks (at most 96: their activations of one slab, 96 KiB,
// stay in L2), and K in slabs of 8 blocks; each group's slab is widened to float once and stays in L1 while the
// chunk's rows pass over it, the outputs adding up over the slabs (see gemm). A tile call takes 6
// activation rows x one half-group (8 weight rows: 12 accumulators); measured (bench_gemm,
// M = 128, one thread, Zen 3) against 4 rows: F16 22.3 -> 29-33 G MAC/s, BF16 (then two broadcasts
// per pair, 4 rows) 16.9 -> 30; the weights of a slab are widened once per group (decode_slab):
// another +7-8% in alternated runs. Generation (1-2 rows): whole groups, prefetched, two
// accumulators per lane so the FMA chains are short.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <utility>

#include "backends/cpu/kernels/gemm_float.h"

namespace kiln::cpu {
namespace {

using namespace float_gemm;


void act_f32(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    for (int64_t b = 0; b < K / kPackCols16; ++b) {
        std::memcpy(tile + b * kF32BlockBytes + col * kF32RowBytes, x + b * kPackCols16, kF32RowBytes);
    }
}

inline double load64(const float* p) {
    double v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The two registers of half h of a chunk (see the file comment).
template <Type T>
inline void widen_half(const uint8_t* chunk, int h, __m256& a, __m256& b) {
    if constexpr (T == Type::F16) {
        a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + 32 * h)));
        b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + 32 * h + 16)));
    } else {
        // BF16 -> float is a 16-bit shift: interleaving with zeros widens rows 8h, 8h+1 |
        // 8h+4, 8h+5 into a and rows 8h+2, 8h+3 | 8h+6, 8h+7 into b, element pairs as F16.
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * h));
        a = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
        b = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
    }
}

// The 8 row sums of half-group accumulators a, b.
template <Type T>
inline __m256 row_sums(__m256 a, __m256 b) {
    if constexpr (T == Type::F16) {
        // hadd: rows 0 1 4 5 | 2 3 6 7 (64-bit units) -> in order
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_hadd_ps(a, b)), 0xD8));
    } else {
        return _mm256_hadd_ps(a, b);  // rows 0 1 2 3 | 4 5 6 7
    }
}

// NC activation rows (columns c0.. of a tile) x halves H0 .. H0 + NH - 1 of one group, over
// nblk blocks; S accumulator sets (chunks alternate between them). Writes or (add) adds
// y[j * y_stride + 8 h].
template <Type T, int NC, int H0, int NH, int S, bool kPrefetch>
void tile(const uint8_t* w, int64_t nblk, const uint8_t* xt, int c0, float* y, int64_t y_stride, bool add) {
    __m256 acc[S][NC][NH][2];
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
#pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) {
#pragma GCC unroll 2
            for (int h = 0; h < NH; ++h) acc[s][j][h][0] = acc[s][j][h][1] = _mm256_setzero_ps();
        }
    }
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
#pragma GCC unroll 1
    for (int64_t blk = 0; blk < nblk; ++blk) {
        const uint8_t* wb = w + blk * kWBlockBytes;
        const uint8_t* xb = xt + blk * kF32BlockBytes;
        if (kPrefetch && wp.float_weights) prefetch_weights<kWBlockBytes>(wp, wb);  // gemm.h
#pragma GCC unroll 16
        for (int i = 0; i < kPackCols16 / 2; ++i) {
            const int s = i % S;
            __m256 wa[NH], wv[NH];
#pragma GCC unroll 2
            for (int h = 0; h < NH; ++h) widen_half<T>(wb + 64 * i, H0 + h, wa[h], wv[h]);
#pragma GCC unroll 4
            for (int j = 0; j < NC; ++j) {
                const float* xp = reinterpret_cast<const float*>(xb + (c0 + j) * kF32RowBytes) + 2 * i;
                const __m256 xx = _mm256_castpd_ps(_mm256_set1_pd(load64(xp)));  // x[2i], x[2i+1], ...
#pragma GCC unroll 2
                for (int h = 0; h < NH; ++h) {
                    acc[s][j][h][0] = _mm256_fmadd_ps(wa[h], xx, acc[s][j][h][0]);
                    acc[s][j][h][1] = _mm256_fmadd_ps(wv[h], xx, acc[s][j][h][1]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) {
#pragma GCC unroll 2
        for (int h = 0; h < NH; ++h) {
            __m256 a = acc[0][j][h][0], b = acc[0][j][h][1];
            if constexpr (S == 2) {
                a = _mm256_add_ps(a, acc[1][j][h][0]);
                b = _mm256_add_ps(b, acc[1][j][h][1]);
            }
            float* out = y + j * y_stride + 8 * (H0 + h);
            const __m256 v = row_sums<T>(a, b);
            _mm256_storeu_ps(out, add ? _mm256_add_ps(_mm256_loadu_ps(out), v) : v);
        }
    }
}

// Prompts: the weights of a slab widen once into float (kDecodedBlockBytes per block: half h,
// step i at h x 1024 + i x 64, the two registers of widen_half), which every tile then loads
// instead of converting two registers per 12 FMAs (measured +7-8%, see the file comment).
constexpr size_t kDecodedBlockBytes = 2 * kWBlockBytes;
// Decoded slabs (16 KiB) stay in L1 while the chunk's rows pass (4 blocks measured alike).
constexpr int64_t kSlabBlocks = 8;
constexpr int64_t kMaxChunkRows = 96;  // see gemm (192 measured alike, within the noise)

template <Type T>
void decode_slab(const uint8_t* w, int64_t nblk, uint8_t* dst) {
    for (int64_t blk = 0; blk < nblk; ++blk) {
        const uint8_t* wb = w + blk * kWBlockBytes;
        float* out = reinterpret_cast<float*>(dst + blk * kDecodedBlockBytes);
        for (int h = 0; h < 2; ++h) {
            for (int i = 0; i < kPackCols16 / 2; ++i) {
                __m256 a, b;
                widen_half<T>(wb + 64 * i, h, a, b);
                _mm256_store_ps(out + 256 * h + 16 * i, a);
                _mm256_store_ps(out + 256 * h + 16 * i + 8, b);
            }
        }
    }
}

// R activation rows (x[j]: row j's floats at the slab's first block, any tile) x half H of
// a decoded slab, over nblk blocks; writes or (add) adds y[j * y_stride + 8 H]. One broadcast
// per row and element pair feeds two FMAs, the two weight registers R rows: 2R accumulators.
template <Type T, int R, int H>
void tile_rows(const uint8_t* dec, int64_t nblk, const uint8_t* const* x, float* y, int64_t y_stride, bool add) {
    __m256 acc[R][2];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    const uint8_t* xr[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) xr[j] = x[j];
#pragma GCC unroll 1
    for (int64_t blk = 0; blk < nblk; ++blk) {
        const float* wb = reinterpret_cast<const float*>(dec + blk * kDecodedBlockBytes) + 256 * H;
        const size_t xo = static_cast<size_t>(blk) * kF32BlockBytes;
#pragma GCC unroll 16
        for (int i = 0; i < kPackCols16 / 2; ++i) {
            const __m256 wa = _mm256_load_ps(wb + 16 * i), wv = _mm256_load_ps(wb + 16 * i + 8);
#pragma GCC unroll 8
            for (int j = 0; j < R; ++j) {
                const float* xp = reinterpret_cast<const float*>(xr[j] + xo) + 2 * i;
                const __m256 xx = _mm256_castpd_ps(_mm256_set1_pd(load64(xp)));  // x[2i], x[2i+1], ...
                acc[j][0] = _mm256_fmadd_ps(wa, xx, acc[j][0]);
                acc[j][1] = _mm256_fmadd_ps(wv, xx, acc[j][1]);
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
        float* out = y + j * y_stride + 8 * H;
        const __m256 v = row_sums<T>(acc[j][0], acc[j][1]);
        _mm256_storeu_ps(out, add ? _mm256_add_ps(_mm256_loadu_ps(out), v) : v);
    }
}

// Rows per prompt tile: 12 accumulators, 2 weight registers and one broadcast of the 16 ymm
// registers (7 rows would need 17).
template <Type T>
constexpr int kPromptRows = 6;

using RowsFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, float*, int64_t, bool);
template <Type T, int H, size_t... I>
constexpr std::array<RowsFn, sizeof...(I)> rows_fns(std::index_sequence<I...>) {
    return {tile_rows<T, static_cast<int>(I) + 1, H>...};
}
// [half][rows - 1]
template <Type T>
constexpr std::array<RowsFn, kPromptRows<T>> kRowsFns[2] = {rows_fns<T, 0>(std::make_index_sequence<kPromptRows<T>>{}),
                                                           rows_fns<T, 1>(std::make_index_sequence<kPromptRows<T>>{})};

using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int, float*, int64_t, bool);

template <Type T>
struct Tiles {
    // Generation: whole groups, prefetching.
    static constexpr TileFn gen[2] = {tile<T, 1, 0, 2, 2, true>, tile<T, 2, 0, 2, 1, true>};
};

template <Type T>
void gemm(const GemmTask& t) {
    const int64_t nb = t.K / kPackCols16;
    const size_t tile_bytes = f32_tile_bytes(t.K);
    if (t.M <= 2) {
        for (int64_t g = 0; g < t.n_groups; ++g) {
            Tiles<T>::gen[t.M - 1](t.w + g * t.w_group_bytes, nb, t.x, 0, t.y + g * kPackRows, t.y_stride, false);
        }
        return;
    }
    constexpr int R = kPromptRows<T>;
    // Slabs of kSlabBlocks (256 elements) whose decoded weights stay in L1 while the rows of a
    // chunk (at most kMaxChunkRows, evenly split) pass, their activations from L2. Earlier
    // slabs sized to keep all M rows in L2 were 3 blocks at pp512 and the outputs, added up
    // once per slab, took more memory traffic than the weights: F16 pp512 ran at 2/3 of
    // pp128. Measured (kiln-bench, 1b F16, alternated runs, Zen 3): pp128 51-56 -> 56-62,
    // pp512 40-42 -> 42-55; per chunk the weights stream once more, which costs less.
    const int64_t n_chunks = (t.M + kMaxChunkRows - 1) / kMaxChunkRows;
    const int64_t chunk = (t.M + n_chunks - 1) / n_chunks;
    const int64_t slab = std::min(nb, kSlabBlocks);
    struct alignas(64) Line {
        uint8_t b[64];
    };
    const std::unique_ptr<Line[]> dec(new Line[static_cast<size_t>(slab) * kDecodedBlockBytes / 64]);  // uninitialised
    for (int64_t c0 = 0; c0 < t.M; c0 += chunk) {
        const int64_t c1 = std::min(t.M, c0 + chunk);
        for (int64_t b0 = 0; b0 < nb; b0 += slab) {
            const int64_t nbs = std::min(slab, nb - b0);
            for (int64_t g = 0; g < t.n_groups; ++g) {
                decode_slab<T>(t.w + g * t.w_group_bytes + b0 * kWBlockBytes, nbs, dec[0].b);
                for (int64_t m0 = c0; m0 < c1; m0 += R) {
                    const int r = static_cast<int>(std::min<int64_t>(R, c1 - m0));
                    const uint8_t* x[R];
                    for (int j = 0; j < r; ++j) {
                        const int64_t m = m0 + j;
                        x[j] = t.x + (m / kActTile) * tile_bytes + b0 * kF32BlockBytes + (m % kActTile) * kF32RowBytes;
                    }
                    float* y = t.y + m0 * t.y_stride + g * kPackRows;
                    for (int h = 0; h < 2; ++h) kRowsFns<T>[h][r - 1](dec[0].b, nbs, x, y, t.y_stride, b0 > 0);
                }
            }
        }
    }
}

// Precise mode runs the same kernels (products exact), not residual pairs.
// Prompts claim up to 16 weight groups at a time (PackedKernels::prompt_claim_groups): a call
// streams all M activation rows once per row chunk, so with the default claims of 4 groups the
// activations (floats, from L3) outweighed the weights; above ~16, a slab's outputs (rows x
// groups x 64 bytes, added up once per slab) outgrow its activations and L2. Measured (Zen 3, 1b
// F16, bench/ab_builds.c, both orders, against claims of 4): 512-token prompts 0.932 / 0.935 x the
// time, 128-token ones 0.986 / 0.989 (claims of a quarter region, up to 88 groups: 0.95 and 1.05).
constexpr int kPromptClaimGroups = 16;
constexpr PackedKernels kF16Exact{.offset = 0, .quantize_act = act_f32, .gemm = gemm<Type::F16>, .tile_bytes = f32_tile_bytes,
                                  .prompt_claim_groups = kPromptClaimGroups};
constexpr PackedKernels kBF16Exact{.offset = 0, .quantize_act = act_f32, .gemm = gemm<Type::BF16>, .tile_bytes = f32_tile_bytes,
                                   .prompt_claim_groups = kPromptClaimGroups};
constexpr PackedKernels kF16{.offset = 0, .quantize_act = act_f32, .gemm = gemm<Type::F16>, .tile_bytes = f32_tile_bytes, .precise = &kF16Exact,
                             .prompt_claim_groups = kPromptClaimGroups};
constexpr PackedKernels kBF16{.offset = 0, .quantize_act = act_f32, .gemm = gemm<Type::BF16>, .tile_bytes = f32_tile_bytes,
                              .precise = &kBF16Exact, .prompt_claim_groups = kPromptClaimGroups};

}  // namespace

namespace detail {
const PackedKernels* packed_float_avx2(Type t, const CpuFeatures& f) {
    if (!f.avx2 || !f.fma || !f.f16c) return nullptr;
    switch (t) {
        case Type::F16: return &kF16;
        case Type::BF16: return &kBF16;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu
