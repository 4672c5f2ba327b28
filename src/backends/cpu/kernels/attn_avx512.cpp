// AVX-512 (F + BW + VL + DQ) attention kernels; see attn_kernels.h for the
// algorithm. Only called once isa_supported(Isa::Avx512) holds.
//
//  * gemm: register tiles of 8 rows x 32 columns (16 accumulators); A's
//    elements are broadcast (on Zen 4 as the FMAs' memory operands), B's rows
//    loaded (and converted) as vectors, so up to 8 query rows convert each V
//    element once and neither operand is transposed inside the loop. Q K^T
//    therefore wants K transposed, which k_transpose does once per key block
//    while converting it to float (16 x 16 tiles, see k_tile16); the block is
//    then reused by every query row of the tile (n_rep heads x the tokens of
//    the query block).
//  * exp: range reduction x = n ln2 + r (|r| <= ln2/2, ln2 split in two
//    parts), exp(r) = 1 + r + r^2 P(r) with the degree-5 minimax polynomial
//    of the Cephes expf, then scaling by 2^n; within 4e-7 relative (a few
//    ulp, tested). Inputs below -87.3 (including -inf) give exactly 0.

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers trigger -Wmaybe-uninitialized on their own
// _mm512_undefined_*() placeholders once inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <limits>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/gemm_float.h"

// Register tiles are arrays of vectors indexed by constants once unrolled; GCC otherwise keeps a
// copy of the accumulators on the stack and stores it on every iteration.
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_UNROLL _Pragma("GCC unroll 16")
#else
#define KILN_UNROLL
#endif

namespace kiln::cpu {

namespace {

// Lanes 0 .. rem - 1 (rem may be <= 0 or >= 16).
inline __mmask16 tail_mask(int64_t rem) {
    if (rem <= 0) return 0;
    return rem >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << rem) - 1u);
}

inline __m512 exp16(__m512 x) {
    const __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.3762626647949f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~zero), _mm512_scalef_ps(y, n));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): saturates to +-1 without overflow trouble.
inline __m512 tanh16(__m512 x) {
    const __m512 e = exp16(_mm512_add_ps(x, x));
    return _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
}

// ---- row loads -----------------------------------------------------------------------------------

// Elements d .. d + 16 of a row as floats, zeros where m is clear. Full: every lane lies inside the
// row (m ignored), so the load takes no mask: on Intel a masked load costs a vector uop on the
// ports the FMAs use.
template <Type T, bool Full = false>
inline __m512 load16(const uint8_t* row, int64_t d, __mmask16 m) {
    if constexpr (T == Type::F32) {
        const auto* p = reinterpret_cast<const float*>(row) + d;
        return Full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
    } else if constexpr (T == Type::F16) {
        const auto* p = reinterpret_cast<const uint16_t*>(row) + d;
        return _mm512_cvtph_ps(Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(m, p));
    } else if constexpr (T == Type::BF16) {
        const auto* p = reinterpret_cast<const uint16_t*>(row) + d;
        const __m256i h = Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(m, p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {  // Q8_0: rows are whole blocks, so d is a multiple of 16 and m is full (or empty past the row)
        if (!Full && m == 0) return _mm512_setzero_ps();
        const auto* b = reinterpret_cast<const block_q8_0*>(row) + d / QK8_0;
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + d % QK8_0));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(fp16_to_fp32(b->d)));
    }
}


// ---- gemm: tiles of up to 8 rows x 32 columns (16 accumulators) -----------------------------------

// acc + b * (*a in every lane), the broadcast being the FMA's own memory operand ({1to16}).
// From intrinsics GCC loads A's element once per row into a register (vbroadcastss) for the
// tile's columns. On Zen 4 (512-bit operations in two 256-bit halves) those 8 broadcasts per
// step took issue slots from the 16 FMAs: the tile of generation at 4096 keys, alternated
// builds, 415-466 -> 366-395 us for one layer on one thread (bench_kernels
// attn_tg1_kv4096/f16/k_panels/avx512/t1), while the element is loaded once per column vector,
// which the load ports absorb. CPUs with full-width units (Zen 5 measured, see docs/speed.md)
// issue FMAs twice as fast and load about 2 vectors per cycle, so there the tile's 8 broadcasts
// beat 16 embedded ones: kEmbed is Zen 4's variant only.
template <bool kEmbed>
inline __m512 fmadd_bcast(const float* a, __m512 b, __m512 acc) {
#if defined(__GNUC__)
    if constexpr (kEmbed) {
        asm("vfmadd231ps %[a]%{1to16%}, %[b], %[acc]" : [acc] "+v"(acc) : [b] "v"(b), [a] "m"(*a));
        return acc;
    }
#endif
    return _mm512_fmadd_ps(_mm512_set1_ps(*a), b, acc);
}

// LDA: A's row stride when it is a constant (0: lda_rt). The attention's A operands are Q (stride
// hd) and the score tile (stride bk), 64 or 128 floats in the common shapes; with a constant the 8
// broadcasts of a step address one base register with fixed offsets. With a run-time stride GCC
// kept 8 row pointers, some of them in vector registers moved back for every step (the tile of
// generation at 4096 keys, bench_kernels attn_tg1_kv4096/f16/k_panels/avx512/t1, alternated:
// 498-512 -> 475-486 us on Zen 4).
template <int RB, int CB, Type T, int64_t LDA, bool kEmbed>
void gemm_tile(int64_t K, const float* A, int64_t lda_rt, const uint8_t* B, size_t b_stride, int64_t j0, int64_t b_cols,
               float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    const int64_t lda = LDA ? LDA : lda_rt;
    PrefetchRows prefetch(pf);
    __mmask16 m[CB];
    KILN_UNROLL
    for (int c = 0; c < CB; ++c) m[c] = tail_mask(b_cols - j0 - 16 * c);
    __m512 acc[RB][CB];
    KILN_UNROLL
    for (int r = 0; r < RB; ++r)
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_setzero_ps();
    // Tiles whose columns all lie inside B's rows (all but a short last key block's) load
    // without masks (load16's Full).
    auto steps = [&]<bool kFull>() {
        for (int64_t k = 0; k < K; ++k) {
            prefetch.step();
            const uint8_t* row = B + static_cast<size_t>(k) * b_stride;
            __m512 b[CB];
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) b[c] = load16<T, kFull>(row, j0 + 16 * c, m[c]);
            KILN_UNROLL
            for (int r = 0; r < RB; ++r)
                KILN_UNROLL
                for (int c = 0; c < CB; ++c) acc[r][c] = fmadd_bcast<kEmbed>(&A[r * lda + k], b[c], acc[r][c]);
        }
    };
    if (b_cols - j0 >= 16 * CB) {
        steps.template operator()<true>();
    } else {
        steps.template operator()<false>();
    }
    KILN_UNROLL
    for (int r = 0; r < RB; ++r) {
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) {
            float* out = C + r * ldc + j0 + 16 * c;
            __m512 v = acc[r][c];
            if (beta) v = _mm512_fmadd_ps(_mm512_loadu_ps(out), _mm512_set1_ps(beta[r]), v);
            _mm512_storeu_ps(out, v);
        }
    }
}

using TileFn = void (*)(int64_t, const float*, int64_t, const uint8_t*, size_t, int64_t, int64_t, float*, int64_t,
                        const float*, const AttnPrefetch*);
template <Type T, int RB, int64_t LDA, bool kEmbed>
constexpr TileFn kTilesOfRows[2] = {gemm_tile<RB, 1, T, LDA, kEmbed>, gemm_tile<RB, 2, T, LDA, kEmbed>};
template <Type T, int64_t LDA, bool kEmbed>
constexpr const TileFn* kTiles[8] = {
    kTilesOfRows<T, 1, LDA, kEmbed>, kTilesOfRows<T, 2, LDA, kEmbed>, kTilesOfRows<T, 3, LDA, kEmbed>,
    kTilesOfRows<T, 4, LDA, kEmbed>, kTilesOfRows<T, 5, LDA, kEmbed>, kTilesOfRows<T, 6, LDA, kEmbed>,
    kTilesOfRows<T, 7, LDA, kEmbed>, kTilesOfRows<T, 8, LDA, kEmbed>};

// The first tile issues the prefetches (its loop over K runs while the rest of B is read).
template <Type T, bool kEmbed>
void gemm_t(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const uint8_t* B, size_t b_stride,
            int64_t b_cols, float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    for (int64_t j = 0; j < N; j += 32) {
        const int64_t cb = std::min<int64_t>(2, (N - j) / 16);
        for (int64_t r = 0; r < M; r += 8) {
            const int64_t rb = std::min<int64_t>(8, M - r);
            const TileFn* const* tiles =
                lda == 64 ? kTiles<T, 64, kEmbed> : lda == 128 ? kTiles<T, 128, kEmbed> : kTiles<T, 0, kEmbed>;
            tiles[rb - 1][cb - 1](K, A + r * lda, lda, B, b_stride, j, b_cols, C + r * ldc, ldc, beta ? beta + r : nullptr,
                                  j == 0 && r == 0 ? pf : nullptr);
        }
    }
}

template <bool kEmbed>
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, Type bt, const uint8_t* B, size_t b_stride,
          int64_t b_cols, float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    switch (bt) {
        case Type::F32: return gemm_t<Type::F32, kEmbed>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
        case Type::F16: return gemm_t<Type::F16, kEmbed>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
        case Type::BF16: return gemm_t<Type::BF16, kEmbed>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
        default: return gemm_t<Type::Q8_0, kEmbed>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
    }
}

// ---- BF16 products: tiles of up to 8 rows x 32 columns ------------------------------------------

// vdpbf16ps with A's pair broadcast; on Zen 4 as the instruction's memory operand ({1to16}), the
// same trade as fmadd_bcast.
template <bool kEmbed>
inline __m512 dpbf16_bcast(const uint32_t* a, __m512bh b, __m512 acc) {
#if defined(__GNUC__)
    if constexpr (kEmbed) {
        asm("vdpbf16ps %[a]%{1to16%}, %[b], %[acc]" : [acc] "+v"(acc) : [b] "v"(b), [a] "m"(*a));
        return acc;
    }
#endif
    return _mm512_dpbf16_ps(acc, std::bit_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(*a))), b);
}

template <int RB, int CB, bool kEmbed>
void gemm_bf16_tile(int64_t Kp, const uint32_t* A, int64_t lda, const uint32_t* B, int64_t ldb, int64_t j0, float* C,
                    int64_t ldc, const float* beta) {
    __m512 acc[RB][CB];
    KILN_UNROLL
    for (int r = 0; r < RB; ++r)
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t p = 0; p < Kp; ++p) {
        const uint32_t* row = B + p * ldb + j0;
        __m512bh b[CB];
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) b[c] = std::bit_cast<__m512bh>(_mm512_loadu_si512(row + 16 * c));
        KILN_UNROLL
        for (int r = 0; r < RB; ++r)
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) acc[r][c] = dpbf16_bcast<kEmbed>(&A[r * lda + p], b[c], acc[r][c]);
    }
    KILN_UNROLL
    for (int r = 0; r < RB; ++r) {
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) {
            float* out = C + r * ldc + j0 + 16 * c;
            __m512 v = acc[r][c];
            if (beta) v = _mm512_fmadd_ps(_mm512_loadu_ps(out), _mm512_set1_ps(beta[r]), v);
            _mm512_storeu_ps(out, v);
        }
    }
}

using Bf16TileFn = void (*)(int64_t, const uint32_t*, int64_t, const uint32_t*, int64_t, int64_t, float*, int64_t,
                            const float*);
template <int RB, bool kEmbed>
constexpr Bf16TileFn kBf16TilesOfRows[2] = {gemm_bf16_tile<RB, 1, kEmbed>, gemm_bf16_tile<RB, 2, kEmbed>};
template <bool kEmbed>
constexpr const Bf16TileFn* kBf16Tiles[8] = {kBf16TilesOfRows<1, kEmbed>, kBf16TilesOfRows<2, kEmbed>,
                                              kBf16TilesOfRows<3, kEmbed>, kBf16TilesOfRows<4, kEmbed>,
                                              kBf16TilesOfRows<5, kEmbed>, kBf16TilesOfRows<6, kEmbed>,
                                              kBf16TilesOfRows<7, kEmbed>, kBf16TilesOfRows<8, kEmbed>};

template <bool kEmbed>
void gemm_bf16(int64_t M, int64_t N, int64_t Kp, const uint32_t* A, int64_t lda, const uint32_t* B, int64_t ldb,
               float* C, int64_t ldc, const float* beta) {
    for (int64_t j = 0; j < N; j += 32) {
        const int64_t cb = std::min<int64_t>(2, (N - j) / 16);
        for (int64_t r = 0; r < M; r += 8) {
            const int64_t rb = std::min<int64_t>(8, M - r);
            kBf16Tiles<kEmbed>[rb - 1][cb - 1](Kp, A + r * lda, lda, B, ldb, j, C + r * ldc, ldc,
                                                beta ? beta + r : nullptr);
        }
    }
}

// Rows 2p and 2p + 1 interleaved element by element: vcvtne2ps2bf16 puts row 2p's 16 values in the
// low half and row 2p + 1's in the high one, vpermw pairs them up.
template <Type T>
void bf16_pairs_t(const uint8_t* src, size_t stride, int64_t rows, int64_t cols, uint32_t* dst, int64_t ld) {
    alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                             21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                             11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_load_si512(kInterleave);
    const int64_t cp = attn_pad(cols);
    for (int64_t i = 0; i < rows; i += 2) {
        const uint8_t* r0 = src + static_cast<size_t>(i) * stride;
        const uint8_t* r1 = i + 1 < rows ? r0 + stride : nullptr;
        uint32_t* out = dst + (i / 2) * ld;
        for (int64_t c = 0; c < cp; c += 16) {
            const __mmask16 m = tail_mask(cols - c);
            const __m512 a = load16<T>(r0, c, m);
            const __m512 b = r1 ? load16<T>(r1, c, m) : _mm512_setzero_ps();
            const __m512i lo_hi = std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
            _mm512_storeu_si512(out + c, _mm512_permutexvar_epi16(idx, lo_hi));
        }
    }
}

void bf16_pairs(Type t, const uint8_t* src, size_t stride, int64_t rows, int64_t cols, uint32_t* dst, int64_t ld) {
    switch (t) {
        case Type::F32: return bf16_pairs_t<Type::F32>(src, stride, rows, cols, dst, ld);
        case Type::F16: return bf16_pairs_t<Type::F16>(src, stride, rows, cols, dst, ld);
        case Type::BF16: return bf16_pairs_t<Type::BF16>(src, stride, rows, cols, dst, ld);
        default: return bf16_pairs_t<Type::Q8_0>(src, stride, rows, cols, dst, ld);
    }
}

// ---- conversions --------------------------------------------------------------------------------

// In-register transpose: on return r[j] holds element j of every input vector.
inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4g + c], 128-bit lane L: rows 4g .. 4g+3 of column 4L + c
    __m512 u[16];
    for (int g = 0; g < 4; ++g) {
        u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    // then a 4 x 4 transpose of 128-bit lanes among u[c], u[4+c], u[8+c], u[12+c]
    for (int c = 0; c < 4; ++c) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[4 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

// A full 16 x 16 tile, transposed mostly by loads: the rows are converted to float in tmp, then
// register Z_j of column group g takes lane L from row 4L + j, columns 4g .. 4g+3 (a load and three
// lane inserts, which issue on two ports), so a 4 x 4 transpose inside the 128-bit lanes finishes
// it. transpose16 needs 64 shuffles on the one shuffle port; this needs 32 there plus 48 inserts.
template <Type T>
inline void k_tile16(const uint8_t* src, size_t stride, const int32_t* idx, int64_t i0, int64_t d0, float* dst, int64_t ld) {
    alignas(64) float tmp[16][16];
    for (int i = 0; i < 16; ++i) _mm512_store_ps(tmp[i], load16<T>(attn_row(src, stride, idx, i0 + i), d0, 0xffff));
    for (int g = 0; g < 4; ++g) {
        __m512 z[4];
        for (int j = 0; j < 4; ++j) {
            __m512 v = _mm512_castps128_ps512(_mm_load_ps(&tmp[j][4 * g]));
            v = _mm512_insertf32x4(v, _mm_load_ps(&tmp[4 + j][4 * g]), 1);
            v = _mm512_insertf32x4(v, _mm_load_ps(&tmp[8 + j][4 * g]), 2);
            z[j] = _mm512_insertf32x4(v, _mm_load_ps(&tmp[12 + j][4 * g]), 3);
        }
        const __m512 t0 = _mm512_unpacklo_ps(z[0], z[1]), t1 = _mm512_unpackhi_ps(z[0], z[1]);
        const __m512 t2 = _mm512_unpacklo_ps(z[2], z[3]), t3 = _mm512_unpackhi_ps(z[2], z[3]);
        float* out = dst + (d0 + 4 * g) * ld;
        _mm512_storeu_ps(out, _mm512_shuffle_ps(t0, t2, 0x44));
        _mm512_storeu_ps(out + ld, _mm512_shuffle_ps(t0, t2, 0xEE));
        _mm512_storeu_ps(out + 2 * ld, _mm512_shuffle_ps(t1, t3, 0x44));
        _mm512_storeu_ps(out + 3 * ld, _mm512_shuffle_ps(t1, t3, 0xEE));
    }
}

template <Type T>
void k_transpose_t(const uint8_t* src, size_t stride, const int32_t* idx, int64_t n, int64_t hd, float* dst, int64_t ld) {
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
        const int64_t ni = std::min<int64_t>(16, n - i0);
        for (int64_t d0 = 0; d0 < hd; d0 += 16) {
            const int64_t nd = std::min<int64_t>(16, hd - d0);
            if (ni == 16 && nd == 16) {
                k_tile16<T>(src, stride, idx, i0, d0, dst + i0, ld);
                continue;
            }
            __m512 r[16];  // edge tile: rows past n are zeros, the all-shuffle transpose
            for (int64_t i = 0; i < 16; ++i) {
                r[i] = i < ni ? load16<T>(attn_row(src, stride, idx, i0 + i), d0, tail_mask(nd)) : _mm512_setzero_ps();
            }
            transpose16(r);
            for (int64_t j = 0; j < nd; ++j) _mm512_storeu_ps(dst + (d0 + j) * ld + i0, r[j]);
        }
    }
}

void k_transpose(Type t, const uint8_t* src, size_t stride, const int32_t* idx, int64_t n, int64_t hd, float* dst,
                 int64_t ld) {
    switch (t) {
        case Type::F32: return k_transpose_t<Type::F32>(src, stride, idx, n, hd, dst, ld);
        case Type::F16: return k_transpose_t<Type::F16>(src, stride, idx, n, hd, dst, ld);
        case Type::BF16: return k_transpose_t<Type::BF16>(src, stride, idx, n, hd, dst, ld);
        default: return k_transpose_t<Type::Q8_0>(src, stride, idx, n, hd, dst, ld);
    }
}

template <Type T>
void v_rows_t(const uint8_t* src, size_t stride, int64_t n, int64_t hdv, float* dst, int64_t ld) {
    const int64_t cp = attn_pad(hdv);
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* row = src + static_cast<size_t>(i) * stride;
        for (int64_t c = 0; c < cp; c += 16) _mm512_storeu_ps(dst + i * ld + c, load16<T>(row, c, tail_mask(hdv - c)));
    }
}

void v_rows(Type t, const uint8_t* src, size_t stride, int64_t n, int64_t hdv, float* dst, int64_t ld) {
    switch (t) {
        case Type::F32: return v_rows_t<Type::F32>(src, stride, n, hdv, dst, ld);
        case Type::F16: return v_rows_t<Type::F16>(src, stride, n, hdv, dst, ld);
        case Type::BF16: return v_rows_t<Type::BF16>(src, stride, n, hdv, dst, ld);
        default: return v_rows_t<Type::Q8_0>(src, stride, n, hdv, dst, ld);
    }
}

// ---- softmax rows -------------------------------------------------------------------------------

float score_row(float* s, const float* mask, int64_t n, float softcap) {
    __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512 cap = _mm512_set1_ps(softcap);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = tail_mask(n - j);
        __m512 x = _mm512_maskz_loadu_ps(m, s + j);
        if (softcap > 0) x = _mm512_mul_ps(cap, tanh16(_mm512_div_ps(x, cap)));
        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, mask + j));
        _mm512_mask_storeu_ps(s + j, m, x);
        mx = _mm512_mask_max_ps(mx, m, mx, x);
    }
    return _mm512_reduce_max_ps(mx);
}

float exp_row(float* s, int64_t n, float m) {
    __m512 sum = _mm512_setzero_ps();
    const __m512 vm = _mm512_set1_ps(m);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = tail_mask(n - j);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm));
        _mm512_mask_storeu_ps(s + j, k, e);
        sum = _mm512_mask_add_ps(sum, k, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

// exp to about 3e-5 relative, enough for P rounded to BF16 (2^-9) next: ln 2 in one part and
// 1 + r + r^2 / 2 + r^3 / 6 + r^4 / 24 (|r| <= ln2 / 2). About half exp16's work, which the
// products' doubled rate in BF16 would otherwise leave as a fifth of the prompt attention's time.
inline __m512 exp16_coarse(__m512 x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_GE_OQ);  // below (and -inf): 0
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.69314718056f), x);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 24), r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
}

// p[j] = exp(s[j] - m) as 16-bit floats for j < n (kBf16: BF16, and an odd n's pair partner p[n]
// written too, as the zero it is; else fp16); returns the sum of the unrounded values. The coarse
// exp's 3e-5 lies well below either format's rounding (2^-9, 2^-11).
template <bool kBf16>
float exp_row_half(const float* s, int64_t n, float m, uint16_t* p, const uint8_t* pf) {
    const __m512 vm = _mm512_set1_ps(m);
    // 16 values from j: their exp as 16-bit floats at p + j (lanes k; `out` for the store), the
    // unrounded values returned for the sum.
    auto one = [&](int64_t j, __mmask16 k, __mmask16 out) {
        if (pf) prefetch_l2(pf + 4 * j);  // a line per 16 values
        const __m512 e = _mm512_maskz_mov_ps(k, exp16_coarse(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm)));
        if constexpr (kBf16) {
            _mm256_mask_storeu_epi16(p + j, out, std::bit_cast<__m256i>(_mm512_cvtneps_pbh(e)));
        } else {  // vcvtps2ph needs only AVX-512F
            _mm256_mask_storeu_epi16(p + j, out, _mm512_cvtps_ph(e, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        return e;
    };
    // Whole vectors two at a time into two sums (the rows are a key block, 256 in generation):
    // one sum's 4-cycle adds chained every vector, and the masks cost vector uops on Intel.
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    const __mmask16 all = 0xFFFF;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        sum0 = _mm512_add_ps(sum0, one(j, all, all));
        sum1 = _mm512_add_ps(sum1, one(j + 16, all, all));
    }
    for (; j < n; j += 16) {
        const __mmask16 k = tail_mask(n - j);
        // BF16: an odd n's pair partner p[n] written too, as the zero it is.
        sum0 = _mm512_add_ps(sum0, one(j, k, kBf16 && n - j < 16 ? tail_mask(n - j + 1) : k));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

// ---- FP16 products (AVX512-FP16): tiles of up to 8 rows x 64 columns ----------------------------

#if KILN_HAVE_FP16_TARGET
#define KILN_FP16 __attribute__((target("avx512fp16")))

// Lanes 0 .. rem - 1 of 32 (rem may be <= 0 or >= 32).
inline __mmask32 tail_mask32(int64_t rem) {
    if (rem <= 0) return 0;
    return rem >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << rem) - 1u);
}

// acc + b * (*a in every lane), the fp16 element broadcast as the FMA's memory operand ({1to32}):
// a separate vpbroadcastw from memory would cost Intel a shuffle uop besides the load.
KILN_FP16 inline __m512h fmadd_ph_bcast(const uint16_t* a, __m512h b, __m512h acc) {
    asm("vfmadd231ph %[a]%{1to32%}, %[b], %[acc]" : [acc] "+v"(acc) : [b] "v"(b), [a] "m"(*a));
    return acc;
}

// Columns j .. j + 32 of an fp16 row; zeros where m is clear unless kFull (no mask: every lane
// inside the row).
template <bool kFull>
KILN_FP16 inline __m512h load32h(const uint8_t* row, int64_t j, __mmask32 m) {
    const auto* p = reinterpret_cast<const uint16_t*>(row) + j;
    return _mm512_castsi512_ph(kFull ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(m, p));
}

// One run's float sums (16 columns) into C: the first run of the tile adds them to C * beta (or
// 0), later runs to C.
inline void add_run(float* out, __m512 sums, __m512 scale, bool first, const float* beta) {
    const __m512 prev = !first ? _mm512_loadu_ps(out)
                        : beta ? _mm512_mul_ps(_mm512_loadu_ps(out), _mm512_set1_ps(*beta))
                               : _mm512_setzero_ps();
    _mm512_storeu_ps(out, _mm512_fmadd_ps(sums, scale, prev));
}

// The run k0 .. k1 of a tile summed in float from the same fp16 operands (its fp16 sums overflowed:
// large values, rare) and added to C as add_run does.
template <int RB, int CB>
[[gnu::noinline, gnu::cold]] void run_in_float(int64_t k0, int64_t k1, const uint16_t* A, int64_t lda, const uint8_t* B,
                                               size_t b_stride, int64_t j0, const __mmask32* m, int64_t n_cols, float* C,
                                               int64_t ldc, const float* beta, const float* a_scale) {
    for (int r = 0; r < RB; ++r) {
        for (int64_t h = 0; h < 2 * CB && 16 * h < n_cols; ++h) {
            const auto lanes = static_cast<__mmask16>(m[h / 2] >> (16 * (h % 2)));
            __m512 sum = _mm512_setzero_ps();
            for (int64_t k = k0; k < k1; ++k) {
                const auto* row = reinterpret_cast<const uint16_t*>(B + static_cast<size_t>(k) * b_stride) + j0 + 16 * h;
                const __m512 b = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes, row));
                sum = _mm512_fmadd_ps(_mm512_set1_ps(fp16_to_fp32(A[r * lda + k])), b, sum);
            }
            add_run(C + r * ldc + j0 + 16 * h, sum, _mm512_set1_ps(a_scale ? a_scale[r] : 1.0f), k0 == 0,
                    beta ? beta + r : nullptr);
        }
    }
}

// RB rows x CB * 32 columns from j0, of which n_cols (16 .. 32 CB) are written. Each run of
// kAttnF16Run steps sums in fp16 registers (16 of them for 8 x 64), then goes to C in float.
// LDA: A's row stride when it is a constant (0: lda_rt), as in gemm_tile: Q's (hd) and P's (bk).
template <int RB, int CB, bool kFull, int64_t LDA>
KILN_FP16 void gemm_f16_tile(int64_t K, const uint16_t* A, int64_t lda_rt, const uint8_t* B, size_t b_stride, int64_t j0,
                             int64_t b_cols, int64_t n_cols, float* C, int64_t ldc, const float* beta, const float* a_scale,
                             const AttnPrefetch* pf) {
    const int64_t lda = LDA ? LDA : lda_rt;
    PrefetchRows prefetch(pf);
    __mmask32 m[CB];
    KILN_UNROLL
    for (int c = 0; c < CB; ++c) m[c] = kFull ? ~__mmask32{0} : tail_mask32(b_cols - j0 - 32 * c);
    for (int64_t k0 = 0; k0 < K; k0 += kAttnF16Run) {
        const int64_t k1 = std::min(K, k0 + kAttnF16Run);
        __m512h acc[RB][CB];
        KILN_UNROLL
        for (int r = 0; r < RB; ++r)
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_setzero_ph();
        for (int64_t k = k0; k < k1; ++k) {
            prefetch.step();
            const uint8_t* row = B + static_cast<size_t>(k) * b_stride;
            __m512h b[CB];
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) b[c] = load32h<kFull>(row, j0 + 32 * c, m[c]);
            KILN_UNROLL
            for (int r = 0; r < RB; ++r)
                KILN_UNROLL
                for (int c = 0; c < CB; ++c) acc[r][c] = fmadd_ph_bcast(A + r * lda + k, b[c], acc[r][c]);
            // B's vectors kept alive to the step's end: GCC 12 otherwise reuses the first one's
            // register for the last accumulator, with a copy in and out of it every step (2 vector
            // uops per 16 FMAs).
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) asm("" : : "v"(b[c]));
        }
        // An infinity or NaN in a run (sums past 65504; the F32 path would have stayed finite)
        // sends the run to float.
        __mmask32 bad = 0;
        KILN_UNROLL
        for (int r = 0; r < RB; ++r)
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) bad |= _mm512_fpclass_ph_mask(acc[r][c], 0x99);  // NaN or +-inf
        if (bad) {
            run_in_float<RB, CB>(k0, k1, A, lda, B, b_stride, j0, m, n_cols, C, ldc, beta, a_scale);
            continue;
        }
        KILN_UNROLL
        for (int r = 0; r < RB; ++r) {
            const __m512 scale = _mm512_set1_ps(a_scale ? a_scale[r] : 1.0f);
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) {
                const __m512i h = _mm512_castph_si512(acc[r][c]);
                float* out = C + r * ldc + j0 + 32 * c;
                add_run(out, _mm512_cvtph_ps(_mm512_castsi512_si256(h)), scale, k0 == 0, beta ? beta + r : nullptr);
                if (32 * c + 16 < n_cols) {
                    add_run(out + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), scale, k0 == 0,
                            beta ? beta + r : nullptr);
                }
            }
        }
    }
}

using F16TileFn = void (*)(int64_t, const uint16_t*, int64_t, const uint8_t*, size_t, int64_t, int64_t, int64_t, float*,
                           int64_t, const float*, const float*, const AttnPrefetch*);
template <int RB, bool kFull, int64_t LDA>
constexpr F16TileFn kF16TilesOfRows[2] = {gemm_f16_tile<RB, 1, kFull, LDA>, gemm_f16_tile<RB, 2, kFull, LDA>};
template <bool kFull, int64_t LDA>
constexpr const F16TileFn* kF16Tiles[8] = {
    kF16TilesOfRows<1, kFull, LDA>, kF16TilesOfRows<2, kFull, LDA>, kF16TilesOfRows<3, kFull, LDA>,
    kF16TilesOfRows<4, kFull, LDA>, kF16TilesOfRows<5, kFull, LDA>, kF16TilesOfRows<6, kFull, LDA>,
    kF16TilesOfRows<7, kFull, LDA>, kF16TilesOfRows<8, kFull, LDA>};
template <bool kFull>
const F16TileFn* const* f16_tiles(int64_t lda) {
    return lda == 64 ? kF16Tiles<kFull, 64> : lda == 128 ? kF16Tiles<kFull, 128> : lda == 256 ? kF16Tiles<kFull, 256>
                                                                                               : kF16Tiles<kFull, 0>;
}

// The first tile issues the prefetches (its loop over K runs while the rest of B is read).
void gemm_f16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint8_t* B, size_t b_stride,
              int64_t b_cols, float* C, int64_t ldc, const float* beta, const float* a_scale, const AttnPrefetch* pf) {
    for (int64_t j = 0; j < N; j += 64) {
        const int64_t n = std::min<int64_t>(64, N - j), cb = n > 32 ? 2 : 1;
        const F16TileFn* const* tiles = b_cols - j >= 32 * cb ? f16_tiles<true>(lda) : f16_tiles<false>(lda);
        for (int64_t r = 0; r < M; r += 8) {
            const int64_t rb = std::min<int64_t>(8, M - r);
            tiles[rb - 1][cb - 1](K, A + r * lda, lda, B, b_stride, j, b_cols, n, C + r * ldc, ldc, beta ? beta + r : nullptr,
                                  a_scale ? a_scale + r : nullptr, j == 0 && r == 0 ? pf : nullptr);
        }
    }
}
#endif  // KILN_HAVE_FP16_TARGET

// 16 mask values per compare; the first and last visible from the lowest and highest set bit.
MaskSpan mask_span(const float* mask, int64_t lo, int64_t hi) {
    MaskSpan r{.first = hi, .last = hi, .count = 0};
    const __m512 hidden = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = lo; j < hi; j += 16) {
        const __mmask16 valid = tail_mask(hi - j);
        const __m512 m = _mm512_maskz_loadu_ps(valid, mask + j);
        const auto seen = static_cast<uint16_t>(_mm512_mask_cmp_ps_mask(valid, m, hidden, _CMP_NEQ_UQ));
        if (seen == 0) continue;
        if (r.count == 0) r.first = j + std::countr_zero(seen);
        r.count += std::popcount(seen);
        r.last = j + 16 - std::countl_zero(seen);
    }
    return r;
}

// The indices compressed in a register and stored whole (idx has room for 16 past the count):
// Zen 4 runs vpcompressd with a memory destination as a slow microcoded sequence.
int64_t mask_visible(const float* mask, int64_t lo, int64_t hi, int32_t* idx) {
    const __m512 hidden = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i cells = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(lo)),
                                     _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    int64_t n = 0;
    for (int64_t j = lo; j < hi; j += 16, cells = _mm512_add_epi32(cells, sixteen)) {
        const __mmask16 valid = tail_mask(hi - j);
        const __m512 m = _mm512_maskz_loadu_ps(valid, mask + j);
        const __mmask16 seen = _mm512_mask_cmp_ps_mask(valid, m, hidden, _CMP_NEQ_UQ);
        if (seen == 0) continue;
        _mm512_storeu_si512(idx + n, _mm512_maskz_compress_epi32(seen, cells));
        n += std::popcount(static_cast<uint16_t>(seen));
    }
    return n;
}

}  // namespace

namespace detail {
const AttnKernels& attn_avx512() {
    // BF16 products where vdpbf16ps issues at the FMA rate or faster: AVX512_BF16 without
    // AVX512-FP16 (Zen 4 and 5). The Xeons with AVX512-FP16 issue it at a quarter of their FMA rate.
    const bool bf16 = float_gemm::fast_path(Type::BF16) == float_gemm::FastPath::Bf16;
    const bool zen4 = cpu_features().zen4;
    // FP16 products where the CPU has AVX512-FP16 (fast_path checks it) and the compiler can target it.
    const bool f16 = KILN_HAVE_FP16_TARGET && float_gemm::fast_path(Type::F16) == float_gemm::FastPath::Half;
    static const AttnKernels k{.gemm = zen4 ? gemm<true> : gemm<false>,
                               .k_transpose = k_transpose,
                               .v_rows = v_rows,
                               .score_row = score_row,
                               .exp_row = exp_row,
                               .mask_span = mask_span,
                               .mask_visible = mask_visible,
                               .gemm_bf16 = !bf16 ? nullptr : zen4 ? gemm_bf16<true> : gemm_bf16<false>,
                               .bf16_pairs = bf16 ? bf16_pairs : nullptr,
                               .exp_row_bf16 = bf16 ? exp_row_half<true> : nullptr,
#if KILN_HAVE_FP16_TARGET
                               .gemm_f16 = f16 ? gemm_f16 : nullptr,
#endif
                               .exp_row_f16 = f16 ? exp_row_half<false> : nullptr};
    return k;
}
}  // namespace detail

}  // namespace kiln::cpu
