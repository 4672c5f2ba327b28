// AVX-512 VNNI packed GEMM kernels (gemm.h) for Q4_K and Q6_K weights, the Q6_K generation tile
// as a template over how its quants are unpacked (the policy U: U::quants). Included only by
// gemm_kquants_avx512.cpp (shifts and masks, Q6ShiftUnpack) and gemm_kquants_avx512gfni.cpp (GF(2)
// affine ops, for CPUs with GFNI), which are compiled with different instruction sets: everything
// here is in an unnamed namespace, so each file gets its own copies and the linker cannot mix them.
//
// As for q4_0 (gemm_avx512.cpp), a 512-bit register holds one 32-bit lane per weight row of
// a 16-row group, and vpdpbusd multiplies 4 unsigned weight quants of every row with 4
// signed activation quants broadcast from the tile. The K-quants add per-row sub-block
// scales: they are unpacked (integer byte shuffles) and turned into float vectors d * sc
// once per super-block for the whole activation tile, so per 32-element activation block
// and activation row the cost over the 8 vpdpbusd is:
//   Q4_K: int->float, x activation d, FMA with d * sc, FMA of the min term (4 ops; the
//         generation tile applies d and dmin per super-block instead, tile_q4_K_gen);
//   Q6_K: two 16-element sub-blocks, each starting from -32 * (sum of its activation quants)
//         (a scalar, broadcast from memory) and ending in int->float and an FMA with d * sc,
//         then one FMA with the activation d (5 ops).
// Unpacking the weights costs about as much again per tile, so with more than one tile
// (prompts) each 16-row group is first decoded into 8-bit quants and float scale vectors
// that all tiles share; generation (one tile) unpacks on the fly. Fast precision's prompts
// take activations with one d per super-block (PackedKernels::coarse), which drops the
// "x activation d" per block and row (tile_q4_K_decoded / tile_q6_K_decoded, kSuper).
// Activation tiles: see gemm_kquants_scalar.cpp (the third field of a block).
#pragma once

#include <immintrin.h>

// GCC 12's AVX-512 headers trigger -Wmaybe-uninitialized on their own intrinsics
// (_mm512_undefined_* inside cvtph/cvtepi32); the code here initialises everything.
// (For the including file: gemm_kquants_avx512.cpp and gemm_kquants_avx512gfni.cpp.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <memory>

#include "backends/cpu/kernels/dot_avx512.h"
#include "backends/cpu/kernels/gemm.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {


// Generation tiles, and the decoding of a group for prompts, prefetch the next super-blocks
// into L1 while they compute one, and further ones into L2 (gemm.h, prefetch_weights): into L1
// whole super-blocks about 4.5 KiB ahead, i.e. Q4_K's (2304 bytes per group) 2 blocks ahead and
// Q6_K's (3360) 1 (1 or 2 blocks measured the same on Zen 4). With 2 blocks Q6_K's requests
// into L2 had to run 7.6 KiB ahead (kL1Ahead + 1 KiB); 1 block lets them run 6 KiB ahead as the
// other types' do on Intel: 2 threads streaming 256 MiB each through the precise generation
// tile, as a share of a plain read in the same run, 0.90-0.92 -> 0.93-0.96 (AMX Xeon).
template <size_t kBytes>
constexpr size_t kL1AheadBytes = std::max<size_t>(1, 4608 / kBytes) * kBytes;

template <size_t kBytes>
inline void prefetch_ahead(const WeightsPrefetch& wp, const uint8_t* blk) {
    prefetch_weights<kBytes, kL1AheadBytes<kBytes>>(wp, blk);
}
// prefetch_ahead's requests in 8 pieces, one per step of a super-block (the generation tiles where
// they make no near requests: AMD). Intel's generation tiles ask for a share of the lines at every
// line step instead (tile_q4_K_gen_lines, tile_q6_K_gen_lines).
template <size_t kBytes>
inline void prefetch_ahead_part(const WeightsPrefetch& wp, const uint8_t* blk, int part) {
    prefetch_weights_part<kBytes, 8, kL1AheadBytes<kBytes>>(wp, blk, part);
}

// Byte t of every 32-bit lane, sign-extended.
inline __m512i lane_byte_signed(__m512i v, int t) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * t), 24); }

// Accumulates into sum[j] the dot products of activation row j of a tile block with weight
// registers C0 .. C0 + NCH - 1 (register c = elements 4c..4c+3 of every weight row).
template <int NC, int C0, int NCH>
inline void dot_chunks(__m512i (&sum)[NC], const __m512i* w, const uint8_t* xb) {
#pragma GCC unroll 8
    for (int c = C0; c < C0 + NCH; ++c) {
#pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            const auto* xq = reinterpret_cast<const int32_t*>(xb + 32 * j);
            sum[j] = dpbusd_bcast(sum[j], w[c], xq + c);
        }
    }
}

// ---- unpacking (shared by the direct and the decoded-group kernels) ----

// The 6-bit scales and mins of sub-blocks 0..7 of a Q4_K super-block as floats (one lane
// per row), without d and dmin: the generation tile applies those once per super-block.
inline void q4_K_scales_raw(const block_q4_Kx16* blk, __m512 (&sc)[8], __m512 (&mn)[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F), m30 = _mm512_set1_epi8(0x30);
    // Byte t of each lane: scale / min of sub-block t (lo) and 4 + t (hi); see k4_scale_min.
    const __m512i A = _mm512_loadu_si512(blk->scales), B = _mm512_loadu_si512(blk->scales + 64),
                  C = _mm512_loadu_si512(blk->scales + 128);
    const __m512i sc_lo = _mm512_and_si512(A, m6), mn_lo = _mm512_and_si512(B, m6);
    // 0xF8: a | (b & c)
    const __m512i sc_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(C, m4), _mm512_srli_epi32(A, 2), m30, 0xF8);
    const __m512i mn_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(C, 4), m4), _mm512_srli_epi32(B, 2), m30, 0xF8);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
        sc[j] = _mm512_cvtepi32_ps(lane_byte(j < 4 ? sc_lo : sc_hi, j % 4));
        mn[j] = _mm512_cvtepi32_ps(lane_byte(j < 4 ? mn_lo : mn_hi, j % 4));
    }
}

// d * sc and dmin * m of sub-blocks 0..7 of a Q4_K super-block (one lane per row); the
// odd sub-blocks' d * sc / 16, as their quants come as 16 q (q4_K_weights).
inline void q4_K_scales(const block_q4_Kx16* blk, __m512 (&dsc)[8], __m512 (&dmn)[8]) {
    q4_K_scales_raw(blk, dsc, dmn);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->d)));
    const __m512 d16 = _mm512_mul_ps(d, _mm512_set1_ps(1.0f / 16));  // exact
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->dmin)));
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
        dsc[j] = _mm512_mul_ps(dsc[j], j % 2 ? d16 : d);
        dmn[j] = _mm512_mul_ps(dmn[j], dmin);
    }
}

// Quants of sub-block j: register c = elements 32 j + 4c .. + 3 of every row. Even
// sub-blocks (low nibbles) give q, odd ones (high nibbles) 16 q: masking without the shift
// saves an op per register, the 16 is exact in the int32 sums (|16 S| < 2^20) and cancels in
// the scale (q4_K_scales).
inline void q4_K_weights(const block_q4_Kx16* blk, int j, __m512i (&w)[8]) {
    const __m512i mask = _mm512_set1_epi8(j % 2 ? static_cast<char>(0xF0) : 0x0F);
    const uint8_t* q = blk->qs + 512 * (j / 2);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) w[c] = _mm512_and_si512(_mm512_loadu_si512(q + 64 * c), mask);
}

// The integer products of sub-block j with the NC activation rows of tile block xb (both
// Q4_K tiles; the scales are applied by the caller).
template <int NC>
inline void q4_K_sub_block_sums(const block_q4_Kx16* blk, int j, const uint8_t* xb, __m512i (&sum)[NC]) {
    __m512i w[8];
    q4_K_weights(blk, j, w);
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) sum[k] = _mm512_setzero_si512();
    if constexpr (NC <= 2) {  // generation: two chains of 4 per row instead of one of 8
        __m512i sum2[NC];
#pragma GCC unroll 2
        for (int k = 0; k < NC; ++k) sum2[k] = _mm512_setzero_si512();
        dot_chunks<NC, 0, 4>(sum, w, xb);
        dot_chunks<NC, 4, 4>(sum2, w, xb);
#pragma GCC unroll 2
        for (int k = 0; k < NC; ++k) sum[k] = _mm512_add_epi32(sum[k], sum2[k]);
    } else {
        dot_chunks<NC, 0, 8>(sum, w, xb);
    }
}

// The bare scale sc of sub-block s (0..15) of a Q6_K super-block, as floats.
inline __m512 q6_K_scale_raw(const block_q6_Kx16* blk, int s) {
    // Lane byte t of scales dword s / 4 is sub-block 4 (s / 4) + t.
    const __m512i sv = _mm512_loadu_si512(blk->scales + 64 * (s / 4));
    return _mm512_cvtepi32_ps(lane_byte_signed(sv, s % 4));
}
// d * sc of sub-block s (0..15) of a Q6_K super-block.
inline __m512 q6_K_scale(const block_q6_Kx16* blk, __m512 d, int s) { return _mm512_mul_ps(q6_K_scale_raw(blk, s), d); }

// The starting sums of the two 16-element halves of activation block xb for each of its NC rows:
// -32 * (the half's sum of activation quants), the Q6_K quants' offset. Computed as scalars and
// broadcast from memory: one vpmaddwd per row and half took a slot on the ports that the vpdpbusd use.
template <int NC>
inline void q6_K_half_offsets(const uint8_t* xb, int32_t (&off)[2][NC]) {
    const auto* xsums = reinterpret_cast<const int32_t*>(xb + 36 * kActTile);
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) {
        off[0][k] = -32 * static_cast<int16_t>(xsums[k] & 0xFFFF);
        off[1][k] = -32 * (xsums[k] >> 16);
    }
}
// The integer sums of half `half` (sub-block 2b + half) of an activation block xb with the weight
// registers w (register c = elements 4c .. 4c + 3 of the block, as q6_K_weights makes them), from
// the half's offsets.
template <int NC>
inline void q6_K_half_sums(const __m512i* w, const uint8_t* xb, const int32_t (&off)[2][NC], int half, __m512i (&sum)[NC]) {
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) sum[k] = _mm512_set1_epi32(off[half][k]);
    if (half == 0) dot_chunks<NC, 0, 4>(sum, w, xb);
    else dot_chunks<NC, 4, 4>(sum, w, xb);
}

// A Q6_K quant register from its ql (low nibbles for k < 2, else high) and qh (bits 2k, 2k + 1)
// registers: 3 ops (4 for k = 3).
struct Q6ShiftUnpack {
    static __m512i quants(__m512i ql, __m512i qh, int k) {
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
        const __m512i lo = _mm512_and_si512(k < 2 ? ql : _mm512_srli_epi16(ql, 4), m4);
        // bits 2k, 2k+1 of qh to bits 4, 5
        const __m512i hs = k == 0 ? _mm512_slli_epi16(qh, 4) : k == 1 ? _mm512_slli_epi16(qh, 2) : k == 2 ? qh : _mm512_srli_epi16(qh, 2);
        return _mm512_ternarylogic_epi32(lo, hs, m30, 0xF8);  // lo | (hs & 0x30)
    }
};

// Quants (0..63) of activation block b (elements 32 b ..): register c = elements 32 b + 4c ..
// The 6-bit quant of each byte is the low (k < 2) or high nibble of ql and bits 2k, 2k + 1 of qh
// (U::quants puts them together).
template <class U = Q6ShiftUnpack>
inline void q6_K_weights(const block_q6_Kx16* blk, int b, __m512i (&w)[8]) {
    const int h = b / 4, k = b % 4;  // 128-element half; which of its 4 element ranges
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
        const __m512i ql = _mm512_loadu_si512(blk->ql + 64 * (16 * h + 8 * (k % 2) + c));
        const __m512i qh = _mm512_loadu_si512(blk->qh + 64 * (8 * h + c));
        w[c] = U::quants(ql, qh, k);
    }
}

// Output o of a tile from its per-row accumulators (P == 2: a row and its residual row).
// Kernels keep one accumulator per activation row rather than per output: a pair sharing
// one would put all its FMAs into one dependency chain, which bound precise generation.
template <int P>
inline __m512 output(const __m512* acc, int o) {
    return P == 2 ? _mm512_add_ps(acc[P * o], acc[P * o + 1]) : acc[P * o];
}

// ---- direct kernels: one group of 16 weight rows x the NC activation rows of one tile
// (NC / P outputs), unpacking the weights on the fly (generation; prompts of <= 8 rows).

// The generation tiles' per-super-block sums (tile_q4_K_gen, tile_q4_K_gen_lines): sub-block j's
// integer sums (sum[k]: activation row k of block xb) against the bare scale sc and min mn, into
// this super-block's even (se), odd (so) and min (sm) sums, a row and its residual together.
template <int NC, int P>
__attribute__((always_inline)) inline void q4_K_gen_add(const __m512i (&sum)[NC], const uint8_t* xb, int j, __m512 sc, __m512 mn,
                                                        __m512 (&se)[NC / P], __m512 (&so)[NC / P], __m512 (&sm)[NC / P]) {
    const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
    const auto* xsum = reinterpret_cast<const float*>(xb + 36 * kActTile);
#pragma GCC unroll 2
    for (int o = 0; o < NC / P; ++o) {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[P * o]), _mm512_set1_ps(xd[P * o]));
        float ms = xsum[P * o];
        if constexpr (P == 2) {
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[P * o + 1]), _mm512_set1_ps(xd[P * o + 1]), f);
            ms += xsum[P * o + 1];
        }
        if (j % 2) so[o] = _mm512_fmadd_ps(f, sc, so[o]);
        else se[o] = _mm512_fmadd_ps(f, sc, se[o]);
        sm[o] = _mm512_fmadd_ps(mn, _mm512_set1_ps(ms), sm[o]);
    }
}
// The end of a super-block: d, d / 16 and dmin applied to its sums, into the outputs' sums.
template <int NO>
__attribute__((always_inline)) inline void q4_K_gen_finish(const block_q4_Kx16* blk, const __m512 (&se)[NO], const __m512 (&so)[NO],
                                                           const __m512 (&sm)[NO], __m512 (&acc)[NO], __m512 (&accm)[NO]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->dmin)));
    const __m512 d16 = _mm512_mul_ps(d, _mm512_set1_ps(1.0f / 16));  // exact
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) {
        acc[o] = _mm512_fmadd_ps(se[o], d, acc[o]);
        acc[o] = _mm512_fmadd_ps(so[o], d16, acc[o]);
        accm[o] = _mm512_fmadd_ps(sm[o], dmin, accm[o]);
    }
}

// Generation (NC <= 2 activation rows: one row, a row and its residual, or two rows). Per
// super-block and output, the sub-blocks' products are summed against the bare 6-bit scales
// and mins, in three sums (even sub-blocks, odd ones, whose quants come as 16 q, and the
// mins), and d, d / 16 and dmin are applied once at the end; a row and its residual are
// summed into the same output sums before the scales. Against tile_q4_K's per-row
// d * sc: 81 -> 35 multiplies and FMAs per super-block besides the 128 vpdpbusd (precise
// generation), the ops that share the dot products' two pipes on Zen 4. Measured there, one
// thread, weights in L2, calls alternating with the per-row tile in one process: precise
// 0.90-0.94 x the time, one row fast 0.97-0.98; 1b Q4_K_M generation in a slow memory phase
// (bound by the stream, not by this) 1.00 +- 0.01 (4 runs). Keep the prefetch pieces one per
// sub-block: pairing them, with the two sub-blocks of a byte sharing their loads, was 4% slower
// in the model. (All of this on Zen 4, where this tile still runs; Intel: tile_q4_K_gen_lines.)
template <int NC, int P>
void tile_q4_K_gen(const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    static_assert(NC <= 2);
    constexpr int NO = NC / P;
    __m512 acc[NO], accm[NO];
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) acc[o] = accm[o] = _mm512_setzero_ps();
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q4_Kx16*>(wg) + sb;
        __m512 sc[8], mn[8];
        q4_K_scales_raw(blk, sc, mn);
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        __m512 se[NO], so[NO], sm[NO];  // this super-block's even, odd and min sums
#pragma GCC unroll 2
        for (int o = 0; o < NO; ++o) se[o] = so[o] = sm[o] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            prefetch_ahead_part<sizeof(block_q4_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk), j);
            const uint8_t* xb = xs + j * kActBlockBytes;
            __m512i sum[NC];
            q4_K_sub_block_sums<NC>(blk, j, xb, sum);
            q4_K_gen_add<NC, P>(sum, xb, j, sc[j], mn[j], se, so, sm);
        }
        q4_K_gen_finish<NO>(blk, se, so, sm, acc, accm);
    }
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, _mm512_sub_ps(acc[o], accm[o]));
}

// Generation where the tiles make near requests (Intel): as tile_q4_K_gen, but each 64-byte line
// of quants is loaded once, its low nibbles feeding sub-block 2p and its high ones sub-block 2p + 1
// (four dependency chains a row), and every line step asks for one line near and one far (the
// super-block's 4 lines of d, dmin and scales ride on the first 4 steps), as the q4_0 tiles do.
// tile_q4_K_gen's 8 sub-block steps asked for 4-5 lines each. Measured on the AMX Xeon (family 6
// model 167), 2026-12-05: bench_gemm q4_K/M:1/precise:1 (one thread) weights in L2 32 -> 39 GB/s,
// streaming from memory 14.0-14.2 -> 14.7-14.9 GB/s (3 runs each, alternated); 1b Q4_K_M
// generation, two builds decoding in turn (bench/ab_builds.c, both orders), with
// tile_q6_K_gen_lines: 0.958-0.960 x the time. The same sub-block loop as tile_q4_K_gen with its
// requests hoisted out of run-time branches (clean code, 507 instructions a super-block where GCC
// had made 1276, pointers parked in mask registers) was faster in L2 (36-38 GB/s) but streamed
// slower (13.1-14.0 GB/s; the model 1.065 x the time): how requests and loads are laid out
// moves the stream more than the arithmetic does.
template <int NC, int P>
void tile_q4_K_gen_lines(const WeightsPrefetch& wp, const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    static_assert(NC <= 2);
    constexpr int NO = NC / P;
    // Near 7, far 10 KiB (gemm.h, kLineNearBytes). Before: q4_0's distances (near 5, far 7 KiB)
    // 0.989-0.990 x the time of 5.5 / 8 KiB (the old tile's); near 4.5 / far 6.5 KiB 1.013, 5 / 6
    // KiB 1.035 x that of 5 / 7 (both orders each).
    constexpr size_t kNear = kLineNearBytes;
    const size_t far_off = std::max(wp.far_bytes, kLineFarBytes);
    constexpr size_t kQsLine = offsetof(block_q4_Kx16, qs) / 64;  // lines before the quants
    static_assert(offsetof(block_q4_Kx16, qs) % 64 == 0 && kQsLine <= 8);
    __m512 acc[NO], accm[NO];
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) acc[o] = accm[o] = _mm512_setzero_ps();
    const __m512i mlo = _mm512_set1_epi8(0x0F), mhi = _mm512_set1_epi8(static_cast<char>(0xF0));
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q4_Kx16*>(wg) + sb;
        const auto* bytes = reinterpret_cast<const uint8_t*>(blk);
        __m512 sc[8], mn[8];
        q4_K_scales_raw(blk, sc, mn);
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        __m512 se[NO], so[NO], sm[NO];  // this super-block's even, odd and min sums
#pragma GCC unroll 2
        for (int o = 0; o < NO; ++o) se[o] = so[o] = sm[o] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high)
            const uint8_t* xe = xs + 2 * p * kActBlockBytes;
            const uint8_t* xo = xe + kActBlockBytes;
            __m512i e[2][NC], od[2][NC];  // [c / 4][row]: two chains per row and sub-block
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
                for (int k = 0; k < NC; ++k) e[h][k] = od[h][k] = _mm512_setzero_si512();
            }
#pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) {
                const size_t line = kQsLine + 8 * p + c;
                prefetch_l1(bytes + kNear + 64 * line);
                prefetch_l2(bytes + far_off + 64 * line);  // near requests mean Intel, whose far ones go into L2
                if (p == 0 && c < static_cast<int>(kQsLine)) {
                    prefetch_l1(bytes + kNear + 64 * c);
                    prefetch_l2(bytes + far_off + 64 * c);
                }
                const __m512i w = _mm512_loadu_si512(blk->qs + 512 * p + 64 * c);
                const __m512i lo = _mm512_and_si512(w, mlo), hi = _mm512_and_si512(w, mhi);
#pragma GCC unroll 2
                for (int k = 0; k < NC; ++k) {
                    e[c / 4][k] = dpbusd_bcast(e[c / 4][k], lo, reinterpret_cast<const int32_t*>(xe + 32 * k) + c);
                    od[c / 4][k] = dpbusd_bcast(od[c / 4][k], hi, reinterpret_cast<const int32_t*>(xo + 32 * k) + c);
                }
            }
#pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {  // half 0: sub-block 2p, 1: 2p + 1
                __m512i sum[NC];
#pragma GCC unroll 2
                for (int k = 0; k < NC; ++k) sum[k] = half ? _mm512_add_epi32(od[0][k], od[1][k]) : _mm512_add_epi32(e[0][k], e[1][k]);
                q4_K_gen_add<NC, P>(sum, half ? xo : xe, 2 * p + half, sc[2 * p + half], mn[2 * p + half], se, so, sm);
            }
        }
        q4_K_gen_finish<NO>(blk, se, so, sm, acc, accm);
    }
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, _mm512_sub_ps(acc[o], accm[o]));
}

// Prompts of up to 8 rows (3 to 8 activation rows of one tile): per row d * sc.
template <int NC, int P>
void tile_q4_K_rows(const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    constexpr int NO = NC / P;
    __m512 acc[NC];
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q4_Kx16*>(wg) + sb;

        __m512 dsc[8], dmn[8];
        q4_K_scales(blk, dsc, dmn);
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const uint8_t* xb = xs + j * kActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
            const auto* xsum = reinterpret_cast<const float*>(xb + 36 * kActTile);
            __m512i sum[NC];
            q4_K_sub_block_sums<NC>(blk, j, xb, sum);
#pragma GCC unroll 8
            for (int k = 0; k < NC; ++k) {
                const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[k]), _mm512_set1_ps(xd[k]));
                acc[k] = _mm512_fmadd_ps(f, dsc[j], acc[k]);
                acc[k] = _mm512_fnmadd_ps(dmn[j], _mm512_set1_ps(xsum[k]), acc[k]);
            }
        }
    }
#pragma GCC unroll 8
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, output<P>(acc, o));
}

template <int NC, int P>
void tile_q4_K(const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    if constexpr (NC <= 2) {
        const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
        if (wp.near_l1) tile_q4_K_gen_lines<NC, P>(wp, wg, nsb, xt, y, y_stride);
        else tile_q4_K_gen<NC, P>(wg, nsb, xt, y, y_stride);
    } else {
        tile_q4_K_rows<NC, P>(wg, nsb, xt, y, y_stride);
    }
}

// The Q6_K generation tiles' sums (tile_q6_K_gen, tile_q6_K_gen_lines): a 16-element sub-block's
// integer sums (sum[k]: activation row k, whose block's d are xd) against its bare scale sc, into
// the super-block's sum ss, a row and its residual together; then d applied per super-block.
template <int NC, int P>
__attribute__((always_inline)) inline void q6_K_gen_add(const __m512i (&sum)[NC], const float* xd, __m512 sc, __m512 (&ss)[NC / P]) {
#pragma GCC unroll 2
    for (int o = 0; o < NC / P; ++o) {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[P * o]), _mm512_set1_ps(xd[P * o]));
        if constexpr (P == 2) f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[P * o + 1]), _mm512_set1_ps(xd[P * o + 1]), f);
        ss[o] = _mm512_fmadd_ps(f, sc, ss[o]);
    }
}
template <int NO>
__attribute__((always_inline)) inline void q6_K_gen_finish(const block_q6_Kx16* blk, const __m512 (&ss)[NO], __m512 (&acc)[NO]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->d)));
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) acc[o] = _mm512_fmadd_ps(ss[o], d, acc[o]);
}

// Generation (NC <= 2 activation rows): as tile_q4_K_gen, per super-block the sub-blocks' products
// are summed against the bare scales, a row and its residual into one sum, and d is applied once at
// the end: per activation block 4 fewer vector ops than tile_q6_K_rows (no d * sc per sub-block, one
// scaling FMA per output instead of one per row). 1b Q4_K_M generation, the Q6_K products' time in
// one process with calls alternating between the two tiles (3 runs): 0.997, 0.987, 0.985. Where
// the tiles make near requests (Intel) tile_q6_K_gen_lines runs instead.
template <class U, int NC, int P>
void tile_q6_K_gen(const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    static_assert(NC <= 2);
    constexpr int NO = NC / P;
    __m512 acc[NO];
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) acc[o] = _mm512_setzero_ps();
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q6_Kx16*>(wg + sb * sizeof(block_q6_Kx16));
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        __m512 ss[NO];  // this super-block's sum against the bare scales
#pragma GCC unroll 2
        for (int o = 0; o < NO; ++o) ss[o] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int b = 0; b < 8; ++b) {  // activation block b: sub-blocks 2b, 2b+1
            prefetch_ahead_part<sizeof(block_q6_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk), b);
            __m512i w[8];
            q6_K_weights<U>(blk, b, w);
            const uint8_t* xb = xs + b * kActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
            alignas(64) int32_t off[2][NC];
            q6_K_half_offsets<NC>(xb, off);
#pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {
                const __m512 sc = q6_K_scale_raw(blk, 2 * b + half);
                __m512i sum[NC];
                q6_K_half_sums<NC>(w, xb, off, half, sum);
                q6_K_gen_add<NC, P>(sum, xd, sc, ss);
            }
        }
        q6_K_gen_finish<NO>(blk, ss, acc);
    }
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, acc[o]);
}

// Generation where the tiles make near requests (Intel), as tile_q4_K_gen_lines: each line of low
// quant bits (ql) is loaded once, feeding the two activation blocks that take its low and its high
// nibbles (k and k + 2 of a 128-element half), with the line of high bits (qh) they share, and
// every line step asks for its share of the super-block's 53 lines (1 or 2) near and far.
// tile_q6_K_gen went block by block (each ql line loaded twice, each qh line four times) with 6-7
// lines of requests a block. bench_gemm q6_K/M:1/precise:1, one thread: in L2 35-37 -> 40-42 GB/s,
// from memory 13.7-14.1 -> 13.9-14.2 GB/s (AMX Xeon, 3 alternated runs); in the model see above.
template <class U, int NC, int P>
void tile_q6_K_gen_lines(const WeightsPrefetch& wp, const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    static_assert(NC <= 2);
    constexpr int NO = NC / P;
    constexpr int kLines = (sizeof(block_q6_Kx16) + 63) / 64;
    // Near 7, far 10 KiB (gemm.h, kLineNearBytes). Before: tile_q6_K_gen's distances (near 4.3, far
    // 6.8 KiB); q4_0's (5 / 7 KiB) measured alike (1.006 / 0.998 x the time, both orders).
    constexpr size_t kNear = kLineNearBytes;
    const size_t far_off = std::max(wp.far_bytes, kLineFarBytes);
    __m512 acc[NO];
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) acc[o] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q6_Kx16*>(wg + sb * sizeof(block_q6_Kx16));
        const auto* bytes = reinterpret_cast<const uint8_t*>(blk);
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        __m512 ss[NO];  // this super-block's sum against the bare scales
#pragma GCC unroll 2
        for (int o = 0; o < NO; ++o) ss[o] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int pass = 0; pass < 4; ++pass) {
            const int h = pass / 2, par = pass % 2;  // blocks 4h + par (k = par) and 4h + par + 2 (k = par + 2)
            const int b[2] = {4 * h + par, 4 * h + par + 2};
            alignas(64) int32_t off[2][2][NC];
            __m512i sum[2][2][NC];  // [block][half][row]
#pragma GCC unroll 2
            for (int i = 0; i < 2; ++i) {
                q6_K_half_offsets<NC>(xs + b[i] * kActBlockBytes, off[i]);
#pragma GCC unroll 2
                for (int half = 0; half < 2; ++half) {
#pragma GCC unroll 2
                    for (int k = 0; k < NC; ++k) sum[i][half][k] = _mm512_set1_epi32(off[i][half][k]);
                }
            }
#pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) {
                const int t = 8 * pass + c;
#pragma GCC unroll 2
                for (int l = kLines * t / 32; l < kLines * (t + 1) / 32; ++l) {
                    prefetch_l1(bytes + kNear + 64 * l);
                    prefetch_l2(bytes + far_off + 64 * l);  // near requests mean Intel, whose far ones go into L2
                }
                const __m512i ql = _mm512_loadu_si512(blk->ql + 64 * (16 * h + 8 * par + c));
                const __m512i qh = _mm512_loadu_si512(blk->qh + 64 * (8 * h + c));
                const __m512i w[2] = {U::quants(ql, qh, par), U::quants(ql, qh, par + 2)};
#pragma GCC unroll 2
                for (int i = 0; i < 2; ++i) {
                    const uint8_t* xb = xs + b[i] * kActBlockBytes;
#pragma GCC unroll 2
                    for (int k = 0; k < NC; ++k)
                        sum[i][c / 4][k] = dpbusd_bcast(sum[i][c / 4][k], w[i], reinterpret_cast<const int32_t*>(xb + 32 * k) + c);
                }
            }
#pragma GCC unroll 2
            for (int i = 0; i < 2; ++i) {
                const auto* xd = reinterpret_cast<const float*>(xs + b[i] * kActBlockBytes + 32 * kActTile);
#pragma GCC unroll 2
                for (int half = 0; half < 2; ++half) {
                    q6_K_gen_add<NC, P>(sum[i][half], xd, q6_K_scale_raw(blk, 2 * b[i] + half), ss);
                }
            }
        }
        q6_K_gen_finish<NO>(blk, ss, acc);
    }
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, acc[o]);
}

// Prompts of up to 8 rows (3 to 8 activation rows of one tile): per row d * sc.
template <int NC, int P>
void tile_q6_K_rows(const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    constexpr int NO = NC / P;
    __m512 acc[NC];
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q6_Kx16*>(wg + sb * sizeof(block_q6_Kx16));

        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->d)));
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
#pragma GCC unroll 8
        for (int b = 0; b < 8; ++b) {  // activation block b: sub-blocks 2b, 2b+1
            __m512i w[8];
            q6_K_weights<>(blk, b, w);
            const uint8_t* xb = xs + b * kActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
            alignas(64) int32_t off[2][NC];
            q6_K_half_offsets<NC>(xb, off);
#pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {
                const __m512 dsc = q6_K_scale(blk, d, 2 * b + half);
                __m512i sum[NC];
                q6_K_half_sums<NC>(w, xb, off, half, sum);
#pragma GCC unroll 8
                for (int k = 0; k < NC; ++k) {
                    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[k]), _mm512_set1_ps(xd[k]));
                    acc[k] = _mm512_fmadd_ps(f, dsc, acc[k]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, output<P>(acc, o));
}

template <class U, int NC, int P>
void tile_q6_K(const uint8_t* wg, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    if constexpr (NC <= 2) {
        const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
        if (wp.near_l1) tile_q6_K_gen_lines<U, NC, P>(wp, wg, nsb, xt, y, y_stride);
        else tile_q6_K_gen<U, NC, P>(wg, nsb, xt, y, y_stride);
    } else {
        tile_q6_K_rows<NC, P>(wg, nsb, xt, y, y_stride);
    }
}

// ---- decoded-group kernels (prompts): a group's weights are unpacked once into 8-bit
// quants and float scale vectors (kDecodedBytes per super-block), which every activation
// tile then reads: per activation block and row only the products and the scale FMAs remain.
// Per super-block: 64 registers of quants (64 x 64 bytes), then 16 scale vectors.
constexpr size_t kDecodedBytes = detail::kKQuantDecodedBytes;

[[maybe_unused]] void decode_q4_K(const uint8_t* wg, int64_t nsb, uint8_t* dst) {
    auto* out = reinterpret_cast<__m512i*>(dst);
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
    for (int64_t sb = 0; sb < nsb; ++sb, out += kDecodedBytes / 64) {
        const auto* blk = reinterpret_cast<const block_q4_Kx16*>(wg) + sb;
        prefetch_ahead<sizeof(block_q4_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk));  // the group streams from memory
        __m512 dsc[8], dmn[8];
        q4_K_scales(blk, dsc, dmn);
        for (int j = 0; j < 8; ++j) {
            __m512i w[8];
            q4_K_weights(blk, j, w);
            for (int c = 0; c < 8; ++c) _mm512_store_si512(out + 8 * j + c, w[c]);
            _mm512_store_ps(out + 64 + j, dsc[j]);
            _mm512_store_ps(out + 72 + j, dmn[j]);
        }
    }
}

void decode_q6_K(const uint8_t* wg, int64_t nsb, uint8_t* dst) {
    auto* out = reinterpret_cast<__m512i*>(dst);
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
    for (int64_t sb = 0; sb < nsb; ++sb, out += kDecodedBytes / 64) {
        const auto* blk = reinterpret_cast<const block_q6_Kx16*>(wg + sb * sizeof(block_q6_Kx16));
        prefetch_ahead<sizeof(block_q6_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk));  // the group streams from memory
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->d)));
        for (int b = 0; b < 8; ++b) {
            __m512i w[8];
            q6_K_weights<>(blk, b, w);
            for (int c = 0; c < 8; ++c) _mm512_store_si512(out + 8 * b + c, w[c]);
        }
        for (int s = 0; s < 16; ++s) _mm512_store_ps(out + 64 + s, q6_K_scale(blk, d, s));
    }
}

// kSuper: activations scaled per super-block (ActScale::SuperBlock, fast precision:
// PackedKernels::coarse). Each row's d is then read once per super-block, and the scale of a
// sub-block costs one FMA per row where a d per block costs a multiply and an FMA. Zen 4 issues
// multiplies and FMAs on the two pipes that run vpdpbusd (int->float conversions, integer
// adds and shuffles beside them; measured with interleaved loops), so per 64 vpdpbusd of a
// super-block and row: Q4_K and Q6_K 24 -> 17 of those ops, bounding the tiles at 73 and 79%
// of the int8 peak. Measured: 1b Q4_K_M pp128 +6% (kiln-bench, alternated builds).
template <int NC, int P, bool kSuper>
void tile_q4_K_decoded(const uint8_t* decoded, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    constexpr int NO = NC / P;
    const auto* dec = reinterpret_cast<const __m512i*>(decoded);
    __m512 acc[NC];
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb, dec += kDecodedBytes / 64) {
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        const auto* scales = reinterpret_cast<const __m512*>(dec + 64);
        __m512 t[NC];  // kSuper: sum over the sub-blocks of products x d * sc, in units of the row's d
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) {
            __m512i w[8];
#pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) w[c] = _mm512_load_si512(dec + 8 * j + c);
            const uint8_t* xb = xs + j * kActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
            const auto* xsum = reinterpret_cast<const float*>(xb + 36 * kActTile);
            __m512i sum[NC];
#pragma GCC unroll 8
            for (int k = 0; k < NC; ++k) sum[k] = _mm512_setzero_si512();
            dot_chunks<NC, 0, 8>(sum, w, xb);
            const __m512 dsc = scales[j], dmn = scales[8 + j];
#pragma GCC unroll 8
            for (int k = 0; k < NC; ++k) {
                if constexpr (kSuper) {
                    t[k] = j == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(sum[k]), dsc) : _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k]), dsc, t[k]);
                } else {
                    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[k]), _mm512_set1_ps(xd[k]));
                    acc[k] = _mm512_fmadd_ps(f, dsc, acc[k]);
                }
                acc[k] = _mm512_fnmadd_ps(dmn, _mm512_set1_ps(xsum[k]), acc[k]);
            }
        }
        if constexpr (kSuper) {
            const auto* xd = reinterpret_cast<const float*>(xs + 32 * kActTile);  // the super-block's d (each block holds it)
#pragma GCC unroll 8
            for (int k = 0; k < NC; ++k) acc[k] = _mm512_fmadd_ps(t[k], _mm512_set1_ps(xd[k]), acc[k]);
        }
    }
#pragma GCC unroll 8
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, output<P>(acc, o));
}

template <int NC, int P, bool kSuper>
void tile_q6_K_decoded(const uint8_t* decoded, int64_t nsb, const uint8_t* xt, float* y, int64_t y_stride) {
    constexpr int NO = NC / P;
    const auto* dec = reinterpret_cast<const __m512i*>(decoded);
    __m512 acc[NC];
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb, dec += kDecodedBytes / 64) {
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        const auto* scales = reinterpret_cast<const __m512*>(dec + 64);
        // Per row: the sum over sub-blocks of products x d * sc, in units of the activation d
        // (kSuper: the super-block's; else this block's, then one FMA with it per block).
        __m512 t[NC];
#pragma GCC unroll 1
        for (int b = 0; b < 8; ++b) {
            const uint8_t* xb = xs + b * kActBlockBytes;
            alignas(64) int32_t off[2][NC];
            q6_K_half_offsets<NC>(xb, off);
#pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {
                __m512i w[8];
#pragma GCC unroll 4
                for (int c = 4 * half; c < 4 * half + 4; ++c) w[c] = _mm512_load_si512(dec + 8 * b + c);
                __m512i sum[NC];
                q6_K_half_sums<NC>(w, xb, off, half, sum);
                const __m512 dsc = scales[2 * b + half];
#pragma GCC unroll 8
                for (int k = 0; k < NC; ++k) {
                    const bool first = half == 0 && (!kSuper || b == 0);
                    t[k] = first ? _mm512_mul_ps(_mm512_cvtepi32_ps(sum[k]), dsc) : _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k]), dsc, t[k]);
                }
            }
            if constexpr (!kSuper) {
                const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile);
#pragma GCC unroll 8
                for (int k = 0; k < NC; ++k) acc[k] = _mm512_fmadd_ps(t[k], _mm512_set1_ps(xd[k]), acc[k]);
            }
        }
        if constexpr (kSuper) {
            const auto* xd = reinterpret_cast<const float*>(xs + 32 * kActTile);  // the super-block's d (each block holds it)
#pragma GCC unroll 8
            for (int k = 0; k < NC; ++k) acc[k] = _mm512_fmadd_ps(t[k], _mm512_set1_ps(xd[k]), acc[k]);
        }
    }
#pragma GCC unroll 8
    for (int o = 0; o < NO; ++o) _mm512_storeu_ps(y + o * y_stride, output<P>(acc, o));
}

using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, float*, int64_t);

// [pairs - 1][columns - 1]; odd column counts do not occur with pairs.
template <template <int, int> class T>
struct Tiles {
    static constexpr TileFn fn[2][kActTile] = {
        {T<1, 1>::f, T<2, 1>::f, T<3, 1>::f, T<4, 1>::f, T<5, 1>::f, T<6, 1>::f, T<7, 1>::f, T<8, 1>::f},
        {nullptr, T<2, 2>::f, nullptr, T<4, 2>::f, nullptr, T<6, 2>::f, nullptr, T<8, 2>::f},
    };
};
template <int NC, int P>
struct Q4K {
    static constexpr TileFn f = tile_q4_K<NC, P>;
};
template <class U>
struct Q6K {
    template <int NC, int P>
    struct T {
        static constexpr TileFn f = tile_q6_K<U, NC, P>;
    };
};
// The decoded-group tiles; kSuper: activations with one d per super-block (coarse).
template <bool kSuper>
struct Q4KDecoded {
    template <int NC, int P>
    struct T {
        static constexpr TileFn f = tile_q4_K_decoded<NC, P, kSuper>;
    };
};
template <bool kSuper>
struct Q6KDecoded {
    template <int NC, int P>
    struct T {
        static constexpr TileFn f = tile_q6_K_decoded<NC, P, kSuper>;
    };
};

// One tile: the weights are used once, unpack them on the fly (generation; prompts of up to
// 8 rows). More (kDecode): decode each group once (a few % of the work) and run the tiles over
// the decoded form.
template <template <int, int> class T, template <int, int> class TD, void (*kDecode)(const uint8_t*, int64_t, uint8_t*)>
void gemm(const GemmTask& t) {
    const int64_t nsb = t.K / QK_K;
    const int64_t rows = t.M * t.pairs;
    const size_t tile_bytes = act_tile_bytes(t.K);
    struct alignas(64) Line {
        uint8_t b[64];
    };
    const std::unique_ptr<Line[]> dec(rows > kActTile ? new Line[static_cast<size_t>(nsb) * kDecodedBytes / 64] : nullptr);  // uninitialised
    for (int64_t g = 0; g < t.n_groups; ++g) {
        const uint8_t* wg = t.w + g * t.w_group_bytes;
        if (dec) kDecode(wg, nsb, dec[0].b);
        for (int64_t r0 = 0; r0 < rows; r0 += kActTile) {
            const int nc = static_cast<int>(std::min<int64_t>(kActTile, rows - r0));
            const uint8_t* xt = t.x + (r0 / kActTile) * tile_bytes;
            float* y = t.y + (r0 / t.pairs) * t.y_stride + g * kPackRows;
            if (dec) Tiles<TD>::fn[t.pairs - 1][nc - 1](dec[0].b, nsb, xt, y, t.y_stride);
            else Tiles<T>::fn[t.pairs - 1][nc - 1](wg, nsb, xt, y, t.y_stride);
        }
    }
}

}  // namespace
}  // namespace kiln::cpu
