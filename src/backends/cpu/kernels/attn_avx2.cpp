// AVX2 + FMA + F16C attention kernels; see attn_kernels.h for the algorithm
// and attn_avx512.cpp for the design (this is the same with 8 lanes: gemm
// tiles of up to 6 rows x 16 columns or 4 rows x 24, 8 x 8 transposes, the
// same exp, exp_avx2.h).
// Only called once isa_supported(Isa::Avx2) holds.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/exp_avx2.h"

// Register tiles are arrays of vectors indexed by constants once unrolled; GCC otherwise keeps a
// copy of the accumulators on the stack and stores it on every iteration.
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_UNROLL _Pragma("GCC unroll 16")
#else
#define KILN_UNROLL
#endif

namespace kiln::cpu {

namespace {

// e^x, and 0 below the normal range (exp(-inf) = 0: masked scores).
inline __m256 exp8(__m256 x) {
    const __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_GE_OQ);  // all-ones where kept
    return _mm256_and_ps(exp8_clamped(x), zero);
}

inline __m256 tanh8(__m256 x) {
    const __m256 e = exp8(_mm256_add_ps(x, x));
    return _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
}

inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

// ---- row loads -----------------------------------------------------------------------------------

// Elements d .. d + min(rem, 8) of a row as floats, zeros beyond rem.
template <Type T, bool Full = false>
inline __m256 load8(const uint8_t* row, int64_t d, int64_t rem) {
    if (!Full && rem < 8) {  // short tail (odd head sizes of the float types, padding)
        alignas(32) float tmp[8] = {};
        for (int64_t i = 0; i < rem; ++i) tmp[i] = attn_elem(T, row, d + i);
        return _mm256_load_ps(tmp);
    }
    if constexpr (T == Type::F32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
    } else if constexpr (T == Type::F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + d)));
    } else if constexpr (T == Type::BF16) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + d));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {  // Q8_0: d is a multiple of 8 inside one block
        const auto* b = reinterpret_cast<const block_q8_0*>(row) + d / QK8_0;
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + d % QK8_0));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(fp16_to_fp32(b->d)));
    }
}


// ---- gemm: tiles of RB rows x 8 CB columns (N is a multiple of 16) -------------------------

// Full: all 8 CB columns of the tile are inside b_cols (no tail handling in the loop).
template <int RB, int CB, Type T, bool Full>
void gemm_tile(int64_t K, const float* A, int64_t lda, const uint8_t* B, size_t b_stride, int64_t j0, int64_t b_cols,
               float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    PrefetchRows prefetch(pf);
    __m256 acc[RB][CB];
    KILN_UNROLL
    for (int r = 0; r < RB; ++r) {
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < K; ++k) {
        prefetch.step();
        const uint8_t* row = B + static_cast<size_t>(k) * b_stride;
        __m256 b[CB];
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) b[c] = load8<T, Full>(row, j0 + 8 * c, b_cols - j0 - 8 * c);
        KILN_UNROLL
        for (int r = 0; r < RB; ++r) {
            const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
            KILN_UNROLL
            for (int c = 0; c < CB; ++c) acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
    KILN_UNROLL
    for (int r = 0; r < RB; ++r) {
        KILN_UNROLL
        for (int c = 0; c < CB; ++c) {
            float* out = C + r * ldc + j0 + 8 * c;
            __m256 v = acc[r][c];
            if (beta) v = _mm256_fmadd_ps(_mm256_loadu_ps(out), _mm256_set1_ps(beta[r]), v);
            _mm256_storeu_ps(out, v);
        }
    }
}

using TileFn = void (*)(int64_t, const float*, int64_t, const uint8_t*, size_t, int64_t, int64_t, float*, int64_t,
                        const float*, const AttnPrefetch*);
template <Type T, bool Full>
constexpr TileFn kTiles[6] = {gemm_tile<1, 2, T, Full>, gemm_tile<2, 2, T, Full>, gemm_tile<3, 2, T, Full>,
                              gemm_tile<4, 2, T, Full>, gemm_tile<5, 2, T, Full>, gemm_tile<6, 2, T, Full>};

template <Type T>
void gemm_t(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const uint8_t* B, size_t b_stride,
            int64_t b_cols, float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    // Row tiles of even height: generation's 8 query rows of a KV head as 4 + 4, not 6 + 2, whose
    // 2-row tile has 4 FMA chains, too few to cover the FMA latency (it took a third of the time for
    // a quarter of the products). bench_kernels attn_tg1_kv4096/f16/k_panels/avx2/t1, Zen 3:
    // 687-690 -> 623-631 us.
    const int64_t n_row_tiles = (M + 5) / 6, row_step = (M + n_row_tiles - 1) / n_row_tiles;
    // Tiles of 4 rows take 24 columns where they fit (12 FMA chains, as a 6-row tile has, where 16
    // columns gave 8, just the FMAs' latency times their ports on Zen 3): N = 64 (the K panels, a
    // 64-wide V) as 24 + 24 + 16. A remainder of 32 goes as 16 + 16 (N is a multiple of 16).
    // bench_kernels attn_tg1_kv4096/f16/k_panels/avx2/t1, Zen 3, 5 alternated runs: 574-617 ->
    // 534-606 us.
    const bool wide = row_step == 4 && M % 4 == 0;  // (M = 7 would end on a 3-row tile)
    // The first tile issues the prefetches.
    for (int64_t j = 0; j < N;) {
        const int64_t left = N - j, w = wide && left >= 24 && left != 32 ? 24 : 16;
        const bool full = b_cols >= j + w;
        const TileFn* tiles = full ? kTiles<T, true> : kTiles<T, false>;
        const TileFn wide_tile = full ? gemm_tile<4, 3, T, true> : gemm_tile<4, 3, T, false>;
        for (int64_t r = 0; r < M; r += row_step) {
            const int64_t rb = std::min<int64_t>(row_step, M - r);
            (w == 24 ? wide_tile : tiles[rb - 1])(K, A + r * lda, lda, B, b_stride, j, b_cols, C + r * ldc, ldc,
                                                   beta ? beta + r : nullptr, j == 0 && r == 0 ? pf : nullptr);
        }
        j += w;
    }
}

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, Type bt, const uint8_t* B, size_t b_stride,
          int64_t b_cols, float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    switch (bt) {
        case Type::F32: return gemm_t<Type::F32>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
        case Type::F16: return gemm_t<Type::F16>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
        case Type::BF16: return gemm_t<Type::BF16>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
        default: return gemm_t<Type::Q8_0>(M, N, K, A, lda, B, b_stride, b_cols, C, ldc, beta, pf);
    }
}

// ---- conversions --------------------------------------------------------------------------------

// In-register transpose: on return r[j] holds element j of every input vector.
inline void transpose8(__m256 r[8]) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    // u[4g + c], 128-bit lane L: rows 4g .. 4g+3 of column 4L + c
    __m256 u[8];
    for (int g = 0; g < 2; ++g) {
        u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
    for (int c = 0; c < 4; ++c) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

template <Type T>
void k_transpose_t(const uint8_t* src, size_t stride, const int32_t* idx, int64_t n, int64_t hd, float* dst, int64_t ld) {
    const int64_t np = attn_pad(n);
    for (int64_t i0 = 0; i0 < np; i0 += 8) {
        const int64_t ni = std::clamp<int64_t>(n - i0, 0, 8);
        for (int64_t d0 = 0; d0 < hd; d0 += 8) {
            const int64_t nd = std::min<int64_t>(8, hd - d0);
            __m256 r[8];
            for (int64_t i = 0; i < 8; ++i) {
                r[i] = i < ni ? load8<T>(attn_row(src, stride, idx, i0 + i), d0, nd) : _mm256_setzero_ps();
            }
            transpose8(r);
            for (int64_t j = 0; j < nd; ++j) _mm256_storeu_ps(dst + (d0 + j) * ld + i0, r[j]);
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
        for (int64_t c = 0; c < cp; c += 8) {
            _mm256_storeu_ps(dst + i * ld + c, c < hdv ? load8<T>(row, c, hdv - c) : _mm256_setzero_ps());
        }
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

// ---- softmax rows (vector body, scalar tail) ----------------------------------------------------

float score_row(float* s, const float* mask, int64_t n, float softcap) {
    __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    const __m256 cap = _mm256_set1_ps(softcap);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 x = _mm256_loadu_ps(s + j);
        if (softcap > 0) x = _mm256_mul_ps(cap, tanh8(_mm256_div_ps(x, cap)));
        x = _mm256_add_ps(x, _mm256_loadu_ps(mask + j));
        _mm256_storeu_ps(s + j, x);
        mx = _mm256_max_ps(mx, x);
    }
    float m = hmax8(mx);
    for (; j < n; ++j) {
        float x = s[j];
        if (softcap > 0) x = softcap * std::tanh(x / softcap);
        s[j] = x + mask[j];
        m = std::max(m, s[j]);
    }
    return m;
}

float exp_row(float* s, int64_t n, float m) {
    __m256 sum = _mm256_setzero_ps();
    const __m256 vm = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = hsum8(sum);
    for (; j < n; ++j) total += (s[j] = std::exp(s[j] - m));
    return total;
}

// mask_span_scalar with an 8-float body: the scalar scan was 2.5% of generation's attention at
// depth 4096 (bench_kernels attn_tg1_kv4096, Zen 3).
MaskSpan mask_span(const float* mask, int64_t lo, int64_t hi) {
    MaskSpan r{.first = hi, .last = hi, .count = 0};
    const __m256 hidden = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t j = lo;
    for (; j + 8 <= hi; j += 8) {
        const auto seen = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(mask + j), hidden, _CMP_NEQ_UQ)));
        if (seen == 0) continue;
        if (r.count == 0) r.first = j + std::countr_zero(seen);
        r.count += std::popcount(seen);
        r.last = j + 32 - std::countl_zero(seen);
    }
    if (j < hi) {
        const MaskSpan tail = mask_span_scalar(mask, j, hi);
        if (tail.count > 0) {
            if (r.count == 0) r.first = tail.first;
            r.count += tail.count;
            r.last = tail.last;
        }
    }
    return r;
}

}  // namespace

namespace detail {
const AttnKernels& attn_avx2() {
    static const AttnKernels k{.gemm = gemm,
                               .k_transpose = k_transpose,
                               .v_rows = v_rows,
                               .score_row = score_row,
                               .exp_row = exp_row,
                               .mask_span = mask_span};
    return k;
}
}  // namespace detail

}  // namespace kiln::cpu
