// NEON (AArch64) attention kernels; see attn_kernels.h for the algorithm and
// attn_avx512.cpp for the design. Same structure with 4 lanes: gemm tiles of
// up to 4 rows x 16 columns, the same exp. K is transposed through a small
// float buffer (rows converted with NEON, then written out column by column):
// simple rather than fast, the gemm dominates for prompt processing.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/attn_kernels.h"

namespace kiln::cpu {

namespace {

inline float32x4_t exp4(float32x4_t x) {
    const uint32x4_t keep = vcgeq_f32(x, vdupq_n_f32(-87.33654f));  // false for -inf and NaN
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.33654f)), vdupq_n_f32(88.3762626647949f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    const float32x4_t y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    // 2^n in the exponent field; n is in [-126, 128] after the clamp (128 gives inf).
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t v = vmulq_f32(y, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), keep));
}

inline float32x4_t tanh4(float32x4_t x) {
    const float32x4_t e = exp4(vaddq_f32(x, x));
    return vsubq_f32(vdupq_n_f32(1.0f), vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, vdupq_n_f32(1.0f))));
}

// Elements d .. d + 16 of a row as four vectors, zeros from rem on.
struct Floats16 {
    float32x4_t v[4];
};

template <Type T>
inline Floats16 load16(const uint8_t* row, int64_t d, int64_t rem) {
    Floats16 out;
    if (rem < 16) {  // tail (odd head sizes of the float types, padding)
        alignas(16) float tmp[16] = {};
        for (int64_t i = 0; i < rem; ++i) tmp[i] = attn_elem(T, row, d + i);
        for (int q = 0; q < 4; ++q) out.v[q] = vld1q_f32(tmp + 4 * q);
        return out;
    }
    if constexpr (T == Type::F32) {
        const float* p = reinterpret_cast<const float*>(row) + d;
        for (int q = 0; q < 4; ++q) out.v[q] = vld1q_f32(p + 4 * q);
    } else if constexpr (T == Type::F16) {
        const auto* p = reinterpret_cast<const float16_t*>(row) + d;
        for (int q = 0; q < 4; ++q) out.v[q] = vcvt_f32_f16(vld1_f16(p + 4 * q));
    } else if constexpr (T == Type::BF16) {
        const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + d;
        for (int q = 0; q < 4; ++q) out.v[q] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p + 4 * q), 16));
    } else {  // Q8_0: d is a multiple of 16 inside one block
        const auto* b = reinterpret_cast<const block_q8_0*>(row) + d / QK8_0;
        const int8x16_t q8 = vld1q_s8(b->qs + d % QK8_0);
        const int16x8_t lo = vmovl_s8(vget_low_s8(q8)), hi = vmovl_s8(vget_high_s8(q8));
        const float32x4_t s = vdupq_n_f32(fp16_to_fp32(b->d));
        out.v[0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s);
        out.v[1] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), s);
        out.v[2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s);
        out.v[3] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), s);
    }
    return out;
}

// ---- gemm: tiles of RB rows x 16 columns (N is a multiple of 16) -----------------------------

template <int RB, Type T>
void gemm_tile(int64_t K, const float* A, int64_t lda, const uint8_t* B, size_t b_stride, int64_t j0, int64_t b_cols,
               float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    PrefetchRows prefetch(pf);
    float32x4_t acc[RB][4];
    for (int r = 0; r < RB; ++r)
        for (int q = 0; q < 4; ++q) acc[r][q] = vdupq_n_f32(0.0f);
    for (int64_t k = 0; k < K; ++k) {
        prefetch.step();
        const Floats16 b = load16<T>(B + static_cast<size_t>(k) * b_stride, j0, b_cols - j0);
        for (int r = 0; r < RB; ++r) {
            const float a = A[r * lda + k];
            for (int q = 0; q < 4; ++q) acc[r][q] = vfmaq_n_f32(acc[r][q], b.v[q], a);
        }
    }
    for (int r = 0; r < RB; ++r) {
        for (int q = 0; q < 4; ++q) {
            float* out = C + r * ldc + j0 + 4 * q;
            float32x4_t v = acc[r][q];
            if (beta) v = vfmaq_n_f32(v, vld1q_f32(out), beta[r]);
            vst1q_f32(out, v);
        }
    }
}

using TileFn = void (*)(int64_t, const float*, int64_t, const uint8_t*, size_t, int64_t, int64_t, float*, int64_t,
                        const float*, const AttnPrefetch*);
template <Type T>
constexpr TileFn kTiles[4] = {gemm_tile<1, T>, gemm_tile<2, T>, gemm_tile<3, T>, gemm_tile<4, T>};

template <Type T>
void gemm_t(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const uint8_t* B, size_t b_stride,
            int64_t b_cols, float* C, int64_t ldc, const float* beta, const AttnPrefetch* pf) {
    // The first tile issues the prefetches.
    for (int64_t j = 0; j < N; j += 16) {
        for (int64_t r = 0; r < M; r += 4) {
            const int64_t rb = std::min<int64_t>(4, M - r);
            kTiles<T>[rb - 1](K, A + r * lda, lda, B, b_stride, j, b_cols, C + r * ldc, ldc, beta ? beta + r : nullptr,
                              j == 0 && r == 0 ? pf : nullptr);
        }
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

template <Type T>
void k_transpose_t(const uint8_t* src, size_t stride, const int32_t* idx, int64_t n, int64_t hd, float* dst, int64_t ld) {
    alignas(16) float row[16];
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
        const int64_t nd = std::min<int64_t>(16, hd - d0);
        for (int64_t i = 0; i < n; ++i) {
            const Floats16 v = load16<T>(attn_row(src, stride, idx, i), d0, nd);
            for (int q = 0; q < 4; ++q) vst1q_f32(row + 4 * q, v.v[q]);
            for (int64_t j = 0; j < nd; ++j) dst[(d0 + j) * ld + i] = row[j];
        }
    }
    for (int64_t d = 0; d < hd; ++d) std::fill(dst + d * ld + n, dst + d * ld + attn_pad(n), 0.0f);
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
        for (int64_t c = 0; c < cp; c += 16) {
            const Floats16 v = load16<T>(row, c, hdv - c);
            for (int q = 0; q < 4; ++q) vst1q_f32(dst + i * ld + c + 4 * q, v.v[q]);
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
    float32x4_t mx = vdupq_n_f32(-std::numeric_limits<float>::infinity());
    const float32x4_t cap = vdupq_n_f32(softcap);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        float32x4_t x = vld1q_f32(s + j);
        if (softcap > 0) x = vmulq_f32(cap, tanh4(vdivq_f32(x, cap)));
        x = vaddq_f32(x, vld1q_f32(mask + j));
        vst1q_f32(s + j, x);
        mx = vmaxq_f32(mx, x);
    }
    float m = vmaxvq_f32(mx);
    for (; j < n; ++j) {
        float x = s[j];
        if (softcap > 0) x = softcap * std::tanh(x / softcap);
        s[j] = x + mask[j];
        m = std::max(m, s[j]);
    }
    return m;
}

float exp_row(float* s, int64_t n, float m) {
    float32x4_t sum = vdupq_n_f32(0.0f);
    const float32x4_t vm = vdupq_n_f32(m);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + j), vm));
        vst1q_f32(s + j, e);
        sum = vaddq_f32(sum, e);
    }
    float total = vaddvq_f32(sum);
    for (; j < n; ++j) total += (s[j] = std::exp(s[j] - m));
    return total;
}

}  // namespace

namespace detail {
const AttnKernels& attn_neon() {
    static const AttnKernels k{
        .gemm = gemm, .k_transpose = k_transpose, .v_rows = v_rows, .score_row = score_row, .exp_row = exp_row};
    return k;
}
}  // namespace detail

}  // namespace kiln::cpu
