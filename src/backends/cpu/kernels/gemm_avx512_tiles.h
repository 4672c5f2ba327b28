// The AVX-512 VNNI packed GEMM tiles for q4_0 and q8_0 weights (gemm.h), as templates over
// how the high nibbles of q4_0 quants are unpacked. Included only by gemm_avx512.cpp (a shift
// and a mask) and gemm_avx512gfni.cpp (one GF(2) affine op, for CPUs with GFNI), which are
// compiled with different instruction sets: everything here is in an unnamed namespace, so
// each file gets its own copies and the linker cannot mix them.
//
// A 512-bit register holds one 32-bit lane per weight row of a 16-row group; vpdpbusd
// multiplies 4 unsigned weight quants of every row with 4 signed activation quants
// broadcast to all lanes. Per 32-element block and activation row that is 8 vpdpbusd
// (starting from the block's offset correction), one int->float conversion, one scale by
// the activation's d and one FMA with the 16 weight scales. The weight block is loaded
// (and for q4_0 unpacked) once for a tile of up to 8 activation rows.
#pragma once

#include <immintrin.h>

// GCC 12's AVX-512 headers trigger -Wmaybe-uninitialized on their own intrinsics
// (_mm512_undefined_* inside cvtph/cvtepi32); the code here initialises everything.
// (For the including file: gemm_avx512.cpp and gemm_avx512gfni.cpp.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>

#include "backends/cpu/kernels/dot_avx512.h"
#include "backends/cpu/kernels/gemm.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

// Weight block layouts: fp16 d[16], then 64-byte chunks (4 packed nibble chunks for q4_0,
// 8 byte chunks for q8_0). After unpacking, register c holds elements 4c..4c+3 of each row,
// matching activation dword c of the block.
template <bool kQ4, class Unpack>
struct Layout {
    static constexpr size_t kBlockBytes = kQ4 ? sizeof(block_q4_0x16) : sizeof(block_q8_0x16);
    // Loads: one 64-byte chunk per step, unpacked (q4_0) into registers `chunk` and
    // `chunk + kSplit` of the block.
    static constexpr int kSteps = kQ4 ? 4 : 8;
    static constexpr int kSplit = kQ4 ? 4 : 0;
    static inline void step(const uint8_t* blk, int s, __m512i& a, __m512i& b) {
        const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * s);
        if constexpr (kQ4) {
            const __m512i m4 = _mm512_set1_epi8(0x0F);
            a = _mm512_and_si512(v, m4);
            b = Unpack::high_nibbles(v, m4);
        } else {
            a = v;
            b = v;
        }
    }
};


// Adds NB consecutive blocks (weights at blk, activations at xb) of the NC rows of a tile
// to acc. Every activation operand is at a constant offset from xb, so vpdpbusd takes it as
// an embedded-broadcast memory operand (dpbusd_bcast). The NB blocks' products are
// interleaved: NB x NC independent dependency chains. With one block, 8 chains of 8 vpdpbusd
// (5-cycle latency) left the two vector ports idle; two blocks measured +9-14% in the 8-row
// prompt tile.
// kPf: the weights stream from memory; ask for them early (gemm.h, prefetch_weights; q8_0
// generation on Zen 4 leaves it to the hardware, WeightsPrefetch::q8_0_gen).
// Always inlined: with the spread requests GCC 12 called it once per block pair from the
// generation tile, the accumulators going through memory (q4_0 precise with its weights in L2
// 34 -> 40 GB/s inlined; the model's generation 0.992-0.999 x the time, 4 runs).
template <bool kQ4, class Unpack, int NC, int NB, bool kPf>
__attribute__((always_inline)) inline void add_blocks(const WeightsPrefetch& wp, const uint8_t* blk, const uint8_t* xb, __m512 (&acc)[NC]) {
    using L = Layout<kQ4, Unpack>;
    // Generation (one activation row and its residual) spreads its requests over the steps where
    // the tiles make near requests (Intel), else they go at the top of the blocks: see kLines.
    constexpr bool kSpread = kPf && NC <= 2;
    if constexpr (kPf && !kSpread) {
        if (kQ4 || NC > 2 || wp.q8_0_gen) prefetch_weights<NB * L::kBlockBytes>(wp, blk);
    }
    const bool spread = kSpread && (kQ4 || wp.q8_0_gen) && wp.near_l1;
    // q4_0's spread requests run 1 KiB further than WeightsPrefetch's (Intel: near 5, far 7 KiB);
    // q8_0's near 7 / far 10 KiB (gemm.h, kLineNearBytes). Before that, q8_0: far 7 KiB
    // 0.981-0.987 x the time of 6, 8 KiB 1.046, near 5 KiB with far 8 1.00; q4_0 (a block at a
    // time): near 5 / far 7 KiB 0.957-0.964 x the time of 4 / 6, 6 / 8 KiB 0.995-0.997 of 5 / 7
    // (kept the nearer); in pairs far 5 KiB 1.047, 7 KiB 1.005-1.008, near 3 KiB 1.011-1.015.
    constexpr size_t kNear = kQ4 ? kPrefetchL1Bytes + 1024 : kLineNearBytes;
    const uint8_t* far = blk + (kQ4 ? std::max(wp.far_bytes, kPrefetchL1Bytes + 1024) + 1024 : std::max(wp.far_bytes, kLineFarBytes));
    // sum[i][j]: block i, row j; starts from the block's offset correction.
    __m512i sum[NB][NC];
#pragma GCC unroll 2
    for (int i = 0; i < NB; ++i) {
        const auto* xc = reinterpret_cast<const int32_t*>(xb + i * kActBlockBytes + 36 * kActTile);
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) sum[i][j] = _mm512_set1_epi32(xc[j]);
    }
    // Generation tiles (one or two activation rows) have too few chains: each row's 8 products
    // of a block go into two accumulators (high nibbles / odd chunks apart), added at the end.
    constexpr bool kTwoChains = NC <= 2;
    __m512i sum2[NB][NC];
    if constexpr (kTwoChains) {
#pragma GCC unroll 2
        for (int i = 0; i < NB; ++i) {
#pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) sum2[i][j] = _mm512_setzero_si512();
        }
    }
    auto dot = [&](int i, int c, __m512i w, bool second) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            const auto* xq = reinterpret_cast<const int32_t*>(xb + i * kActBlockBytes + 32 * j);
            if (kTwoChains && second) {
                sum2[i][j] = dpbusd_bcast(sum2[i][j], w, xq + c);
            } else {
                sum[i][j] = dpbusd_bcast(sum[i][j], w, xq + c);
            }
        }
    };
#pragma GCC unroll 8
    for (int s = 0; s < L::kSteps; ++s) {
        if constexpr (kSpread) {
            // Step s asks for its share of the blocks' lines (near and far, line by line), step 0
            // also for the lines left over: a line a step (q8_0: 9 lines in 8 steps; q4_0 a block
            // at a time, see tile: 5 in 4). Generation took 0.96 (q8_0) and 0.98 (q4_0, then in
            // pairs) x the time of the two-step bursts this replaced (AMX Xeon, 1b models, two
            // builds decoding in turn in one process, both orders, 2026-12-05); F16's precise tile
            // does the same (gemm_float_avx512.cpp). Written out here: the same requests through a
            // shared helper in gemm.h compiled to a q4_0 tile that measured 0.993 instead of 0.98,
            // and F16 1.06 x instead of 0.988.
            constexpr int kLines = (NB * L::kBlockBytes + 63) / 64, kPer = kLines / L::kSteps, kExtra = kLines - kPer * L::kSteps;
            if (spread) {
#pragma GCC unroll 4
                for (int l = 0; l < kPer; ++l) {
                    prefetch_l1(blk + kNear + 64 * (kPer * s + l));
                    prefetch_far(far + 64 * (kPer * s + l), wp.far_all_levels);
                }
                if (s == 0) {
#pragma GCC unroll 4
                    for (int l = 0; l < kExtra; ++l) {
                        prefetch_l1(blk + kNear + 64 * (kPer * L::kSteps + l));
                        prefetch_far(far + 64 * (kPer * L::kSteps + l), wp.far_all_levels);
                    }
                }
            } else if (s == 0 && (kQ4 || wp.q8_0_gen)) {
                prefetch_weights<NB * L::kBlockBytes>(wp, blk);
            }
        }
        __m512i a[NB], b[NB];
#pragma GCC unroll 2
        for (int i = 0; i < NB; ++i) L::step(blk + i * L::kBlockBytes, s, a[i], b[i]);
#pragma GCC unroll 2
        for (int i = 0; i < NB; ++i) dot(i, s, a[i], !kQ4 && (s & 1));
        if constexpr (kQ4) {
#pragma GCC unroll 2
            for (int i = 0; i < NB; ++i) dot(i, s + L::kSplit, b[i], true);
        }
    }
    if constexpr (kTwoChains) {
#pragma GCC unroll 2
        for (int i = 0; i < NB; ++i) {
#pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) sum[i][j] = _mm512_add_epi32(sum[i][j], sum2[i][j]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < NB; ++i) {
        const uint8_t* bi = blk + i * L::kBlockBytes;
        const auto* xd = reinterpret_cast<const float*>(xb + i * kActBlockBytes + 32 * kActTile);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bi)));
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[i][j]), _mm512_set1_ps(xd[j]));
            acc[j] = _mm512_fmadd_ps(f, dw, acc[j]);
        }
    }
}

// One group of 16 weight rows x the NC activation rows of one tile (NC / P outputs).
// kPf: the tile is the first to read its weight group (every generation tile; the first of
// each group in prompts and batched decoding), so the weights come from memory: prefetch them.
template <bool kQ4, class Unpack, int NC, int P, bool kPf>
void tile(const uint8_t* wg, int64_t nb, const uint8_t* xt, float* y, int64_t y_stride) {
    constexpr int NO = NC / P;
    // One accumulator per activation row, pairs added at the end: with one per output the
    // pair's FMAs would form a single dependency chain (precise generation waited on it).
    __m512 acc[NC];
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
    // Blocks in pairs (more independent chains), except q8_0 in generation: reading two 544-byte
    // blocks a step of each at a time looks to the hardware prefetchers like two interleaved streams
    // and they stop following it. A plain read of 1 GiB in that order ran at 10 GiB/s on one Zen 4
    // core, block by block at 24 (q4_0's 288-byte blocks in pairs: 25). With the software requests
    // (prefetch_weights) both orders streamed alike; without them 6-10 against 21 GB/s
    // (bench_gemm q8_0/M:1/precise:1/dram:1), so the stream no longer rests on them alone.
    constexpr int kPair = !kQ4 && kPf && NC <= 2 ? 1 : 2;
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (see WeightsPrefetch)
    // Generation on Intel: each add_blocks spreads its blocks' requests over its steps (see
    // there). Tried before that: the requests for two steps' blocks at once (~1.1 KiB) 0.95-0.98
    // (q4_0) and 0.984-0.989 (q8_0) x the time of one step's at its top, four steps' 1.085 / 1.01
    // (in-process alternation, 2026-12-05); spreading measured 0.96-0.98 against the two-step bursts.
    int64_t b = 0;
    // With the spread requests (Intel), q4_0 generation also goes a block at a time: 0.972-0.979 x
    // the time of pairs (4 runs, both orders), 43 instead of 40 GB/s with the weights in L2; four
    // dependency chains a block (a row and its residual, two each) are enough there. Elsewhere
    // (AMD, requests at the blocks' tops) the pairs stay: not measured.
    if constexpr (kQ4 && kPf && NC <= 2) {
        if (wp.near_l1) {
#pragma GCC unroll 1
            for (; b < nb; ++b) add_blocks<kQ4, Unpack, NC, 1, kPf>(wp, wg + b * Layout<kQ4, Unpack>::kBlockBytes, xt + b * kActBlockBytes, acc);
        }
    }
#pragma GCC unroll 1
    for (; b + kPair <= nb; b += kPair) add_blocks<kQ4, Unpack, NC, kPair, kPf>(wp, wg + b * Layout<kQ4, Unpack>::kBlockBytes, xt + b * kActBlockBytes, acc);
    if (b < nb) add_blocks<kQ4, Unpack, NC, 1, kPf>(wp, wg + b * Layout<kQ4, Unpack>::kBlockBytes, xt + b * kActBlockBytes, acc);
#pragma GCC unroll 8
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, P == 2 ? _mm512_add_ps(acc[P * o], acc[P * o + 1]) : acc[P * o]);
}

using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, float*, int64_t);

template <bool kQ4, class Unpack, bool kPf>
struct Tiles {
    // [pairs - 1][columns - 1]; odd column counts do not occur with pairs.
    static constexpr TileFn fn[2][kActTile] = {
        {tile<kQ4, Unpack, 1, 1, kPf>, tile<kQ4, Unpack, 2, 1, kPf>, tile<kQ4, Unpack, 3, 1, kPf>, tile<kQ4, Unpack, 4, 1, kPf>, tile<kQ4, Unpack, 5, 1, kPf>,
         tile<kQ4, Unpack, 6, 1, kPf>, tile<kQ4, Unpack, 7, 1, kPf>, tile<kQ4, Unpack, 8, 1, kPf>},
        {nullptr, tile<kQ4, Unpack, 2, 2, kPf>, nullptr, tile<kQ4, Unpack, 4, 2, kPf>, nullptr, tile<kQ4, Unpack, 6, 2, kPf>, nullptr, tile<kQ4, Unpack, 8, 2, kPf>},
    };
};

template <bool kQ4, class Unpack>
void gemm(const GemmTask& t) {
    const int64_t nb = t.K / 32;
    const size_t tile_bytes = act_tile_bytes(t.K);
    for_each_packed_tile(t, size_t{1} << 20, [&](const uint8_t* wg, int64_t g, int64_t r0, int nc, bool first) {
        const TileFn fn = first ? Tiles<kQ4, Unpack, true>::fn[t.pairs - 1][nc - 1] : Tiles<kQ4, Unpack, false>::fn[t.pairs - 1][nc - 1];
        fn(wg, nb, t.x + (r0 / kActTile) * tile_bytes, t.y + (r0 / t.pairs) * t.y_stride + g * kPackRows, t.y_stride);
    });
}

// ---- wide tiles: two weight groups per tile (Zen 5) ----
//
// Measured on Zen 5 (one core, L1-resident operands, assembly loops): vpdpbusd issues 2 per
// cycle, vmulps and vfmadd231ps take the same slots, while the unpacking (vpandq, vpsrlw),
// vcvtdq2ps and vcvtph2ps run beside them for free; vector loads, broadcasts included, issue
// about 2 per cycle. The one-group tile above spends a broadcast load on every vpdpbusd, so
// its loads, not its dot products, set the pace there: 60-65% of the int8 peak in isolation.
// Two groups per tile feed every broadcast to two vpdpbusd: q4_0 +20-25% (4 activation rows,
// blocks in pairs: 16 dependency chains, 24 live registers), q8_0 likewise with 8 rows and one
// block at a time (its two groups' 68 KiB do not stay in L1 for a second pass over 4 rows).
template <bool kQ4, class Unpack, int NC, int NB, bool kPf>
inline void add_blocks_wide(const WeightsPrefetch& wp, const uint8_t* blk, size_t wg_stride, const uint8_t* xb, int j0, __m512 (&acc)[2][NC]) {
    using L = Layout<kQ4, Unpack>;
    if constexpr (kPf) {
        prefetch_weights<NB * L::kBlockBytes>(wp, blk);
        prefetch_weights<NB * L::kBlockBytes>(wp, blk + wg_stride);
    }
    // sum[i][g][j]: block i, group g, activation row j0 + j; from the block's offset correction.
    __m512i sum[NB][2][NC];
#pragma GCC unroll 2
    for (int i = 0; i < NB; ++i) {
        const auto* xc = reinterpret_cast<const int32_t*>(xb + i * kActBlockBytes + 36 * kActTile) + j0;
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) sum[i][0][j] = sum[i][1][j] = _mm512_set1_epi32(xc[j]);
    }
    auto dot = [&](int i, int c, const __m512i (&w)[2]) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            const auto* xq = reinterpret_cast<const int32_t*>(xb + i * kActBlockBytes + 32 * (j0 + j));
            const __m512i xv = _mm512_set1_epi32(xq[c]);
            sum[i][0][j] = _mm512_dpbusd_epi32(sum[i][0][j], w[0], xv);
            sum[i][1][j] = _mm512_dpbusd_epi32(sum[i][1][j], w[1], xv);
        }
    };
#pragma GCC unroll 8
    for (int s = 0; s < L::kSteps; ++s) {
#pragma GCC unroll 2
        for (int i = 0; i < NB; ++i) {
            __m512i a[2], b[2];
            L::step(blk + i * L::kBlockBytes, s, a[0], b[0]);
            L::step(blk + wg_stride + i * L::kBlockBytes, s, a[1], b[1]);
            dot(i, s, a);
            if constexpr (kQ4) dot(i, s + L::kSplit, b);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < NB; ++i) {
        const auto* xd = reinterpret_cast<const float*>(xb + i * kActBlockBytes + 32 * kActTile) + j0;
#pragma GCC unroll 2
        for (int g = 0; g < 2; ++g) {
            const uint8_t* bi = blk + g * wg_stride + i * L::kBlockBytes;
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bi)));
#pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) {
                const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[i][g][j]), _mm512_set1_ps(xd[j]));
                acc[g][j] = _mm512_fmadd_ps(f, dw, acc[g][j]);
            }
        }
    }
}

// Groups g and g + 1 (wg_stride bytes apart) x activation rows j0 .. j0 + NC - 1 of one tile
// (NC / P outputs each; P = 2: a row and its residual).
template <bool kQ4, class Unpack, int NC, int NB, int P, bool kPf>
void tile_wide(const uint8_t* wg, size_t wg_stride, int64_t nb, const uint8_t* xt, int j0, float* y, int64_t y_stride) {
    constexpr int NO = NC / P;
    __m512 acc[2][NC];
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) acc[g][j] = _mm512_setzero_ps();
    }
    constexpr size_t kB = Layout<kQ4, Unpack>::kBlockBytes;
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (see WeightsPrefetch)
    int64_t b = 0;
#pragma GCC unroll 1
    for (; b + NB <= nb; b += NB) add_blocks_wide<kQ4, Unpack, NC, NB, kPf>(wp, wg + b * kB, wg_stride, xt + b * kActBlockBytes, j0, acc);
    if (b < nb) add_blocks_wide<kQ4, Unpack, NC, 1, kPf>(wp, wg + b * kB, wg_stride, xt + b * kActBlockBytes, j0, acc);
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
#pragma GCC unroll 8
        for (int o = 0; o < NO; ++o) {
            _mm512_storeu_ps(y + o * y_stride + g * kPackRows, P == 2 ? _mm512_add_ps(acc[g][P * o], acc[g][P * o + 1]) : acc[g][P * o]);
        }
    }
}

using WideFn = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, int, float*, int64_t);

// Activation rows from which gemm_wide takes the wide tiles.
constexpr int64_t kWideMinRows = 64;
// Rows per wide tile call: q4_0 4 (two calls per activation tile), q8_0 8.
template <bool kQ4>
constexpr int kWideRows = kQ4 ? 4 : 8;

template <bool kQ4, class Unpack, bool kPf>
struct WideTiles {
    static constexpr int NB = kQ4 ? 2 : 1;
    // Calls never take more than kWideRows rows: those entries are null (and not instantiated).
    template <int NC, int P>
    static constexpr WideFn f = NC <= kWideRows<kQ4> ? tile_wide<kQ4, Unpack, (NC <= kWideRows<kQ4> ? NC : 1), NB, P, kPf> : nullptr;
    // [pairs - 1][rows - 1]; odd row counts do not occur with pairs.
    static constexpr WideFn fn[2][kActTile] = {
        {f<1, 1>, f<2, 1>, f<3, 1>, f<4, 1>, f<5, 1>, f<6, 1>, f<7, 1>, f<8, 1>},
        {nullptr, f<2, 2>, nullptr, f<4, 2>, nullptr, f<6, 2>, nullptr, f<8, 2>},
    };
};

// gemm with the wide tiles from kWideMinRows activation rows: groups in pairs (an odd last
// one takes the one-group tile), the activations in the same L2 slices as gemm's.
template <bool kQ4, class Unpack>
void gemm_wide(const GemmTask& t) {
    // Few tiles (generation, batched decoding): the weights stream from memory for little reuse,
    // and the one-group tiles stream better (one stream, not two interleaved). kiln-bench
    // --parallel 8,32 on the 1b Q4_0 model, 2 alternated pairs: wide 145-152 / 313-323 t/s
    // against 168-200 / 373-386. Prompts (128 rows and more) gain.
    if (t.M * t.pairs < kWideMinRows) {
        gemm<kQ4, Unpack>(t);
        return;
    }
    const int64_t nb = t.K / 32;
    const size_t tile_bytes = act_tile_bytes(t.K);
    constexpr int kRows = kWideRows<kQ4>;
    auto tiles = [&](const uint8_t* wg, int64_t g, int64_t r0, int nc, bool first) {
        const uint8_t* xt = t.x + (r0 / kActTile) * tile_bytes;
        float* yg = t.y + g * kPackRows;
        if (g + 1 == t.n_groups) {  // an odd group left
            const TileFn fn = first ? Tiles<kQ4, Unpack, true>::fn[t.pairs - 1][nc - 1] : Tiles<kQ4, Unpack, false>::fn[t.pairs - 1][nc - 1];
            fn(wg, nb, xt, yg + (r0 / t.pairs) * t.y_stride, t.y_stride);
            return;
        }
        for (int j0 = 0; j0 < nc; j0 += kRows) {
            const int n = std::min(kRows, nc - j0);
            const WideFn fn = first && j0 == 0 ? WideTiles<kQ4, Unpack, true>::fn[t.pairs - 1][n - 1] : WideTiles<kQ4, Unpack, false>::fn[t.pairs - 1][n - 1];
            fn(wg, t.w_group_bytes, nb, xt, j0, yg + ((r0 + j0) / t.pairs) * t.y_stride, t.y_stride);
        }
    };
    for_each_packed_tile(t, size_t{1} << 20, tiles, 2);
}

}  // namespace
}  // namespace kiln::cpu
