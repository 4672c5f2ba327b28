// AVX2 packed GEMM kernels (gemm.h) for Q4_K and Q6_K weights, for CPUs without AVX-512 VNNI
// (Haswell..Comet Lake, Zen 2/3). Same scheme as the q4_0 kernel of gemm_avx2.cpp: a 256-bit
// register holds one 32-bit lane for each of 8 weight rows, so a 64-byte chunk of an x16 array
// (4 quants of each of 16 rows) is two registers, rows 0-7 and rows 8-15 (the two halves), and
// vpmaddubsw (unsigned weight quant x signed activation quant -> pairs summed in s16) followed
// by vpmaddwd with ones (-> s32) stands in for vpdpbusd. The sub-block scales are unpacked
// with byte shuffles into float vectors d * sc and dmin * m once per super-block, as in
// gemm_kquants_avx512_tiles.h, whose activation tiles (third field: see gemm_kquants_scalar.cpp)
// these kernels read.
//  - Q4_K: quants 0..15 times |x| <= 127: a pair is at most 3810 and the 8 pairs an s16 lane
//    gathers over a 32-element sub-block at most 30480, so one vpmaddwd per sub-block widens
//    them. Per sub-block and activation row: int->float, x activation d, FMA with d * sc, FMA
//    of the min term (the tile's d * sum(q) times dmin * m).
//  - Q6_K: quants 0..63: a pair is at most 16002, so two chunks add in s16 before widening.
//    Each 16-element sub-block starts from -32 * (the sum of its activation quants), one
//    vpmaddwd of the tile's int16 pair, and ends in int->float, x activation d and an FMA
//    with d * sc.
// A tile call takes up to 4 activation rows x 16 weight rows (16 ymm registers: the rows' s16
// or s32 sums of both halves, the weights and the broadcast activations). Generation tiles
// unpack the weights on the fly and prefetch them; prompts (more than one activation tile)
// first decode each group once per slice into bytes and float scales that every tile reads.
// Measured (bench_gemm, one thread, Zen 3): decoding took Q4_K from 56 to 62-68 G MAC/s and
// Q6_K from 28 to 34-36 at M = 128 / 512; kiln-bench pp128 Q4_K_M about +20% with the AVX2
// activation quantizer.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "backends/cpu/kernels/gemm.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

constexpr int kSubRows = 4;  // activation rows of one tile call
// Activation bytes kept hot per weight pass (as gemm_avx2.cpp: the L2 of AVX2-only CPUs).
constexpr size_t kSliceBytes = size_t{192} << 10;
// Generation tiles prefetch the super-block after next into L1 (gemm_kquants_avx512_tiles.h).
constexpr size_t kPrefetchBlocks = 2;

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i bcast32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
inline __m256 fp16x8(const fp16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Byte t of every 32-bit lane, zero-extended / sign-extended.
inline __m256i lane_byte(__m256i v, int t) {
    const int base = static_cast<int>(0x80808000u) | t;
    return _mm256_shuffle_epi8(v, _mm256_setr_epi32(base, base + 4, base + 8, base + 12, base, base + 4, base + 8, base + 12));
}
inline __m256i lane_byte_signed(__m256i v, int t) { return _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * t), 24); }

// As gemm_avx2.cpp: keeps GCC from reassociating the accumulation chains into trees that spill.
inline void keep_chain(__m256i& v) {
#if defined(__GNUC__)
    __asm__("" : "+x"(v));
#else
    (void)v;
#endif
}

// Output o of a tile from per-row accumulators [row][half] (P == 2: a row and its residual).
template <int R, int P>
inline void store_outputs(const __m256 (&acc)[R][2], float* y, int64_t y_stride) {
#pragma GCC unroll 4
    for (int o = 0; o < R / P; ++o) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            _mm256_storeu_ps(y + o * y_stride + 8 * h, P == 2 ? _mm256_add_ps(acc[P * o][h], acc[P * o + 1][h]) : acc[P * o][h]);
        }
    }
}

// ---- Q4_K ----

// d * sc and dmin * m of sub-blocks 0..7, [sub-block][half] x 8 rows.
struct Q4KScales {
    alignas(32) float dsc[8][2][8];
    alignas(32) float dmn[8][2][8];
};

inline void q4_K_scales(const block_q4_Kx16* blk, Q4KScales& s) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        // Byte t of each lane: scale / min of sub-block t (lo) and 4 + t (hi); see k4_scale_min.
        const __m256i A = load256(blk->scales + 32 * h), B = load256(blk->scales + 64 + 32 * h),
                      C = load256(blk->scales + 128 + 32 * h);
        const __m256i sc_lo = _mm256_and_si256(A, m6), mn_lo = _mm256_and_si256(B, m6);
        const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(C, m4), _mm256_and_si256(_mm256_srli_epi32(A, 2), m30));
        const __m256i mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(C, 4), m4), _mm256_and_si256(_mm256_srli_epi32(B, 2), m30));
        const __m256 d = fp16x8(blk->d + 8 * h), dmin = fp16x8(blk->dmin + 8 * h);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            _mm256_store_ps(s.dsc[j][h], _mm256_mul_ps(_mm256_cvtepi32_ps(lane_byte(j < 4 ? sc_lo : sc_hi, j % 4)), d));
            _mm256_store_ps(s.dmn[j][h], _mm256_mul_ps(_mm256_cvtepi32_ps(lane_byte(j < 4 ? mn_lo : mn_hi, j % 4)), dmin));
        }
    }
}

// s32 sums of sub-block 2 jj + kHigh (its quants: the low or the high nibbles of sub-block pair
// jj) against R activation rows ([row][half], one lane per weight row).
// kDecoded: q points to the sub-block's decoded quants (decode_q4_K), else to the packed
// nibbles of sub-block pair jj (blk->qs + 512 jj).
template <int R, bool kHigh, bool kDecoded>
inline void q4_K_sums(const uint8_t* q, const uint8_t* xb, int c0, __m256i (&s)[R][2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256i s16[R][2];
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) s16[k][0] = s16[k][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
        __m256i w0 = load256(q + 64 * c), w1 = load256(q + 64 * c + 32);
        if constexpr (!kDecoded) {
            if constexpr (kHigh) {
                w0 = _mm256_srli_epi16(w0, 4);
                w1 = _mm256_srli_epi16(w1, 4);
            }
            w0 = _mm256_and_si256(w0, m4);
            w1 = _mm256_and_si256(w1, m4);
        }
#pragma GCC unroll 4
        for (int k = 0; k < R; ++k) {
            const __m256i x = bcast32(xb + 32 * (c0 + k) + 4 * c);
            s16[k][0] = _mm256_add_epi16(s16[k][0], _mm256_maddubs_epi16(w0, x));
            s16[k][1] = _mm256_add_epi16(s16[k][1], _mm256_maddubs_epi16(w1, x));
        }
#pragma GCC unroll 4
        for (int k = 0; k < R; ++k) keep_chain(s16[k][0]), keep_chain(s16[k][1]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) {
        s[k][0] = _mm256_madd_epi16(s16[k][0], ones);
        s[k][1] = _mm256_madd_epi16(s16[k][1], ones);
    }
}

// ---- decoded groups (prompts) ----
// With more than one activation tile per weight pass, each 16-row group is first unpacked
// once into 8-bit quants and float scale vectors that all the tiles read, as
// gemm_kquants_avx512_tiles.h does; per super-block kDecodedBytes: 64 chunks x 2 halves of 32
// bytes (Q4_K: sub-block j, chunk c at (8 j + c) x 64; Q6_K: activation block b, chunk c at
// (8 b + c) x 64), then Q4_K: Q4KScales / Q6_K: d * sc [sub-block][half] x 8 rows.
constexpr size_t kDecodedQuantBytes = 64 * 64;
constexpr size_t kDecodedBytes = kDecodedQuantBytes + sizeof(Q4KScales);

template <size_t kBlockBytes>
inline void prefetch_ahead(const WeightsPrefetch& wp, const uint8_t* blk) {
    prefetch_weights<kBlockBytes, kPrefetchBlocks * kBlockBytes>(wp, blk);
}

void decode_q4_K(const uint8_t* wg, int64_t nsb, uint8_t* dst) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
    for (int64_t sb = 0; sb < nsb; ++sb, dst += kDecodedBytes) {
        const auto* blk = reinterpret_cast<const block_q4_Kx16*>(wg) + sb;
        prefetch_ahead<sizeof(block_q4_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk));  // the group streams from memory
        for (int jj = 0; jj < 4; ++jj) {
            for (int c = 0; c < 16; ++c) {  // 8 chunks x 2 halves
                const __m256i w = load256(blk->qs + 512 * jj + 32 * c);
                _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 64 * 8 * (2 * jj) + 32 * c), _mm256_and_si256(w, m4));
                _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 64 * 8 * (2 * jj + 1) + 32 * c), _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));
            }
        }
        q4_K_scales(blk, *reinterpret_cast<Q4KScales*>(dst + kDecodedQuantBytes));
    }
}

// One group of 16 weight rows x R activation rows (columns c0.. of a tile; R / P outputs).
// kDecoded: wg is the group decoded by decode_q4_K.
template <int R, int P, bool kPrefetch, bool kDecoded>
void tile_q4_K(const uint8_t* wg, int64_t nsb, const uint8_t* xt, int c0, float* y, int64_t y_stride) {
    static_assert(!(kPrefetch && kDecoded));
    __m256 acc[R][2];
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    [[maybe_unused]] Q4KScales scales;
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q4_Kx16*>(wg) + sb;
        const uint8_t* dec = wg + sb * kDecodedBytes;
        const Q4KScales& sc = kDecoded ? *reinterpret_cast<const Q4KScales*>(dec + kDecodedQuantBytes) : scales;
        if constexpr (!kDecoded) q4_K_scales(blk, scales);
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        // Sub-block j's products into the accumulators.
        auto add = [&](int j, const __m256i (&s)[R][2]) {
            const uint8_t* xb = xs + j * kActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile) + c0;
            const auto* xsum = reinterpret_cast<const float*>(xb + 36 * kActTile) + c0;
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                const __m256 dsc = _mm256_load_ps(sc.dsc[j][h]), dmn = _mm256_load_ps(sc.dmn[j][h]);
#pragma GCC unroll 4
                for (int k = 0; k < R; ++k) {
                    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s[k][h]), _mm256_set1_ps(xd[k]));
                    acc[k][h] = _mm256_fmadd_ps(f, dsc, acc[k][h]);
                    acc[k][h] = _mm256_fnmadd_ps(dmn, _mm256_set1_ps(xsum[k]), acc[k][h]);
                }
            }
        };
#pragma GCC unroll 1
        for (int jj = 0; jj < 4; ++jj) {
            __m256i s[R][2];
            if constexpr (kPrefetch) {
                prefetch_weights_part<sizeof(block_q4_Kx16), 8, kPrefetchBlocks * sizeof(block_q4_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk), 2 * jj);
            }
            const uint8_t* q = kDecoded ? dec + 64 * 8 * (2 * jj) : blk->qs + 512 * jj;
            q4_K_sums<R, false, kDecoded>(q, xs + 2 * jj * kActBlockBytes, c0, s);
            add(2 * jj, s);
            if constexpr (kPrefetch) {
                prefetch_weights_part<sizeof(block_q4_Kx16), 8, kPrefetchBlocks * sizeof(block_q4_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk), 2 * jj + 1);
            }
            q4_K_sums<R, true, kDecoded>(kDecoded ? q + 64 * 8 : q, xs + (2 * jj + 1) * kActBlockBytes, c0, s);
            add(2 * jj + 1, s);
        }
    }
    store_outputs<R, P>(acc, y, y_stride);
}

// ---- Q6_K ----

// Quants (0..63) of activation block b, chunk c (elements 32 b + 4c .. + 3), half h.
inline __m256i q6_K_chunk(const block_q6_Kx16* blk, int b, int c, int h) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const int hh = b / 4, k = b % 4;  // 128-element half; which of its 4 element ranges
    const __m256i ql = load256(blk->ql + 64 * (16 * hh + 8 * (k % 2) + c) + 32 * h);
    const __m256i qh = load256(blk->qh + 64 * (8 * hh + c) + 32 * h);
    const __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
    // bits 2k, 2k+1 of qh to bits 4, 5
    const __m256i hs = k == 0 ? _mm256_slli_epi16(qh, 4) : k == 1 ? _mm256_slli_epi16(qh, 2) : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hs, m30));
}

// vpmaddwd with these turns an activation block's (low, high) int16 quant sums into -32 * low
// or -32 * high: the offset of the Q6_K quants of sub-block 2b or 2b + 1.
inline __m256i q6_K_offset(int sub) { return _mm256_set1_epi32(sub ? static_cast<int>(0xFFE00000u) : 0x0000FFE0); }

// d * sc of sub-block s, [s][half] x 8 rows.
using Q6KScales = float[16][2][8];
static_assert(sizeof(Q6KScales) == sizeof(Q4KScales));

inline void q6_K_scales(const block_q6_Kx16* blk, Q6KScales& dsc) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m256 d = fp16x8(blk->d + 8 * h);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            // lane byte t of scales dword q is sub-block 4 q + t
            const __m256i sv = load256(reinterpret_cast<const uint8_t*>(blk->scales) + 64 * q + 32 * h);
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) _mm256_store_ps(dsc[4 * q + t][h], _mm256_mul_ps(_mm256_cvtepi32_ps(lane_byte_signed(sv, t)), d));
        }
    }
}

void decode_q6_K(const uint8_t* wg, int64_t nsb, uint8_t* dst) {
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
    for (int64_t sb = 0; sb < nsb; ++sb, dst += kDecodedBytes) {
        const auto* blk = reinterpret_cast<const block_q6_Kx16*>(wg + sb * sizeof(block_q6_Kx16));
        prefetch_ahead<sizeof(block_q6_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk));  // the group streams from memory
        for (int b = 0; b < 8; ++b) {
            for (int c = 0; c < 8; ++c) {
                for (int h = 0; h < 2; ++h) _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 64 * (8 * b + c) + 32 * h), q6_K_chunk(blk, b, c, h));
            }
        }
        q6_K_scales(blk, *reinterpret_cast<Q6KScales*>(dst + kDecodedQuantBytes));
    }
}

// s32 sums of sub-block 2 b + sub against R activation rows ([row][half], one lane per weight
// row), from the -32 offset on (chunk(b, c, h): the quants, packed or decoded).
template <int R, class Chunk>
__attribute__((always_inline)) inline void q6_K_sub_sums(const Chunk& chunk, const uint8_t* xb, int c0, int b, int sub,
                                                         __m256i (&s)[R][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const auto* xsums = reinterpret_cast<const int32_t*>(xb + 36 * kActTile) + c0;
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) s[k][0] = s[k][1] = _mm256_madd_epi16(_mm256_set1_epi32(xsums[k]), q6_K_offset(sub));
#pragma GCC unroll 2
    for (int c = 4 * sub; c < 4 * sub + 4; c += 2) {  // two chunks add in s16 (at most 32004)
        const __m256i wa0 = chunk(b, c, 0), wa1 = chunk(b, c, 1);
        const __m256i wb0 = chunk(b, c + 1, 0), wb1 = chunk(b, c + 1, 1);
#pragma GCC unroll 4
        for (int k = 0; k < R; ++k) {
            const __m256i xa = bcast32(xb + 32 * (c0 + k) + 4 * c), xn = bcast32(xb + 32 * (c0 + k) + 4 * c + 4);
            const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(wa0, xa), _mm256_maddubs_epi16(wb0, xn));
            const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(wa1, xa), _mm256_maddubs_epi16(wb1, xn));
            s[k][0] = _mm256_add_epi32(s[k][0], _mm256_madd_epi16(p0, ones));
            s[k][1] = _mm256_add_epi32(s[k][1], _mm256_madd_epi16(p1, ones));
        }
#pragma GCC unroll 4
        for (int k = 0; k < R; ++k) keep_chain(s[k][0]), keep_chain(s[k][1]);
    }
}

// Prompts and small batches (generation: tile_q6_K_gen). kDecoded: wg is the group decoded by
// decode_q6_K.
template <int R, int P, bool kDecoded>
void tile_q6_K(const uint8_t* wg, int64_t nsb, const uint8_t* xt, int c0, float* y, int64_t y_stride) {
    __m256 acc[R][2];
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    alignas(32) Q6KScales scales;
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q6_Kx16*>(wg + sb * sizeof(block_q6_Kx16));
        const uint8_t* dec = wg + sb * kDecodedBytes;
        const Q6KScales& dsc = kDecoded ? *reinterpret_cast<const Q6KScales*>(dec + kDecodedQuantBytes) : scales;
        if constexpr (!kDecoded) q6_K_scales(blk, scales);
        auto chunk = [&](int b, int c, int h) {
            if constexpr (kDecoded) return load256(dec + 64 * (8 * b + c) + 32 * h);
            else return q6_K_chunk(blk, b, c, h);
        };
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
#pragma GCC unroll 1
        for (int b = 0; b < 8; ++b) {  // activation block b: sub-blocks 2b, 2b+1
            const uint8_t* xb = xs + b * kActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile) + c0;
#pragma GCC unroll 2
            for (int sub = 0; sub < 2; ++sub) {
                __m256i s[R][2];
                q6_K_sub_sums<R>(chunk, xb, c0, b, sub, s);
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256 ds = _mm256_load_ps(dsc[2 * b + sub][h]);
#pragma GCC unroll 4
                    for (int k = 0; k < R; ++k) {
                        const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s[k][h]), _mm256_set1_ps(xd[k]));
                        acc[k][h] = _mm256_fmadd_ps(f, ds, acc[k][h]);
                    }
                }
            }
        }
    }
    store_outputs<R, P>(acc, y, y_stride);
}

// Generation (NC <= 2 activation rows: one, or a row and its residual): as tile_q6_K over the
// packed quants, but each sub-block's sums go against its bare scale into the super-block's sum
// (a row and its residual into one), and d is applied once per super-block, as the AVX-512
// tile_q6_K_gen does; the activation blocks are unrolled, so which bits of ql / qh a block takes
// is known at compile time (in tile_q6_K's loop over them GCC branched on b % 4 for every chunk
// and kept the accumulators in memory). On Zen 3 the Q6_K products were the slowest stream of
// generation (1b Q4_K_M, kiln-bench --profile: logits 15.8 GiB/s against the Q4_K products'
// 22.5). Measured there (2 vCPUs of an EPYC, 2026-12-06): bench_gemm q6_K/M:1/precise:1, one
// thread, 3 alternated rounds, GB/s: from L3 (dram:0) 8.3-10.1 -> 11.9-14.4, from memory
// (dram:1) 7.5-8.0 -> 8.3-11.1; 1b Q4_K_M generation (bench/ab_builds.c, both orders, 150
// tokens, B/A time) 0.949 / 0.958, again 0.957 / 0.972; 128-token prompts unchanged (0.993 / 0.971).
template <int NC, int P>
void tile_q6_K_gen(const uint8_t* wg, int64_t nsb, const uint8_t* xt, int c0, float* y, int64_t y_stride) {
    static_assert(NC <= 2 && NC % P == 0);
    constexpr int NO = NC / P;
    __m256 acc[NO][2];
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) acc[o][0] = acc[o][1] = _mm256_setzero_ps();
    const WeightsPrefetch wp = tile_prefetch();  // outside the loop (gemm.h)
#pragma GCC unroll 1
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const auto* blk = reinterpret_cast<const block_q6_Kx16*>(wg + sb * sizeof(block_q6_Kx16));
        const uint8_t* xs = xt + sb * 8 * kActBlockBytes;
        __m256 ss[NO][2];  // the super-block's sums against the bare scales
#pragma GCC unroll 2
        for (int o = 0; o < NO; ++o) ss[o][0] = ss[o][1] = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int b = 0; b < 8; ++b) {  // activation block b: sub-blocks 2b, 2b+1
            prefetch_weights_part<sizeof(block_q6_Kx16), 8, kPrefetchBlocks * sizeof(block_q6_Kx16)>(wp, reinterpret_cast<const uint8_t*>(blk), b);
            const uint8_t* xb = xs + b * kActBlockBytes;
            const auto* xd = reinterpret_cast<const float*>(xb + 32 * kActTile) + c0;
#pragma GCC unroll 2
            for (int sub = 0; sub < 2; ++sub) {
                __m256i s[NC][2];
                q6_K_sub_sums<NC>([blk](int bb, int c, int h) { return q6_K_chunk(blk, bb, c, h); }, xb, c0, b, sub, s);
                const int j = 2 * b + sub;  // sub-block: byte j % 4 of scales dword j / 4
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i sv = load256(reinterpret_cast<const uint8_t*>(blk->scales) + 64 * (j / 4) + 32 * h);
                    const __m256 sc = _mm256_cvtepi32_ps(lane_byte_signed(sv, j % 4));
#pragma GCC unroll 2
                    for (int o = 0; o < NO; ++o) {
                        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s[P * o][h]), _mm256_set1_ps(xd[P * o]));
                        if constexpr (P == 2) f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[P * o + 1][h]), _mm256_set1_ps(xd[P * o + 1]), f);
                        ss[o][h] = _mm256_fmadd_ps(f, sc, ss[o][h]);
                    }
                }
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const __m256 d = fp16x8(blk->d + 8 * h);
#pragma GCC unroll 2
            for (int o = 0; o < NO; ++o) acc[o][h] = _mm256_fmadd_ps(ss[o][h], d, acc[o][h]);
        }
    }
#pragma GCC unroll 2
    for (int o = 0; o < NO; ++o) {
        _mm256_storeu_ps(y + o * y_stride, acc[o][0]);
        _mm256_storeu_ps(y + o * y_stride + 8, acc[o][1]);
    }
}

using TileFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int, float*, int64_t);

template <template <int, int, bool, bool> class T>
struct Tiles {
    // [pairs - 1][rows - 1]; odd row counts do not occur with pairs.
    static constexpr TileFn sub[2][kSubRows] = {
        {T<1, 1, false, false>::f, T<2, 1, false, false>::f, T<3, 1, false, false>::f, T<4, 1, false, false>::f},
        {nullptr, T<2, 2, false, false>::f, nullptr, T<4, 2, false, false>::f},
    };
    // Over a decoded group (prompts).
    static constexpr TileFn decoded[2][kSubRows] = {
        {T<1, 1, false, true>::f, T<2, 1, false, true>::f, T<3, 1, false, true>::f, T<4, 1, false, true>::f},
        {nullptr, T<2, 2, false, true>::f, nullptr, T<4, 2, false, true>::f},
    };
    // Generation (a tile of at most 2 rows): prefetching.
    static constexpr TileFn gen[2][2] = {
        {T<1, 1, true, false>::f, T<2, 1, true, false>::f},
        {nullptr, T<2, 2, true, false>::f},
    };
};
template <int R, int P, bool kPrefetch, bool kDecoded>
struct Q4K {
    static constexpr TileFn f = tile_q4_K<R, P, kPrefetch, kDecoded>;
};
template <int R, int P, bool kPrefetch, bool kDecoded>
struct Q6K {
    static constexpr TileFn f = tile_q6_K<R, P, kDecoded>;
};
template <int R, int P>
struct Q6K<R, P, true, false> {
    static constexpr TileFn f = tile_q6_K_gen<R, P>;
};

template <template <int, int, bool, bool> class T, void (*kDecode)(const uint8_t*, int64_t, uint8_t*)>
void gemm(const GemmTask& t) {
    const int64_t nsb = t.K / QK_K;
    const size_t tile_bytes = act_tile_bytes(t.K);
    // More than one activation tile: each group is decoded once per slice (a few % of the
    // work) and the tiles run over the decoded form.
    struct alignas(64) Line {
        uint8_t b[64];
    };
    const bool decode = t.M * t.pairs > kActTile;
    std::unique_ptr<Line[]> dec(decode ? new Line[static_cast<size_t>(nsb) * kDecodedBytes / 64] : nullptr);  // uninitialised
    uint8_t* decoded = dec ? dec[0].b : nullptr;
    for_each_packed_tile(t, kSliceBytes, [&](const uint8_t* wg, int64_t g, int64_t r0, int nc, bool first) {
        const uint8_t* xt = t.x + (r0 / kActTile) * tile_bytes;
        float* y = t.y + (r0 / t.pairs) * t.y_stride + g * kPackRows;
        if (nc <= 2 && !decoded) {
            Tiles<T>::gen[t.pairs - 1][nc - 1](wg, nsb, xt, 0, y, t.y_stride);
            return;
        }
        if (decoded && first) kDecode(wg, nsb, decoded);
        for (int c0 = 0; c0 < nc; c0 += kSubRows) {
            const int r = std::min(kSubRows, nc - c0);
            if (decoded) Tiles<T>::decoded[t.pairs - 1][r - 1](decoded, nsb, xt, c0, y + (c0 / t.pairs) * t.y_stride, t.y_stride);
            else Tiles<T>::sub[t.pairs - 1][r - 1](wg, nsb, xt, c0, y + (c0 / t.pairs) * t.y_stride, t.y_stride);
        }
    });
}

// Fast precision's prompts and batches: activations scaled per super-block, as on AVX-512 and
// in the scalar reference (PackedKernels::coarse); these kernels read them per block all the same.
constexpr PackedKernels kQ4_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx2, ActAux::Q4K, ActScale::SuperBlock>, .gemm = gemm<Q4K, decode_q4_K>};
constexpr PackedKernels kQ6_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx2, ActAux::Q6K, ActScale::SuperBlock>, .gemm = gemm<Q6K, decode_q6_K>};
constexpr PackedKernels kQ4_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx2, ActAux::Q4K>, .gemm = gemm<Q4K, decode_q4_K>, .coarse = &kQ4_KCoarse};
constexpr PackedKernels kQ6_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx2, ActAux::Q6K>, .gemm = gemm<Q6K, decode_q6_K>, .coarse = &kQ6_KCoarse};

}  // namespace

namespace detail {
const PackedKernels* packed_kquants_avx2(Type t, const CpuFeatures& f) {
    if (!f.avx2 || !f.fma || !f.f16c) return nullptr;
    switch (t) {
        case Type::Q4_K: return &kQ4_K;
        case Type::Q6_K: return &kQ6_K;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu
