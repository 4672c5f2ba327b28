// Scalar reference dot-product kernels: the ground truth the SIMD sets are
// tested against, and the fallback for every type a SIMD set does not
// accelerate. They are written for clarity first: integer dot products per
// (sub-)block, scaled by the block scales and accumulated in float, in the
// same association as the SIMD kernels use, so results agree to rounding.
//
// Weight types and their activation (vec_dot_type) formats:
//   F32 x F32, F16 x F16, BF16 x BF16
//   Q4_0, Q5_0, Q8_0, IQ4_NL x Q8_0
//   Q4_1, Q5_1 x Q8_1 (the offset term uses Q8_1's precomputed s = d * sum(q))
//   Q2_K .. Q6_K x Q8_K (the min / offset terms use Q8_K's bsums)

#include <cstring>

#include "backends/cpu/kernels/kernels.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"
#include "core/quant_ref.h"

namespace kiln::cpu::detail {

const TypeKernels* scalar_kernels(Type t);

namespace {

// ---------------------------------------------------------------------------
// Activation converters (thin adapters over the reference quantizers).

void from_float_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); }
void from_float_f16(const float* x, void* y, int64_t n) { ref::quantize_row_f16(x, static_cast<fp16_t*>(y), n, nullptr); }
void from_float_bf16(const float* x, void* y, int64_t n) { ref::quantize_row_bf16(x, static_cast<bf16_t*>(y), n, nullptr); }
void from_float_q8_0(const float* x, void* y, int64_t n) { ref::quantize_row_q8_0(x, static_cast<block_q8_0*>(y), n, nullptr); }
void from_float_q8_1(const float* x, void* y, int64_t n) { ref::quantize_row_q8_1(x, static_cast<block_q8_1*>(y), n, nullptr); }
void from_float_q8_K(const float* x, void* y, int64_t n) { ref::quantize_row_q8_K(x, static_cast<block_q8_K*>(y), n, nullptr); }

// ---------------------------------------------------------------------------
// Float formats. Four partial sums: a little faster, and closer to the
// summation order of the SIMD kernels than one running sum.

void vec_dot_f32(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = static_cast<const float*>(vx);
    const float* y = static_cast<const float*>(vy);
    float acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        for (int k = 0; k < 4; ++k) acc[k] += x[i + k] * y[i + k];
    }
    for (; i < n; ++i) acc[0] += x[i] * y[i];
    *s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

void vec_dot_f16(int64_t n, float* s, const void* vx, const void* vy) {
    const fp16_t* x = static_cast<const fp16_t*>(vx);
    const fp16_t* y = static_cast<const fp16_t*>(vy);
    float acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        for (int k = 0; k < 4; ++k) acc[k] += fp16_to_fp32(x[i + k]) * fp16_to_fp32(y[i + k]);
    }
    for (; i < n; ++i) acc[0] += fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]);
    *s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

void vec_dot_bf16(int64_t n, float* s, const void* vx, const void* vy) {
    const bf16_t* x = static_cast<const bf16_t*>(vx);
    const bf16_t* y = static_cast<const bf16_t*>(vy);
    float acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        for (int k = 0; k < 4; ++k) acc[k] += bf16_to_fp32(x[i + k]) * bf16_to_fp32(y[i + k]);
    }
    for (; i < n; ++i) acc[0] += bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]);
    *s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// ---------------------------------------------------------------------------
// 32-element blocks against Q8_0 / Q8_1.

inline float h2f(fp16_t h) { return fp16_to_fp32(h); }

// Bit 4 of element j of a Q5 block (j in [0, 32)).
inline int q5_high(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

void vec_dot_q4_0(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_0*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK4_0; ++b) {
        int isum = 0;
        for (int j = 0; j < QK4_0 / 2; ++j) {
            isum += ((x[b].qs[j] & 0xF) - 8) * y[b].qs[j];
            isum += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + QK4_0 / 2];
        }
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(isum);
    }
    *s = sum;
}

// x = d q + m: sum_j x_j y_j = d dy sum(q qy) + m (dy sum(qy)) = d dy isum + m s.
void vec_dot_q4_1(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK4_1; ++b) {
        int isum = 0;
        for (int j = 0; j < QK4_1 / 2; ++j) {
            isum += (x[b].qs[j] & 0xF) * y[b].qs[j];
            isum += (x[b].qs[j] >> 4) * y[b].qs[j + QK4_1 / 2];
        }
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(isum) + h2f(x[b].m) * h2f(y[b].s);
    }
    *s = sum;
}

void vec_dot_q5_0(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_0*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK5_0; ++b) {
        int isum = 0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int lo = (x[b].qs[j] & 0xF) | (q5_high(x[b].qh, j) << 4);
            const int hi = (x[b].qs[j] >> 4) | (q5_high(x[b].qh, j + 16) << 4);
            isum += (lo - 16) * y[b].qs[j] + (hi - 16) * y[b].qs[j + QK5_0 / 2];
        }
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(isum);
    }
    *s = sum;
}

void vec_dot_q5_1(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK5_1; ++b) {
        int isum = 0;
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int lo = (x[b].qs[j] & 0xF) | (q5_high(x[b].qh, j) << 4);
            const int hi = (x[b].qs[j] >> 4) | (q5_high(x[b].qh, j + 16) << 4);
            isum += lo * y[b].qs[j] + hi * y[b].qs[j + QK5_1 / 2];
        }
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(isum) + h2f(x[b].m) * h2f(y[b].s);
    }
    *s = sum;
}

void vec_dot_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q8_0*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        int isum = 0;
        for (int j = 0; j < QK8_0; ++j) isum += x[b].qs[j] * y[b].qs[j];
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(isum);
    }
    *s = sum;
}

void vec_dot_iq4_nl(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_iq4_nl*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK4_NL; ++b) {
        int isum = 0;
        for (int j = 0; j < QK4_NL / 2; ++j) {
            isum += kvalues_iq4nl[x[b].qs[j] & 0xF] * y[b].qs[j];
            isum += kvalues_iq4nl[x[b].qs[j] >> 4] * y[b].qs[j + QK4_NL / 2];
        }
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(isum);
    }
    *s = sum;
}

// ---------------------------------------------------------------------------
// K-quants against Q8_K. Each super-block contributes
//   dy * (d * sum_j sc_j * isum_j - dmin * sum_j m_j * bsum_j)
// where isum_j is the integer dot product of sub-block j and bsum_j the sum
// of its activations (from bsums, so the min term costs no pass over qs).

// Element e's 2-bit field of a Q2_K / Q3_K qs array (see quant_blocks.h):
// 128-element halves of 32 bytes, four 2-bit planes per byte.
inline int k_2bit(const uint8_t* qs, int e) { return (qs[(e / 128) * 32 + (e % 32)] >> (2 * ((e / 32) % 4))) & 3; }

void vec_dot_q2_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q2_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            int sub = 0;
            for (int i = 0; i < 16; ++i) sub += k_2bit(x[b].qs, j * 16 + i) * y[b].qs[j * 16 + i];
            isum += (x[b].scales[j] & 0xF) * sub;
            msum += (x[b].scales[j] >> 4) * y[b].bsums[j];
        }
        sum += y[b].d * (h2f(x[b].d) * static_cast<float>(isum) - h2f(x[b].dmin) * static_cast<float>(msum));
    }
    *s = sum;
}

void vec_dot_q3_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q3_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int isum = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            int sub = 0;
            for (int i = 0; i < 16; ++i) {
                const int e = j * 16 + i;
                const int hbit = (x[b].hmask[e % 32] >> (e / 32)) & 1;
                sub += (k_2bit(x[b].qs, e) - (hbit ? 0 : 4)) * y[b].qs[e];
            }
            isum += q3_K_scale(x[b].scales, j) * sub;
        }
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(isum);
    }
    *s = sum;
}

void vec_dot_q4_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            int sc, m;
            k4_scale_min(x[b].scales, j, sc, m);
            // Sub-block j: nibble (j % 2) of qs[(j / 2) * 32 .. + 32].
            const uint8_t* q = x[b].qs + (j / 2) * 32;
            const int shift = 4 * (j % 2);
            int sub = 0;
            for (int l = 0; l < 32; ++l) sub += ((q[l] >> shift) & 0xF) * y[b].qs[j * 32 + l];
            isum += sc * sub;
            msum += m * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
        sum += y[b].d * (h2f(x[b].d) * static_cast<float>(isum) - h2f(x[b].dmin) * static_cast<float>(msum));
    }
    *s = sum;
}

void vec_dot_q5_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            int sc, m;
            k4_scale_min(x[b].scales, j, sc, m);
            const uint8_t* q = x[b].qs + (j / 2) * 32;
            const int shift = 4 * (j % 2);
            int sub = 0;
            for (int l = 0; l < 32; ++l) {
                const int v = ((q[l] >> shift) & 0xF) | (((x[b].qh[l] >> j) & 1) << 4);
                sub += v * y[b].qs[j * 32 + l];
            }
            isum += sc * sub;
            msum += m * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
        sum += y[b].d * (h2f(x[b].d) * static_cast<float>(isum) - h2f(x[b].dmin) * static_cast<float>(msum));
    }
    *s = sum;
}

// q = u - 32 with u the stored 6-bit value: sum sc_j sum (u - 32) y
// = sum sc_j (sum u y) - 32 sum sc_j bsum_j.
void vec_dot_q6_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q6_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int isum = 0, osum = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            int sub = 0;
            for (int i = 0; i < 16; ++i) {
                const int e = j * 16 + i;
                const int g = e / 128, p = (e / 32) % 4, l = e % 32;
                const int low = (x[b].ql[g * 64 + (p % 2) * 32 + l] >> (4 * (p / 2))) & 0xF;
                const int high = (x[b].qh[g * 32 + l] >> (2 * p)) & 3;
                sub += (low | (high << 4)) * y[b].qs[e];
            }
            isum += x[b].scales[j] * sub;
            osum += x[b].scales[j] * y[b].bsums[j];
        }
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(isum - 32 * osum);
    }
    *s = sum;
}

constexpr TypeKernels kF32{Type::F32, from_float_f32, vec_dot_f32};
constexpr TypeKernels kF16{Type::F16, from_float_f16, vec_dot_f16};
constexpr TypeKernels kBF16{Type::BF16, from_float_bf16, vec_dot_bf16};
constexpr TypeKernels kQ4_0{Type::Q8_0, from_float_q8_0, vec_dot_q4_0};
constexpr TypeKernels kQ4_1{Type::Q8_1, from_float_q8_1, vec_dot_q4_1};
constexpr TypeKernels kQ5_0{Type::Q8_0, from_float_q8_0, vec_dot_q5_0};
constexpr TypeKernels kQ5_1{Type::Q8_1, from_float_q8_1, vec_dot_q5_1};
constexpr TypeKernels kQ8_0{Type::Q8_0, from_float_q8_0, vec_dot_q8_0};
constexpr TypeKernels kIQ4_NL{Type::Q8_0, from_float_q8_0, vec_dot_iq4_nl};
constexpr TypeKernels kQ2_K{Type::Q8_K, from_float_q8_K, vec_dot_q2_K};
constexpr TypeKernels kQ3_K{Type::Q8_K, from_float_q8_K, vec_dot_q3_K};
constexpr TypeKernels kQ4_K{Type::Q8_K, from_float_q8_K, vec_dot_q4_K};
constexpr TypeKernels kQ5_K{Type::Q8_K, from_float_q8_K, vec_dot_q5_K};
constexpr TypeKernels kQ6_K{Type::Q8_K, from_float_q8_K, vec_dot_q6_K};

}  // namespace

// The reference table; null for types without a CPU kernel.
const TypeKernels* scalar_kernels(Type t) {
    switch (t) {
        case Type::F32: return &kF32;
        case Type::F16: return &kF16;
        case Type::BF16: return &kBF16;
        case Type::Q4_0: return &kQ4_0;
        case Type::Q4_1: return &kQ4_1;
        case Type::Q5_0: return &kQ5_0;
        case Type::Q5_1: return &kQ5_1;
        case Type::Q8_0: return &kQ8_0;
        case Type::IQ4_NL: return &kIQ4_NL;
        case Type::Q2_K: return &kQ2_K;
        case Type::Q3_K: return &kQ3_K;
        case Type::Q4_K: return &kQ4_K;
        case Type::Q5_K: return &kQ5_K;
        case Type::Q6_K: return &kQ6_K;
        default: return nullptr;
    }
}

}  // namespace kiln::cpu::detail
