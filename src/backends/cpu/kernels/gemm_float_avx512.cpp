// AVX-512 packed GEMM kernels (gemm_float.h) for F16 and BF16 weights: one per path
// (float_gemm::FastPath; which one fast mode runs depends on the CPU, see fast_path).
//
// Fast mode, Bf16 path (CPUs with AVX512_BF16 but not AVX512-FP16): a 512-bit register holds one 32-bit lane per weight row of a 16-row
// group, two consecutive elements per lane; vdpbf16ps multiplies it with the same two
// elements of one activation row broadcast to every lane (32 multiply-adds). F16 weights
// are rounded to BF16 (vcvtph2ps + vcvtne2ps2bf16) once per 64-byte chunk:
//   - one activation tile (M <= 8, generation in fast mode): in registers, straight from
//     memory;
//   - more (prompt processing): a slab of kSlab blocks of two groups is converted by the
//     first activation tile into a 16 KiB buffer that stays in L1 and is reused by the
//     other tiles, so the conversion costs ~1/(M/8) of what it would per tile; the next
//     slab is brought into L2 meanwhile (prefetch_slab).
// The register tile is 2 groups x 8 activation rows (16 accumulators): every broadcast
// feeds two vdpbf16ps, every weight load eight.
//
// Fast mode, Half path (F16 weights on CPUs with AVX512-FP16, where vdpbf16ps issues at a
// quarter of the FMA rate): the weights are used as stored, against fp16 activations
// (gemm_float.h); vfmadd231ph does 32 multiply-adds per instruction at the full FMA rate,
// into fp16 lanes (row, element parity) that are widened into float every kHalfRun steps.
//
// Precise mode (F32): weights widen to float exactly (vcvtph2ps for F16, a 16-bit shift
// for BF16) and meet F32 activations in FMAs. F16 lanes after widening alternate (row r,
// element 2c) and (row r, element 2c+1), so the activation pair is broadcast as 64 bits
// and the two halves are summed at the end; BF16 splits into even and odd elements of all
// 16 rows instead. Generation is bound by memory bandwidth either way.
#include <immintrin.h>

// GCC 12's AVX-512 headers trigger -Wmaybe-uninitialized on their own intrinsics
// (_mm512_undefined_* inside cvtph/cvtne2ps); the code here initialises everything.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <bit>
#include <cstring>

#include "backends/cpu/kernels/dot_avx512.h"
#include "backends/cpu/kernels/gemm_float.h"
#include "backends/cpu/kernels/reduce_avx512.h"

#if defined(__AVX512BF16__)

namespace kiln::cpu {
namespace {

using namespace float_gemm;

inline __m512bh as_bh(__m512i v) { return std::bit_cast<__m512bh>(v); }
inline __m512i as_si(__m512bh v) { return std::bit_cast<__m512i>(v); }
inline int32_t load32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline double load64(const float* p) {
    double v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// ---- activations ----

// Fast: column col of a BF16 tile (vcvtne2ps2bf16: round to nearest even, as the scalar
// reference). Precise mode uses the F32 format, so with_resid is never set.
void act_bf16(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    for (int64_t b = 0; b < K / kPackCols16; ++b) {
        const __m512 lo = _mm512_loadu_ps(x + b * kPackCols16);
        const __m512 hi = _mm512_loadu_ps(x + b * kPackCols16 + 16);
        _mm512_storeu_si512(tile + b * kBf16BlockBytes + col * kBf16RowBytes, as_si(_mm512_cvtne2ps_pbh(hi, lo)));
    }
}

void act_f32(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    for (int64_t b = 0; b < K / kPackCols16; ++b) {
        uint8_t* out = tile + b * kF32BlockBytes + col * kF32RowBytes;
        _mm512_storeu_ps(out, _mm512_loadu_ps(x + b * kPackCols16));
        _mm512_storeu_ps(out + 64, _mm512_loadu_ps(x + b * kPackCols16 + 16));
    }
}

constexpr int64_t kSlab = 8;             // blocks of 32 columns per converted slab (2 x 8 KiB)

// Single-tile kernels stream the weights from memory (gemm.h; not on AMD,
// WeightsPrefetch::float_weights). wp: the tile's copy, read outside its loop.
inline void prefetch_block(const WeightsPrefetch& wp, const uint8_t* p) {
    if (wp.float_weights) prefetch_weights<kWBlockBytes>(wp, p);
}

// Generation's precise tiles (one or two rows) make a block's requests a line at each of its 16
// steps, not all 32 at the top of the block (prefetch_block): F16 generation took 0.984-0.994 x
// the time (AMX Xeon, 1b F16 tg, two builds decoding in turn in one process, both orders;
// bench_gemm f16/M:1/precise:1/dram:1 16.8 -> 17.1 GB/s). With near 4 / far 6 KiB as
// prefetch_block: far 5 or 8 KiB 1.03 / 1.11 x the time, no near requests 1.05, near 2 / 3 KiB
// 0.99-1.0. Then 1 KiB further, near 5 / far 7 KiB (as the q4_0 tile's): 0.945-0.956 x the time
// (the two orders of 4 runs: 0.945-0.956 and 0.950-0.993); 6 / 8 KiB 1.01 / 1.07 x that of 5 / 7.
inline void prefetch_line_at_step(const WeightsPrefetch& wp, const uint8_t* wb, int i) {
    if (!wp.float_weights) return;
    if (wp.near_l1) prefetch_l1(wb + kPrefetchL1Bytes + 1024 + 64 * i);
    prefetch_far(wb + std::max(wp.far_bytes, kPrefetchL1Bytes + 1024) + 1024 + 64 * i, wp.far_all_levels);
}

// The same tiles ask for the lines of their activation rows (NC of them, 2 lines each per block)
// into L1, kActAhead blocks (4 KiB of weights) ahead, one line every 8 / NC steps (kXBlock: the
// bytes from a block's activations to the next, kF32RowBytes for gemm_precise_row's). An F32 tile's
// blocks lie 1 KiB apart, so a row's lines fall into 8 of L1's 64 sets, and the weights streaming
// through between two uses of a line (16 KiB a block column, 176 KiB a group at K = 5632) evict it:
// without the requests each block's first loads waited on L2. Measured on the AMX Xeon, 1b F16
// tg32 (kiln-bench, 2 threads, alternated runs): 15.7-16.1 -> 17.5-17.9 t/s, ffn_down's products
// 27.4 -> 34.2 GiB/s; 2 or 6 blocks ahead 0.97-0.99 x the speed of 4; padding the tile's blocks
// by a line (1088 bytes: all 64 sets) 16.9-17.0 t/s alone and 17.1-17.4 with the requests. On AMD
// (no float-weight requests, WeightsPrefetch::float_weights) not made: not measured there.
constexpr int64_t kActAhead = 4;
template <int NC, size_t kXBlock>
inline void prefetch_act_line_at_step(const WeightsPrefetch& wp, const uint8_t* xb, int i) {
    constexpr int kEvery = 8 / NC;
    if (!wp.float_weights || i % kEvery != 0) return;
    const int l = i / kEvery;  // the l-th of the block's 2 NC lines: row l / 2, line l % 2
    prefetch_l1(xb + kActAhead * kXBlock + (l / 2) * kF32RowBytes + 64 * (l % 2));
}

// ---- fast (BF16) ----

// Where a fast tile's weights come from: BF16 as stored (BF16 weights, or a converted slab),
// F16 rounded to BF16 in registers, or that and also kept (written to a slab buffer for the
// slab's other tiles: the conversion then overlaps this tile's dot products, which use other
// execution ports, instead of running as a loop of its own before them).
enum class WSrc { Bf16, F16, F16Keep };

// NG groups (wg_stride bytes apart) x NC activation rows of one BF16 tile, over nblk blocks
// of 32 columns. Writes y[j * y_stride + 16 g + r], or adds to it (add: a later slab of the
// same outputs). F16Keep: group g's converted blocks go to keep + g * kKeepStride.
// A group's sums are added in the same order whether it runs alone or in a pair: which groups
// a thread takes alone (when it helps another finish, work_regions.h) depends on timing, and
// the results must not. (Two accumulator sets for a lone group, tried for its 8 dependency
// chains, made perplexity runs differ in the 4th digit between runs.)
constexpr size_t kKeepStride = kSlab * kWBlockBytes;
template <WSrc kSrc, bool kPrefetch, int NG, int NC>
void fast_tile(const uint8_t* w, size_t wg_stride, int64_t nblk, const uint8_t* xt, float* y, int64_t y_stride, bool add,
               uint8_t* keep) {
    __m512 acc[NG][NC];
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) acc[g][j] = _mm512_setzero_ps();
    }
    const WeightsPrefetch wp = tile_prefetch();
#pragma GCC unroll 1
    for (int64_t b = 0; b < nblk; ++b) {
        const uint8_t* wb = w + b * kWBlockBytes;
        const uint8_t* xb = xt + b * kBf16BlockBytes;
        if constexpr (kPrefetch) {
#pragma GCC unroll 2
            for (int g = 0; g < NG; ++g) prefetch_block(wp, wb + g * wg_stride);
        }
#pragma GCC unroll 16
        for (int i = 0; i < kPackCols16 / 2; ++i) {
            __m512bh wv[NG];
#pragma GCC unroll 2
            for (int g = 0; g < NG; ++g) {
                const uint8_t* p = wb + g * wg_stride + 64 * i;
                if constexpr (kSrc == WSrc::Bf16) {
                    wv[g] = as_bh(_mm512_loadu_si512(p));
                } else {
                    wv[g] = f16_chunk_to_bf16(p);
                    if constexpr (kSrc == WSrc::F16Keep) _mm512_store_si512(keep + g * kKeepStride + b * kWBlockBytes + 64 * i, as_si(wv[g]));
                }
            }
#pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) {
                const __m512bh xv = as_bh(_mm512_set1_epi32(load32(xb + j * kBf16RowBytes + 4 * i)));
#pragma GCC unroll 2
                for (int g = 0; g < NG; ++g) acc[g][j] = _mm512_dpbf16_ps(acc[g][j], wv[g], xv);
            }
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            float* out = y + j * y_stride + g * kPackRows;
            _mm512_storeu_ps(out, add ? _mm512_add_ps(_mm512_loadu_ps(out), acc[g][j]) : acc[g][j]);
        }
    }
}

using FastFn = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, float*, int64_t, bool, uint8_t*);

template <WSrc kSrc, bool kPrefetch>
struct FastTiles {
    template <int NG>
    static constexpr FastFn row[kActTile] = {fast_tile<kSrc, kPrefetch, NG, 1>, fast_tile<kSrc, kPrefetch, NG, 2>,
                                             fast_tile<kSrc, kPrefetch, NG, 3>, fast_tile<kSrc, kPrefetch, NG, 4>,
                                             fast_tile<kSrc, kPrefetch, NG, 5>, fast_tile<kSrc, kPrefetch, NG, 6>,
                                             fast_tile<kSrc, kPrefetch, NG, 7>, fast_tile<kSrc, kPrefetch, NG, 8>};
    static FastFn get(int ng, int nc) { return ng == 2 ? row<2>[nc - 1] : row<1>[nc - 1]; }
};

// The slab that a prompt's loop over (pairs of groups, slabs of kSlab blocks) takes after
// the one of groups g (ng of them), blocks b0..: the rest of these groups, or the next
// pair's first; none (ng 0) after the task's last.
struct NextSlab {
    const uint8_t* w = nullptr;
    int ng = 0;
    int64_t nbs = 0;
};
inline NextSlab next_slab(const GemmTask& t, int64_t g, int ng, int64_t b0, int64_t nb) {
    if (b0 + kSlab < nb) return {t.w + g * t.w_group_bytes + (b0 + kSlab) * kWBlockBytes, ng, std::min(kSlab, nb - b0 - kSlab)};
    const int ng_next = static_cast<int>(std::clamp<int64_t>(t.n_groups - g - 2, 0, 2));
    if (ng_next == 0) return {};
    return {t.w + (g + 2) * t.w_group_bytes, ng_next, std::min(kSlab, nb)};
}

// Brings part `part` of `parts` of slab s into L2: spread over the tiles of the slab before
// it, so that s is in L2 when its turn comes, without a burst of requests. Without it the
// first tile of each slab (F16: the one that converts it) waits on every line from L3 or
// memory: F16 pp128 +14-19% on Zen 5 (kiln-bench, 3 alternated pairs).
inline void prefetch_slab(const NextSlab& s, size_t wg_stride, int64_t part, int64_t parts) {
    const int64_t lines = s.nbs * static_cast<int64_t>(kWBlockBytes / 64);
    const int64_t l0 = lines * part / parts, l1 = lines * (part + 1) / parts;
    for (int gi = 0; gi < s.ng; ++gi) {
        for (int64_t l = l0; l < l1; ++l) prefetch_l2(s.w + gi * wg_stride + 64 * l);
    }
}

template <Type T>
void gemm_fast(const GemmTask& t) {
    constexpr bool kF16 = T == Type::F16;
    const int64_t nb = t.K / kPackCols16;
    const size_t tile_bytes = bf16_tile_bytes(t.K);
    if (t.M <= kActTile) {  // generation: weights stream from memory once, converted in registers
        for (int64_t g = 0; g < t.n_groups; g += 2) {
            const int ng = static_cast<int>(std::min<int64_t>(2, t.n_groups - g));
            FastTiles<kF16 ? WSrc::F16 : WSrc::Bf16, true>::get(ng, static_cast<int>(t.M))(
                t.w + g * t.w_group_bytes, t.w_group_bytes, nb, t.x, t.y + g * kPackRows, t.y_stride, false, nullptr);
        }
        return;
    }
    // Prompts: each slab of two groups' blocks is read from memory by its first tile (F16:
    // and converted, once, for the rest) and stays in L1 for the slab's other tiles. The
    // activations are not taken in L2-sized slices (as the q8 kernels' are): the slab
    // conversion would then be shared by fewer tiles, and one thread measured no gain at
    // M = 512 (bench_gemm, Zen 5), the activations streaming from L3 fast enough.
    alignas(64) uint8_t buf[2 * kKeepStride];  // the slab converted to BF16 (F16 weights)
    const int64_t n_tiles = (t.M + kActTile - 1) / kActTile;
    for (int64_t g = 0; g < t.n_groups; g += 2) {
        const int ng = static_cast<int>(std::min<int64_t>(2, t.n_groups - g));
        const uint8_t* wg = t.w + g * t.w_group_bytes;
        float* yg = t.y + g * kPackRows;
        for (int64_t b0 = 0; b0 < nb; b0 += kSlab) {
            const int64_t nbs = std::min(kSlab, nb - b0);
            const NextSlab next = next_slab(t, g, ng, b0, nb);
            for (int64_t m0 = 0; m0 < t.M; m0 += kActTile) {
                const int nc = static_cast<int>(std::min<int64_t>(kActTile, t.M - m0));
                const int64_t tile = m0 / kActTile;
                prefetch_slab(next, t.w_group_bytes, tile, n_tiles);
                const uint8_t* xt = t.x + tile * tile_bytes + b0 * kBf16BlockBytes;
                float* yt = yg + m0 * t.y_stride;
                if (!kF16) {
                    FastTiles<WSrc::Bf16, false>::get(ng, nc)(wg + b0 * kWBlockBytes, t.w_group_bytes, nbs, xt, yt, t.y_stride, b0 > 0, nullptr);
                } else if (m0 == 0) {
                    FastTiles<WSrc::F16Keep, false>::get(ng, nc)(wg + b0 * kWBlockBytes, t.w_group_bytes, nbs, xt, yt, t.y_stride, b0 > 0, buf);
                } else {
                    FastTiles<WSrc::Bf16, false>::get(ng, nc)(buf, kKeepStride, nbs, xt, yt, t.y_stride, b0 > 0, nullptr);
                }
            }
        }
    }
}

// Lane 2r + e of (lo | hi) is row r, element parity e: the 16 rows' sums.
inline __m512 add_parities(__m512 lo, __m512 hi) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    return _mm512_add_ps(_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi));
}

// ---- fast, Half (AVX512-FP16) ----

#if KILN_HAVE_FP16_TARGET
#define KILN_FP16 __attribute__((target("avx512fp16")))

// Activation rows per slice of a large batch: whole tiles, about 1.5 MiB (L2 is 2 MiB).
inline int64_t act_slice_rows(size_t tile_bytes) {
    return std::max<int64_t>(1, static_cast<int64_t>((size_t{3} << 19) / tile_bytes)) * kActTile;
}

// Column col of a Half tile: the row scaled by a power of two, rounded to fp16 (vcvtps2ph,
// nearest even, as the scalar reference); its inverse scale after the blocks.
void act_half(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    __m512 m = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
    const float s = half_row_scale(hmax(m));
    const __m512 vs = _mm512_set1_ps(s);
    for (int64_t b = 0; b < K / kPackCols16; ++b) {
        uint8_t* out = tile + b * kBf16BlockBytes + col * kBf16RowBytes;
        for (int h = 0; h < 2; ++h) {
            const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + b * kPackCols16 + 16 * h), vs);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * h), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
    reinterpret_cast<float*>(tile + bf16_tile_bytes(K))[col] = 1.0f / s;
}

// NG groups (wg_stride bytes apart) x NC rows of one Half tile over nblk blocks; writes or
// (add) adds y[j * y_stride + 16 g + r] = inv[j] * sum.
template <bool kPrefetch, int NG, int NC>
KILN_FP16 void half_tile(const uint8_t* w, size_t wg_stride, int64_t nblk, const uint8_t* xt, const float* inv, float* y, int64_t y_stride,
                         bool add) {
    constexpr int64_t kRunBlocks = kHalfRun / (kPackCols16 / 2);
    alignas(64) float sum[NG][NC][32] = {};  // float sums per lane (row, parity)
    const WeightsPrefetch wp = tile_prefetch();
#pragma GCC unroll 1
    for (int64_t b0 = 0; b0 < nblk; b0 += kRunBlocks) {
        __m512h acc[NG][NC];
#pragma GCC unroll 2
        for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) acc[g][j] = _mm512_setzero_ph();
        }
        const int64_t b1 = std::min(nblk, b0 + kRunBlocks);
#pragma GCC unroll 1
        for (int64_t b = b0; b < b1; ++b) {
            const uint8_t* wb = w + b * kWBlockBytes;
            const uint8_t* xb = xt + b * kBf16BlockBytes;
            if constexpr (kPrefetch) {
#pragma GCC unroll 2
                for (int g = 0; g < NG; ++g) prefetch_block(wp, wb + g * wg_stride);
            }
#pragma GCC unroll 16
            for (int i = 0; i < kPackCols16 / 2; ++i) {
                __m512h wv[NG];
#pragma GCC unroll 2
                for (int g = 0; g < NG; ++g) wv[g] = _mm512_castsi512_ph(_mm512_loadu_si512(wb + g * wg_stride + 64 * i));
#pragma GCC unroll 8
                for (int j = 0; j < NC; ++j) {
                    const __m512h xv = _mm512_castsi512_ph(_mm512_set1_epi32(load32(xb + j * kBf16RowBytes + 4 * i)));
#pragma GCC unroll 2
                    for (int g = 0; g < NG; ++g) acc[g][j] = _mm512_fmadd_ph(wv[g], xv, acc[g][j]);
                }
            }
        }
#pragma GCC unroll 2
        for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) {
                const __m512i h = _mm512_castph_si512(acc[g][j]);
                float* f = sum[g][j];
                _mm512_store_ps(f, _mm512_add_ps(_mm512_load_ps(f), _mm512_cvtph_ps(_mm512_castsi512_si256(h))));
                _mm512_store_ps(f + 16, _mm512_add_ps(_mm512_load_ps(f + 16), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1))));
            }
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            const __m512 v = _mm512_mul_ps(add_parities(_mm512_load_ps(sum[g][j]), _mm512_load_ps(sum[g][j] + 16)), _mm512_set1_ps(inv[j]));
            float* out = y + j * y_stride + g * kPackRows;
            _mm512_storeu_ps(out, add ? _mm512_add_ps(_mm512_loadu_ps(out), v) : v);
        }
    }
}

using HalfFn = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, const float*, float*, int64_t, bool);

template <bool kPrefetch>
struct HalfTiles {
    template <int NG>
    static constexpr HalfFn row[kActTile] = {half_tile<kPrefetch, NG, 1>, half_tile<kPrefetch, NG, 2>, half_tile<kPrefetch, NG, 3>,
                                             half_tile<kPrefetch, NG, 4>, half_tile<kPrefetch, NG, 5>, half_tile<kPrefetch, NG, 6>,
                                             half_tile<kPrefetch, NG, 7>, half_tile<kPrefetch, NG, 8>};
    static HalfFn get(int ng, int nc) { return ng == 2 ? row<2>[nc - 1] : row<1>[nc - 1]; }
};

// As gemm_fast without conversions. One tile (generation) streams the weights once; more
// tiles share each L1-sized slab of two groups, and large batches go in slices of
// activation rows that stay in L2 (the weights streamed once per slice).
void gemm_half(const GemmTask& t) {
    const int64_t nb = t.K / kPackCols16;
    const size_t tile_bytes = half_tile_bytes(t.K);
    const size_t inv_off = bf16_tile_bytes(t.K);
    auto inv = [&](int64_t m0) { return reinterpret_cast<const float*>(t.x + (m0 / kActTile) * tile_bytes + inv_off); };
    if (t.M <= kActTile) {
        for (int64_t g = 0; g < t.n_groups; g += 2) {
            const int ng = static_cast<int>(std::min<int64_t>(2, t.n_groups - g));
            HalfTiles<true>::get(ng, static_cast<int>(t.M))(t.w + g * t.w_group_bytes, t.w_group_bytes, nb, t.x, inv(0), t.y + g * kPackRows,
                                                             t.y_stride, false);
        }
        return;
    }
    const int64_t slice = act_slice_rows(tile_bytes);
    for (int64_t s0 = 0; s0 < t.M; s0 += slice) {
        const int64_t s1 = std::min(t.M, s0 + slice);
        for (int64_t g = 0; g < t.n_groups; g += 2) {
            const int ng = static_cast<int>(std::min<int64_t>(2, t.n_groups - g));
            const uint8_t* wg = t.w + g * t.w_group_bytes;
            for (int64_t b0 = 0; b0 < nb; b0 += kSlab) {
                const int64_t nbs = std::min(kSlab, nb - b0);
                const NextSlab next = next_slab(t, g, ng, b0, nb);
                const int64_t n_tiles = (s1 - s0 + kActTile - 1) / kActTile;
                for (int64_t m0 = s0; m0 < s1; m0 += kActTile) {
                    const int nc = static_cast<int>(std::min<int64_t>(kActTile, s1 - m0));
                    prefetch_slab(next, t.w_group_bytes, (m0 - s0) / kActTile, n_tiles);
                    HalfTiles<false>::get(ng, nc)(wg + b0 * kWBlockBytes, t.w_group_bytes, nbs,
                                                  t.x + (m0 / kActTile) * tile_bytes + b0 * kBf16BlockBytes, inv(m0),
                                                  t.y + m0 * t.y_stride + g * kPackRows, t.y_stride, b0 > 0);
                }
            }
        }
    }
}
#endif  // KILN_HAVE_FP16_TARGET

// ---- precise (F32) ----

// Widens one 64-byte chunk to two float registers (see the file comment for the lanes).
template <Type T>
inline void widen(const uint8_t* p, __m512& a, __m512& b) {
    if constexpr (T == Type::F16) {
        a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));       // rows 0-7, pairs
        b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));  // rows 8-15, pairs
    } else {
        const __m512i v = _mm512_loadu_si512(p);
        a = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));                              // even elements
        b = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int32_t(0xFFFF0000u))));  // odd elements
    }
}

// One group x NC rows of an F32 tile; S independent accumulator sets (chunks alternate
// between them) so that a single row's FMA chain does not wait on latency. kXBlock: the bytes
// from a block's activations to the next (kF32BlockBytes in a tile, kF32RowBytes in a lone row).
template <Type T, int NC, int S, size_t kXBlock = kF32BlockBytes>
void precise_tile(const uint8_t* w, int64_t nblk, const uint8_t* xt, float* y, int64_t y_stride) {
    __m512 a[S][NC], b[S][NC];
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) a[s][j] = b[s][j] = _mm512_setzero_ps();
    }
    const WeightsPrefetch wp = tile_prefetch();
#pragma GCC unroll 1
    for (int64_t blk = 0; blk < nblk; ++blk) {
        const uint8_t* wb = w + blk * kWBlockBytes;
        const uint8_t* xb = xt + blk * kXBlock;
#pragma GCC unroll 16
        for (int i = 0; i < kPackCols16 / 2; ++i) {
            if constexpr (NC <= 2) {
                prefetch_line_at_step(wp, wb, i);
                prefetch_act_line_at_step<NC, kXBlock>(wp, xb, i);
            }
            const int s = i % S;
            __m512 wa, wb2;
            widen<T>(wb + 64 * i, wa, wb2);
#pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) {
                const float* xp = reinterpret_cast<const float*>(xb + j * kF32RowBytes) + 2 * i;
                if constexpr (T == Type::F16) {
                    const __m512 xv = _mm512_castpd_ps(_mm512_set1_pd(load64(xp)));  // x[2i], x[2i+1], ...
                    a[s][j] = _mm512_fmadd_ps(wa, xv, a[s][j]);
                    b[s][j] = _mm512_fmadd_ps(wb2, xv, b[s][j]);
                } else {
                    a[s][j] = _mm512_fmadd_ps(wa, _mm512_set1_ps(xp[0]), a[s][j]);
                    b[s][j] = _mm512_fmadd_ps(wb2, _mm512_set1_ps(xp[1]), b[s][j]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) {
        __m512 lo = a[0][j], hi = b[0][j];
        if constexpr (S == 2) {
            lo = _mm512_add_ps(lo, a[1][j]);
            hi = _mm512_add_ps(hi, b[1][j]);
        }
        __m512 out;
        if constexpr (T == Type::F16) {
            out = add_parities(lo, hi);
        } else {
            out = _mm512_add_ps(lo, hi);
        }
        _mm512_storeu_ps(y + j * y_stride, out);
    }
}

using PreciseFn = void (*)(const uint8_t*, int64_t, const uint8_t*, float*, int64_t);

template <Type T>
constexpr PreciseFn kPreciseTiles[kActTile] = {precise_tile<T, 1, 2>, precise_tile<T, 2, 2>, precise_tile<T, 3, 1>, precise_tile<T, 4, 1>,
                                               precise_tile<T, 5, 1>, precise_tile<T, 6, 1>, precise_tile<T, 7, 1>, precise_tile<T, 8, 1>};

template <Type T>
void gemm_precise(const GemmTask& t) {
    const int64_t nb = t.K / kPackCols16;
    const size_t tile_bytes = f32_tile_bytes(t.K);
    for (int64_t g = 0; g < t.n_groups; ++g) {
        const uint8_t* wg = t.w + g * t.w_group_bytes;
        for (int64_t m0 = 0; m0 < t.M; m0 += kActTile) {
            const int nc = static_cast<int>(std::min<int64_t>(kActTile, t.M - m0));
            kPreciseTiles<T>[nc - 1](wg, nb, t.x + (m0 / kActTile) * tile_bytes, t.y + m0 * t.y_stride + g * kPackRows, t.y_stride);
        }
    }
}

// A single activation row (generation) as K contiguous floats, not column 0 of an F32 tile: there
// the row has 2 of each 1 KiB block's 16 lines, all of them in 8 of L1's 64 sets, and the weights
// streaming between two uses of a line (16 KiB a block column, 176 KiB a group at K = 5632) evict
// it; contiguous, its lines spread over all the sets. bench_gemm f16 M:1 precise, one thread from
// memory, 3 alternated pairs (AMX Xeon, 2026-12-05): K = 5632 (PackedGemmDown) 12.9-14.8 ->
// 16.5-17.5 GB/s, K = 2048 15.6-17.1 -> 16.0-16.7. 1b F16 tg16 (kiln-bench --profile, 3 alternated
// pairs of builds): ffn_down 0.87-0.89 x the time, the token 0.93-0.95 x (15.6-15.7 -> 16.5-16.7
// t/s). In ab_builds (both builds in one process, token by token) the two measured alike, the old
// one already at 16.3-16.5 t/s there: how much the tile's 8 sets cost depends on where the scratch
// and the weights fall, which the contiguous row does not.
void act_f32_row(const float* x, int64_t K, int32_t, uint8_t* tile, int, bool) { std::memcpy(tile, x, static_cast<size_t>(K) * sizeof(float)); }
size_t f32_row_bytes(int64_t K) { return static_cast<size_t>(K) * sizeof(float); }
template <Type T>
void gemm_precise_row(const GemmTask& t) {
    const int64_t nb = t.K / kPackCols16;
    const size_t row_bytes = f32_row_bytes(t.K);
    for (int64_t g = 0; g < t.n_groups; ++g) {
        for (int64_t m = 0; m < t.M; ++m) {  // (one row: packed_plan takes these for rows x pairs == 1)
            precise_tile<T, 1, 2, kF32RowBytes>(t.w + g * t.w_group_bytes, nb, t.x + m * row_bytes, t.y + m * t.y_stride + g * kPackRows,
                                                t.y_stride);
        }
    }
}
constexpr PackedKernels kF16PreciseRow{.offset = 0, .quantize_act = act_f32_row, .gemm = gemm_precise_row<Type::F16>, .tile_bytes = f32_row_bytes,
                                       .tile_rows = 1};
constexpr PackedKernels kBF16PreciseRow{.offset = 0, .quantize_act = act_f32_row, .gemm = gemm_precise_row<Type::BF16>, .tile_bytes = f32_row_bytes,
                                        .tile_rows = 1};

constexpr PackedKernels kF16Precise{.offset = 0, .quantize_act = act_f32, .gemm = gemm_precise<Type::F16>, .tile_bytes = f32_tile_bytes,
                                    .single = &kF16PreciseRow};
constexpr PackedKernels kF16{.offset = 0, .quantize_act = act_bf16, .gemm = gemm_fast<Type::F16>, .tile_bytes = bf16_tile_bytes,
                             .precise = &kF16Precise};
constexpr PackedKernels kBF16Precise{.offset = 0, .quantize_act = act_f32, .gemm = gemm_precise<Type::BF16>, .tile_bytes = f32_tile_bytes,
                                     .single = &kBF16PreciseRow};
constexpr PackedKernels kBF16{.offset = 0, .quantize_act = act_bf16, .gemm = gemm_fast<Type::BF16>, .tile_bytes = bf16_tile_bytes,
                              .precise = &kBF16Precise};

// Fast mode through F32 (the precise kernels), and F16 through Half.
constexpr PackedKernels kF16F32{.offset = 0, .quantize_act = act_f32, .gemm = gemm_precise<Type::F16>, .tile_bytes = f32_tile_bytes,
                                .precise = &kF16Precise, .single = &kF16PreciseRow};
constexpr PackedKernels kBF16F32{.offset = 0, .quantize_act = act_f32, .gemm = gemm_precise<Type::BF16>, .tile_bytes = f32_tile_bytes,
                                 .precise = &kBF16Precise, .single = &kBF16PreciseRow};
#if KILN_HAVE_FP16_TARGET
constexpr PackedKernels kF16Half{.offset = 0, .quantize_act = act_half, .gemm = gemm_half, .tile_bytes = half_tile_bytes,
                                 .precise = &kF16Precise};
#endif

}  // namespace

const PackedKernels* float_gemm::detail::float_avx512(Type t, FastPath p, const CpuFeatures& f) {
    if (t != Type::F16 && t != Type::BF16) return nullptr;
    const bool f16 = t == Type::F16;
    switch (p) {
        case FastPath::F32: return f16 ? &kF16F32 : &kBF16F32;
        case FastPath::Bf16: return !f.avx512bf16 ? nullptr : f16 ? &kF16 : &kBF16;
        case FastPath::Half:
#if KILN_HAVE_FP16_TARGET
            return f16 && fast_path(t) == FastPath::Half ? &kF16Half : nullptr;  // fast_path checked the CPU
#else
            return nullptr;
#endif
    }
    return nullptr;
}

namespace detail {
const PackedKernels* packed_float_avx512(Type t, const CpuFeatures& f) { return float_gemm::detail::float_avx512(t, float_gemm::fast_path(t), f); }
}  // namespace detail

}  // namespace kiln::cpu

#else  // compilers without AVX512_BF16 intrinsics (MSVC): no packed float kernels

namespace kiln::cpu {
const PackedKernels* float_gemm::detail::float_avx512(Type, FastPath, const CpuFeatures&) { return nullptr; }
const PackedKernels* detail::packed_float_avx512(Type, const CpuFeatures&) { return nullptr; }
}  // namespace kiln::cpu

#endif
