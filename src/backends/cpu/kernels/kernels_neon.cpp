// NEON (AArch64 Advanced SIMD) dot-product kernels, compiled on ARM64 only.
//
// The integer kernels exist three times: plain ARMv8.0 NEON (widening
// multiplies vmull_s8 + pairwise accumulate vpadalq_s16, for cores such as
// Cortex-A53/A72), with the ARMv8.2 dot-product instruction (SDOT,
// vdotq_s32: 4 int8 products into each int32 lane), and with the int8
// matrix multiply (SMMLA, vmmlaq_s32, FEAT_I8MM: Neoverse V1/N2, Apple M2+,
// Graviton 3+). The build does not enable these globally, so the kernel
// bodies below are compiled once per variant by including this file into
// itself with the target switched on by pragma. cpu_features.cpp reports
// what the CPU has and the table at the end picks the variant.
//
// Activation converters are bit-exact with the reference quantizers: NEON
// has both rounding modes the references use as single instructions
// (vcvtaq: ties away from zero = roundf; vcvtnq: ties to even = lrintf).

#ifndef KILN_NEON_BODY

#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/kernels.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"

// Whether the dotprod pass can be compiled: wherever the whole build already
// targets dotprod, else by target pragma with GCC >= 10 or Clang >= 16 (older
// Clang declares vdotq_s32 only when dotprod is enabled for the whole file).
#if defined(__ARM_FEATURE_DOTPROD) || (defined(__clang__) && __clang_major__ >= 16) || \
    (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10)
#define KILN_NEON_HAVE_DOTPROD 1
#else
#define KILN_NEON_HAVE_DOTPROD 0
#endif
// The same for i8mm (ARMv8.6 SMMLA, optional from v8.2): GCC >= 11, Clang >= 16.
#if defined(__ARM_FEATURE_MATMUL_INT8) || (defined(__clang__) && __clang_major__ >= 16) || \
    (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11)
#define KILN_NEON_HAVE_I8MM KILN_NEON_HAVE_DOTPROD
#else
#define KILN_NEON_HAVE_I8MM 0
#endif

namespace kiln::cpu::detail {

const TypeKernels* neon_kernels(Type t, const CpuFeatures& f);

namespace neon_common {

inline float h2f(fp16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }

inline uint16_t load_u16(const void* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// Four fp16 values at a byte stride (the scales of four consecutive blocks).
inline float32x4_t load4_fp16(const void* base, size_t stride) {
    const auto* p = static_cast<const uint8_t*>(base);
    const uint16_t h[4] = {load_u16(p), load_u16(p + stride), load_u16(p + 2 * stride), load_u16(p + 3 * stride)};
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

// Q4_K / Q5_K 6-bit scales and mins (see k4_scale_min in core/quant_blocks.h),
// unpacked with 32-bit word operations.
inline void k4_scales_mins(const uint8_t* p, uint8_t sc[8], uint8_t m[8]) {
    uint32_t w[3];
    std::memcpy(w, p, sizeof(w));
    const uint32_t v[4] = {w[0] & 0x3f3f3f3fu, (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4),
                           w[1] & 0x3f3f3f3fu, ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4)};
    std::memcpy(sc, v, 8);
    std::memcpy(m, v + 2, 8);
}

// Q3_K's sixteen 6-bit scales (offset 32 removed) as int8: low nibbles of
// scales 0-7 / 8-15 in the low / high nibbles of bytes 0-7, the top two bits
// of scale 4k+i in bits 2k..2k+1 of byte 8+i.
inline void q3_scales(const uint8_t* p, int8_t out[16]) {
    uint32_t w[3];
    std::memcpy(w, p, sizeof(w));
    const uint32_t low[4] = {w[0] & 0x0f0f0f0fu, w[1] & 0x0f0f0f0fu, (w[0] >> 4) & 0x0f0f0f0fu, (w[1] >> 4) & 0x0f0f0f0fu};
    uint32_t v[4];
    for (int k = 0; k < 4; ++k) v[k] = low[k] | (((w[2] >> (2 * k)) & 0x03030303u) << 4);
    vst1q_s8(out, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(v)), vdupq_n_s8(32)));
}

// 0xFF in byte j (j < 32) where bit j of the little-endian 32-bit qh is set:
// the fifth bits of a Q5_0 / Q5_1 block, elements 0-15 and 16-31.
inline void expand_bits32(const uint8_t* qh, uint8x16_t& lo, uint8x16_t& hi) {
    uint32_t h;
    std::memcpy(&h, qh, sizeof(h));
    const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(h));
    static constexpr uint8_t kIdxLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static constexpr uint8_t kIdxHi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bit = vld1q_u8(kBit);
    lo = vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kIdxLo)), bit);
    hi = vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kIdxHi)), bit);
}

// Sum over the eight 32-element sub-blocks of m_j * (bsums[2j] + bsums[2j+1]).
inline int32_t k4_min_terms(const int16_t* bsums, const uint8_t m[8]) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(m)));
    const int32x4_t p = vmlal_s16(vmull_s16(vget_low_s16(pairs), vget_low_s16(m16)), vget_high_s16(pairs), vget_high_s16(m16));
    return vaddvq_s32(p);
}

// ---------------------------------------------------------------------------
// Activation converters.

void from_float_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); }

void from_float_f16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<fp16_t*>(vy);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// Round to nearest even on the bit pattern, NaN forced quiet: as fp32_to_bf16.
void from_float_bf16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<bf16_t*>(vy);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t v = vreinterpretq_u32_f32(vld1q_f32(x + i));
        const uint32x4_t is_nan = vcgtq_u32(vandq_u32(v, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
        const uint32x4_t lsb = vandq_u32(vshrq_n_u32(v, 16), vdupq_n_u32(1));
        const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(v, vaddq_u32(vdupq_n_u32(0x7fffu), lsb)), 16);
        const uint32x4_t nan = vorrq_u32(vshrq_n_u32(v, 16), vdupq_n_u32(64));
        vst1_u16(y + i, vmovn_u32(vbslq_u32(is_nan, nan, rounded)));
    }
    for (; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

// Eight int32x4 (values within int8 range) -> 32 int8.
inline void narrow_store(const int32x4_t q[8], int8_t* out) {
    for (int h = 0; h < 2; ++h) {
        const int16x8_t a = vcombine_s16(vqmovn_s32(q[4 * h]), vqmovn_s32(q[4 * h + 1]));
        const int16x8_t b = vcombine_s16(vqmovn_s32(q[4 * h + 2]), vqmovn_s32(q[4 * h + 3]));
        vst1q_s8(out + 16 * h, vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
    }
}

void from_float_q8_0(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_0*>(vy);
    for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
        float32x4_t v[8];
        float32x4_t amax = vdupq_n_f32(0);
        for (int k = 0; k < 8; ++k) {
            v[k] = vld1q_f32(x + 4 * k);
            amax = vmaxq_f32(amax, vabsq_f32(v[k]));
        }
        const float d = vmaxvq_f32(amax) / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        int32x4_t q[8];
        for (int k = 0; k < 8; ++k) q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));  // roundf
        narrow_store(q, y[b].qs);
        y[b].d = fp32_to_fp16(d);
    }
}

void from_float_q8_1(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_1*>(vy);
    for (int64_t b = 0; b < n / QK8_1; ++b, x += QK8_1) {
        float32x4_t v[8];
        float32x4_t amax = vdupq_n_f32(0);
        for (int k = 0; k < 8; ++k) {
            v[k] = vld1q_f32(x + 4 * k);
            amax = vmaxq_f32(amax, vabsq_f32(v[k]));
        }
        const float d = vmaxvq_f32(amax) / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        int32x4_t q[8];
        int32x4_t sum = vdupq_n_s32(0);
        for (int k = 0; k < 8; ++k) {
            q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
            sum = vaddq_s32(sum, q[k]);
        }
        narrow_store(q, y[b].qs);
        y[b].d = fp32_to_fp16(d);
        y[b].s = fp32_to_fp16(static_cast<float>(vaddvq_s32(sum)) * d);
    }
}

void from_float_q8_K(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_K*>(vy);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        block_q8_K& blk = y[b];
        float32x4_t amax = vdupq_n_f32(0);
        for (int i = 0; i < QK_K; i += 4) amax = vmaxq_f32(amax, vabsq_f32(vld1q_f32(x + i)));
        const float am = vmaxvq_f32(amax);
        if (!(am > 0)) {
            std::memset(&blk, 0, sizeof(blk));
            continue;
        }
        // The reference maps the FIRST element of largest magnitude to -127.
        int first = 0;
        while (std::fabs(x[first]) != am) ++first;
        const float iscale = -127.0f / x[first];
        for (int i = 0; i < QK_K; i += 32) {
            int32x4_t q[8];
            for (int k = 0; k < 8; ++k) {
                q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 4 * k), iscale)), vdupq_n_s32(127));
            }
            narrow_store(q, blk.qs + i);
            blk.bsums[i / 16] = static_cast<int16_t>(vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]))));
            blk.bsums[i / 16 + 1] = static_cast<int16_t>(vaddvq_s32(vaddq_s32(vaddq_s32(q[4], q[5]), vaddq_s32(q[6], q[7]))));
        }
        blk.d = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------------------
// Float formats: 16 elements per step in four accumulators.

inline float sum4(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d) {
    return vaddvq_f32(vaddq_f32(vaddq_f32(a, b), vaddq_f32(c, d)));
}

void vec_dot_f32(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = static_cast<const float*>(vx);
    const float* y = static_cast<const float*>(vy);
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; ++k) acc[k] = vfmaq_f32(acc[k], vld1q_f32(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
    }
    for (; i + 4 <= n; i += 4) acc[0] = vfmaq_f32(acc[0], vld1q_f32(x + i), vld1q_f32(y + i));
    float tail = 0;
    for (; i < n; ++i) tail += x[i] * y[i];
    *s = sum4(acc[0], acc[1], acc[2], acc[3]) + tail;
}

inline float32x4_t f16x4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline float32x4_t bf16x4(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
float f16_scalar(uint16_t h) { return fp16_to_fp32(h); }
float bf16_scalar(uint16_t h) { return bf16_to_fp32(h); }

template <float32x4_t (*Load)(const uint16_t*), float (*Scalar)(uint16_t)>
void vec_dot_half(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const uint16_t*>(vx);
    const auto* y = static_cast<const uint16_t*>(vy);
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; ++k) acc[k] = vfmaq_f32(acc[k], Load(x + i + 4 * k), Load(y + i + 4 * k));
    }
    for (; i + 4 <= n; i += 4) acc[0] = vfmaq_f32(acc[0], Load(x + i), Load(y + i));
    float tail = 0;
    for (; i < n; ++i) tail += Scalar(x[i]) * Scalar(y[i]);
    *s = sum4(acc[0], acc[1], acc[2], acc[3]) + tail;
}

}  // namespace neon_common

// The integer kernels, three times.
#define KILN_NEON_BODY 1
#define KILN_NEON_NS neon_plain
#define KILN_NEON_DOTPROD 0
#define KILN_NEON_I8MM 0
#include "kernels_neon.cpp"  // this file again, in body mode
#undef KILN_NEON_NS
#undef KILN_NEON_DOTPROD

#if KILN_NEON_HAVE_DOTPROD
#define KILN_NEON_NS neon_dotprod
#define KILN_NEON_DOTPROD 1
#if !defined(__ARM_FEATURE_DOTPROD)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif
#endif
#include "kernels_neon.cpp"  // this file again, in body mode
#if !defined(__ARM_FEATURE_DOTPROD)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
#undef KILN_NEON_NS
#undef KILN_NEON_DOTPROD
#endif
#undef KILN_NEON_I8MM

// Third pass: SDOT where single dot products remain, SMMLA for pairs of
// blocks or sub-blocks (see mmla2).
#if KILN_NEON_HAVE_I8MM
#define KILN_NEON_NS neon_i8mm
#define KILN_NEON_DOTPROD 1
#define KILN_NEON_I8MM 1
#if !defined(__ARM_FEATURE_MATMUL_INT8) || !defined(__ARM_FEATURE_DOTPROD)
#define KILN_NEON_I8MM_PRAGMA 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod,i8mm"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
#endif
#endif
#include "kernels_neon.cpp"  // this file again, in body mode
#if defined(KILN_NEON_I8MM_PRAGMA)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef KILN_NEON_I8MM_PRAGMA
#endif
#undef KILN_NEON_NS
#undef KILN_NEON_DOTPROD
#undef KILN_NEON_I8MM
#endif

namespace {

using namespace neon_common;

#define KILN_NEON_TABLE(NS)                                                                       \
    namespace NS##_table {                                                                        \
    constexpr TypeKernels kQ4_0{Type::Q8_0, from_float_q8_0, NS::vec_dot_q4_0};                   \
    constexpr TypeKernels kQ4_1{Type::Q8_1, from_float_q8_1, NS::vec_dot_q4_1};                   \
    constexpr TypeKernels kQ5_0{Type::Q8_0, from_float_q8_0, NS::vec_dot_q5_0};                   \
    constexpr TypeKernels kQ5_1{Type::Q8_1, from_float_q8_1, NS::vec_dot_q5_1};                   \
    constexpr TypeKernels kQ2_K{Type::Q8_K, from_float_q8_K, NS::vec_dot_q2_K};                   \
    constexpr TypeKernels kQ3_K{Type::Q8_K, from_float_q8_K, NS::vec_dot_q3_K};                   \
    constexpr TypeKernels kQ8_0{Type::Q8_0, from_float_q8_0, NS::vec_dot_q8_0};                   \
    constexpr TypeKernels kIQ4_NL{Type::Q8_0, from_float_q8_0, NS::vec_dot_iq4_nl};               \
    constexpr TypeKernels kQ4_K{Type::Q8_K, from_float_q8_K, NS::vec_dot_q4_K};                   \
    constexpr TypeKernels kQ5_K{Type::Q8_K, from_float_q8_K, NS::vec_dot_q5_K};                   \
    constexpr TypeKernels kQ6_K{Type::Q8_K, from_float_q8_K, NS::vec_dot_q6_K};                   \
    inline const TypeKernels* find(Type t) {                                                      \
        switch (t) {                                                                              \
            case Type::Q4_0: return &kQ4_0;                                                       \
            case Type::Q4_1: return &kQ4_1;                                                       \
            case Type::Q5_0: return &kQ5_0;                                                       \
            case Type::Q5_1: return &kQ5_1;                                                       \
            case Type::Q2_K: return &kQ2_K;                                                       \
            case Type::Q3_K: return &kQ3_K;                                                       \
            case Type::Q8_0: return &kQ8_0;                                                       \
            case Type::IQ4_NL: return &kIQ4_NL;                                                   \
            case Type::Q4_K: return &kQ4_K;                                                       \
            case Type::Q5_K: return &kQ5_K;                                                       \
            case Type::Q6_K: return &kQ6_K;                                                       \
            default: return nullptr;                                                              \
        }                                                                                         \
    }                                                                                             \
    }

KILN_NEON_TABLE(neon_plain)
#if KILN_NEON_HAVE_DOTPROD
KILN_NEON_TABLE(neon_dotprod)
#endif
#if KILN_NEON_HAVE_I8MM
KILN_NEON_TABLE(neon_i8mm)
#endif

constexpr TypeKernels kF32{Type::F32, from_float_f32, vec_dot_f32};
constexpr TypeKernels kF16{Type::F16, from_float_f16, vec_dot_half<f16x4, f16_scalar>};
constexpr TypeKernels kBF16{Type::BF16, from_float_bf16, vec_dot_half<bf16x4, bf16_scalar>};

}  // namespace

// Every type with a scalar kernel has a NEON one.
const TypeKernels* neon_kernels(Type t, const CpuFeatures& f) {
    switch (t) {
        case Type::F32: return &kF32;
        case Type::F16: return &kF16;
        case Type::BF16: return &kBF16;
        default: break;
    }
#if KILN_NEON_HAVE_I8MM
    if (f.i8mm && f.dotprod) return neon_i8mm_table::find(t);
#endif
#if KILN_NEON_HAVE_DOTPROD
    if (f.dotprod) return neon_dotprod_table::find(t);
#endif
    return neon_plain_table::find(t);
}

}  // namespace kiln::cpu::detail

#else  // KILN_NEON_BODY: the integer kernels, compiled once per variant.

namespace KILN_NEON_NS {

using namespace neon_common;

// acc + the 16 products a[i] * b[i], spread over the 4 int32 lanes.
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if KILN_NEON_DOTPROD
    return vdotq_s32(acc, a, b);
#else
    // |a b| <= 128 * 128 fits int16; pairwise-add into int32.
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

#if KILN_NEON_I8MM
// SMMLA (vmmlaq_s32) reads each int8x16 as a 2x8 matrix (row 0 = bytes 0-7,
// row 1 = bytes 8-15) and adds A * B^T to acc as [r0.c0, r0.c1, r1.c0, r1.c1].
// With A's rows taken from xa and xb and B's from ya and yb (8-byte halves,
// two instructions per 16 bytes), lane 0 gains xa . ya and lane 3 xb . yb;
// lanes 1 and 2 gain cross products that every caller weighs by zero. In a
// one-row-by-one-column dot product this does as much useful work per
// instruction as SDOT (half of SMMLA's 32 products); SMMLA pays off in 2x2
// tiles of weight rows by activation rows.
inline int32x4_t mmla2(int32x4_t acc, int8x16_t xa, int8x16_t xb, int8x16_t ya, int8x16_t yb) {
    const int64x2_t xa64 = vreinterpretq_s64_s8(xa), xb64 = vreinterpretq_s64_s8(xb);
    const int64x2_t ya64 = vreinterpretq_s64_s8(ya), yb64 = vreinterpretq_s64_s8(yb);
    acc = vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip1q_s64(xa64, xb64)), vreinterpretq_s8_s64(vzip1q_s64(ya64, yb64)));
    return vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip2q_s64(xa64, xb64)), vreinterpretq_s8_s64(vzip2q_s64(ya64, yb64)));
}

// [s0, 0, 0, s1]: weighs lane 0 and lane 3 of an mmla2 result, drops the cross products.
inline int32x4_t lanes03(int32_t s0, int32_t s1) { return vsetq_lane_s32(s1, vsetq_lane_s32(s0, vdupq_n_s32(0), 0), 3); }
#endif

// isum + s0 * (x0 . y0) + s1 * (x1 . y1), each a 16-element dot product
// (two sub-blocks of a K-quant with their integer scales).
inline int32x4_t dot16x2_scaled(int32x4_t isum, int8x16_t x0, int8x16_t y0, int32_t s0, int8x16_t x1, int8x16_t y1,
                                int32_t s1) {
#if KILN_NEON_I8MM
    return vmlaq_s32(isum, mmla2(vdupq_n_s32(0), x0, x1, y0, y1), lanes03(s0, s1));
#else
    isum = vmlaq_n_s32(isum, dot16(vdupq_n_s32(0), x0, y0), s0);
    return vmlaq_n_s32(isum, dot16(vdupq_n_s32(0), x1, y1), s1);
#endif
}

// The same over 32-element sub-blocks: (x0a x0b) . (y0a y0b) and (x1a x1b) . (y1a y1b).
inline int32x4_t dot32x2_scaled(int32x4_t isum, int8x16_t x0a, int8x16_t x0b, int8x16_t y0a, int8x16_t y0b, int32_t s0,
                                int8x16_t x1a, int8x16_t x1b, int8x16_t y1a, int8x16_t y1b, int32_t s1) {
#if KILN_NEON_I8MM
    const int32x4_t r = mmla2(mmla2(vdupq_n_s32(0), x0a, x1a, y0a, y1a), x0b, x1b, y0b, y1b);
    return vmlaq_s32(isum, r, lanes03(s0, s1));
#else
    isum = vmlaq_n_s32(isum, dot16(dot16(vdupq_n_s32(0), x0a, y0a), x0b, y0b), s0);
    return vmlaq_n_s32(isum, dot16(dot16(vdupq_n_s32(0), x1a, y1a), x1b, y1b), s1);
#endif
}

inline int8x16_t low_nibbles(uint8x16_t v) { return vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))); }
inline int8x16_t high_nibbles(uint8x16_t v) { return vreinterpretq_s8_u8(vshrq_n_u8(v, 4)); }

// 32-element blocks. A decoder turns one weight block into its 32 int8
// values (elements 0-15, 16-31); the activation block's qs are int8 already.
template <typename BX, typename BY, typename Decode>
inline int32x4_t block_dot(const BX& x, const BY& y, Decode decode) {
    int8x16_t lo, hi;
    decode(x, lo, hi);
    return dot16(dot16(vdupq_n_s32(0), lo, vld1q_s8(y.qs)), hi, vld1q_s8(y.qs + 16));
}

#if KILN_NEON_I8MM
// Blocks x0 . y0 in lane 0 and x1 . y1 in lane 3 (lanes 1, 2: cross products).
template <typename BX, typename BY, typename Decode>
inline int32x4_t block_pair_dot(const BX& x0, const BY& y0, const BX& x1, const BY& y1, Decode decode) {
    int8x16_t lo0, hi0, lo1, hi1;
    decode(x0, lo0, hi0);
    decode(x1, lo1, hi1);
    const int32x4_t r = mmla2(vdupq_n_s32(0), lo0, lo1, vld1q_s8(y0.qs), vld1q_s8(y1.qs));
    return mmla2(r, hi0, hi1, vld1q_s8(y0.qs + 16), vld1q_s8(y1.qs + 16));
}
#endif

// Four blocks per step, their scale products converted together and applied
// with lane-indexed FMAs (i8mm: by vectors that are zero in the cross lanes).
template <typename BX, typename BY, typename Decode>
inline float dot_blocks(int64_t nb, const BX* x, const BY* y, Decode decode) {
    float32x4_t acc[2] = {vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        const float32x4_t d = vmulq_f32(load4_fp16(&x[b].d, sizeof(BX)), load4_fp16(&y[b].d, sizeof(BY)));
#if KILN_NEON_I8MM
        const float32x4_t zero = vdupq_n_f32(0);
        const float32x4_t d01 = vcopyq_laneq_f32(vcopyq_laneq_f32(zero, 0, d, 0), 3, d, 1);
        const float32x4_t d23 = vcopyq_laneq_f32(vcopyq_laneq_f32(zero, 0, d, 2), 3, d, 3);
        acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(block_pair_dot(x[b], y[b], x[b + 1], y[b + 1], decode)), d01);
        acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(block_pair_dot(x[b + 2], y[b + 2], x[b + 3], y[b + 3], decode)), d23);
#else
        acc[0] = vfmaq_laneq_f32(acc[0], vcvtq_f32_s32(block_dot(x[b], y[b], decode)), d, 0);
        acc[1] = vfmaq_laneq_f32(acc[1], vcvtq_f32_s32(block_dot(x[b + 1], y[b + 1], decode)), d, 1);
        acc[0] = vfmaq_laneq_f32(acc[0], vcvtq_f32_s32(block_dot(x[b + 2], y[b + 2], decode)), d, 2);
        acc[1] = vfmaq_laneq_f32(acc[1], vcvtq_f32_s32(block_dot(x[b + 3], y[b + 3], decode)), d, 3);
#endif
    }
    for (; b < nb; ++b) acc[0] = vfmaq_n_f32(acc[0], vcvtq_f32_s32(block_dot(x[b], y[b], decode)), h2f(x[b].d) * h2f(y[b].d));
    return vaddvq_f32(vaddq_f32(acc[0], acc[1]));
}

struct DecodeQ4_0 {
    void operator()(const block_q4_0& x, int8x16_t& lo, int8x16_t& hi) const {
        const uint8x16_t raw = vld1q_u8(x.qs);
        lo = vsubq_s8(low_nibbles(raw), vdupq_n_s8(8));
        hi = vsubq_s8(high_nibbles(raw), vdupq_n_s8(8));
    }
};

struct DecodeQ8_0 {
    void operator()(const block_q8_0& x, int8x16_t& lo, int8x16_t& hi) const {
        lo = vld1q_s8(x.qs);
        hi = vld1q_s8(x.qs + 16);
    }
};

struct DecodeIQ4_NL {
    void operator()(const block_iq4_nl& x, int8x16_t& lo, int8x16_t& hi) const {
        const int8x16_t table = vld1q_s8(kvalues_iq4nl);
        const uint8x16_t raw = vld1q_u8(x.qs);
        lo = vqtbl1q_s8(table, vandq_u8(raw, vdupq_n_u8(0x0F)));
        hi = vqtbl1q_s8(table, vshrq_n_u8(raw, 4));
    }
};

void vec_dot_q4_0(int64_t n, float* s, const void* vx, const void* vy) {
    *s = dot_blocks(n / QK4_0, static_cast<const block_q4_0*>(vx), static_cast<const block_q8_0*>(vy), DecodeQ4_0{});
}
void vec_dot_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    *s = dot_blocks(n / QK8_0, static_cast<const block_q8_0*>(vx), static_cast<const block_q8_0*>(vy), DecodeQ8_0{});
}
void vec_dot_iq4_nl(int64_t n, float* s, const void* vx, const void* vy) {
    *s = dot_blocks(n / QK4_NL, static_cast<const block_iq4_nl*>(vx), static_cast<const block_q8_0*>(vy), DecodeIQ4_NL{});
}

// Q4_1 / Q5_1 against Q8_1: sum over blocks of m_x * s_y, the offset term.
template <typename BX>
inline float offset_terms(int64_t nb, const BX* x, const block_q8_1* y) {
    float32x4_t acc = vdupq_n_f32(0);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) acc = vfmaq_f32(acc, load4_fp16(&x[b].m, sizeof(BX)), load4_fp16(&y[b].s, sizeof(block_q8_1)));
    float tail = 0;
    for (; b < nb; ++b) tail += h2f(x[b].m) * h2f(y[b].s);
    return vaddvq_f32(acc) + tail;
}

struct DecodeQ4_1 {
    void operator()(const block_q4_1& x, int8x16_t& lo, int8x16_t& hi) const {
        const uint8x16_t raw = vld1q_u8(x.qs);
        lo = low_nibbles(raw);
        hi = high_nibbles(raw);
    }
};

// Q5: nibble | 16 * bit (Q5_1), minus 16 for Q5_0.
template <typename BX, bool Signed>
struct DecodeQ5 {
    void operator()(const BX& x, int8x16_t& lo, int8x16_t& hi) const {
        uint8x16_t hlo, hhi;
        expand_bits32(x.qh, hlo, hhi);
        const uint8x16_t raw = vld1q_u8(x.qs), sixteen = vdupq_n_u8(16);
        lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(raw, vdupq_n_u8(0x0F)), vandq_u8(hlo, sixteen)));
        hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(raw, 4), vandq_u8(hhi, sixteen)));
        if constexpr (Signed) {
            lo = vsubq_s8(lo, vdupq_n_s8(16));
            hi = vsubq_s8(hi, vdupq_n_s8(16));
        }
    }
};

void vec_dot_q4_1(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    *s = dot_blocks(n / QK4_1, x, y, DecodeQ4_1{}) + offset_terms(n / QK4_1, x, y);
}
void vec_dot_q5_0(int64_t n, float* s, const void* vx, const void* vy) {
    *s = dot_blocks(n / QK5_0, static_cast<const block_q5_0*>(vx), static_cast<const block_q8_0*>(vy), DecodeQ5<block_q5_0, true>{});
}
void vec_dot_q5_1(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    *s = dot_blocks(n / QK5_1, x, y, DecodeQ5<block_q5_1, false>{}) + offset_terms(n / QK5_1, x, y);
}

// K-quants: per super-block an int32x4 accumulates sub-block dot products
// times their integer scales (vmlaq_n_s32), reduced once per super-block.

void vec_dot_q4_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        uint8_t sc[8], m[8];
        k4_scales_mins(x[b].scales, sc, m);
        const int32_t msum = k4_min_terms(y[b].bsums, m);
        const int8_t* a = y[b].qs;
        int32x4_t isum = vdupq_n_s32(0);
        for (int j = 0; j < 4; ++j) {
            // Sub-block 2j: low nibbles; 2j + 1: high nibbles.
            const uint8x16_t q0 = vld1q_u8(x[b].qs + 32 * j), q1 = vld1q_u8(x[b].qs + 32 * j + 16);
            isum = dot32x2_scaled(isum, low_nibbles(q0), low_nibbles(q1), vld1q_s8(a + 64 * j), vld1q_s8(a + 64 * j + 16),
                                  sc[2 * j], high_nibbles(q0), high_nibbles(q1), vld1q_s8(a + 64 * j + 32),
                                  vld1q_s8(a + 64 * j + 48), sc[2 * j + 1]);
        }
        const float dy = y[b].d;
        sum += dy * h2f(x[b].d) * static_cast<float>(vaddvq_s32(isum)) - dy * h2f(x[b].dmin) * static_cast<float>(msum);
    }
    *s = sum;
}

void vec_dot_q5_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const uint8x16_t sixteen = vdupq_n_u8(16);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        uint8_t sc[8], m[8];
        k4_scales_mins(x[b].scales, sc, m);
        const int32_t msum = k4_min_terms(y[b].bsums, m);
        // Bit j of qh[l] is bit 4 of element 32 j + l.
        const uint8x16_t qh0 = vld1q_u8(x[b].qh), qh1 = vld1q_u8(x[b].qh + 16);
        const int8_t* a = y[b].qs;
        int32x4_t isum = vdupq_n_s32(0);
        for (int j = 0; j < 4; ++j) {
            const uint8x16_t q0 = vld1q_u8(x[b].qs + 32 * j), q1 = vld1q_u8(x[b].qs + 32 * j + 16);
            const uint8x16_t blo = vdupq_n_u8(static_cast<uint8_t>(1u << (2 * j)));
            const uint8x16_t bhi = vdupq_n_u8(static_cast<uint8_t>(1u << (2 * j + 1)));
            const int8x16_t l0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q0, vdupq_n_u8(0x0F)), vandq_u8(vtstq_u8(qh0, blo), sixteen)));
            const int8x16_t l1 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q1, vdupq_n_u8(0x0F)), vandq_u8(vtstq_u8(qh1, blo), sixteen)));
            const int8x16_t h0 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q0, 4), vandq_u8(vtstq_u8(qh0, bhi), sixteen)));
            const int8x16_t h1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q1, 4), vandq_u8(vtstq_u8(qh1, bhi), sixteen)));
            isum = dot32x2_scaled(isum, l0, l1, vld1q_s8(a + 64 * j), vld1q_s8(a + 64 * j + 16), sc[2 * j], h0, h1,
                                  vld1q_s8(a + 64 * j + 32), vld1q_s8(a + 64 * j + 48), sc[2 * j + 1]);
        }
        const float dy = y[b].d;
        sum += dy * h2f(x[b].d) * static_cast<float>(vaddvq_s32(isum)) - dy * h2f(x[b].dmin) * static_cast<float>(msum);
    }
    *s = sum;
}

// Q6_K: q = (low4 | high2 << 4) - 32, signed, so SDOT takes it directly.
// Per 128-element half g and 16-byte column chunk h: ql[64g + 16h] and
// ql[64g + 32 + 16h] hold the low nibbles of elements 32p + 16h + i
// (p = 0, 1 low nibbles; p = 2, 3 high nibbles), qh[32g + 16h] their top
// bits in bit pairs p.
void vec_dot_q6_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q6_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const uint8x16_t low4 = vdupq_n_u8(0x0F), low2 = vdupq_n_u8(3);
    const int8x16_t offset = vdupq_n_s8(32);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const int8_t* sc = x[b].scales;
        int32x4_t isum = vdupq_n_s32(0);
        for (int g = 0; g < 2; ++g) {
            const int8_t* a = y[b].qs + 128 * g;
            int8x16_t w[2][4];  // [chunk h][p]
            for (int h = 0; h < 2; ++h) {
                const uint8x16_t ql0 = vld1q_u8(x[b].ql + 64 * g + 16 * h);
                const uint8x16_t ql1 = vld1q_u8(x[b].ql + 64 * g + 32 + 16 * h);
                const uint8x16_t qh = vld1q_u8(x[b].qh + 32 * g + 16 * h);
                uint8x16_t u[4];
                u[0] = vorrq_u8(vandq_u8(ql0, low4), vshlq_n_u8(vandq_u8(qh, low2), 4));
                u[1] = vorrq_u8(vandq_u8(ql1, low4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), low2), 4));
                u[2] = vorrq_u8(vshrq_n_u8(ql0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), low2), 4));
                u[3] = vorrq_u8(vshrq_n_u8(ql1, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4));
                for (int p = 0; p < 4; ++p) w[h][p] = vsubq_s8(vreinterpretq_s8_u8(u[p]), offset);
            }
            // The two 16-element chunks of sub-block pair p are sub-blocks 8g + 2p and 8g + 2p + 1.
            for (int p = 0; p < 4; ++p) {
                isum = dot16x2_scaled(isum, w[0][p], vld1q_s8(a + 32 * p), sc[8 * g + 2 * p], w[1][p],
                                      vld1q_s8(a + 32 * p + 16), sc[8 * g + 2 * p + 1]);
            }
        }
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(vaddvq_s32(isum));
    }
    *s = sum;
}


// Q2_K / Q3_K quants: per 128-element half g, qs[32g + l] holds elements
// 32p + l of the half in bit pairs p (p = 0..3); 16-byte chunk h covers
// l = 16h..16h+15, i.e. 16-element sub-block 8g + 2p + h.
void vec_dot_q2_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q2_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const uint8x16_t low2 = vdupq_n_u8(3);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        // scales byte j: low nibble sc_j, high nibble m_j.
        const uint8x16_t raw = vld1q_u8(x[b].scales);
        uint8_t sc[16];
        vst1q_u8(sc, vandq_u8(raw, vdupq_n_u8(0x0F)));
        const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(vshrq_n_u8(raw, 4))));
        const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8(raw, 4)));
        const int16x8_t bs0 = vld1q_s16(y[b].bsums), bs1 = vld1q_s16(y[b].bsums + 8);
        int32x4_t mt = vmull_s16(vget_low_s16(bs0), vget_low_s16(m0));
        mt = vmlal_high_s16(mt, bs0, m0);
        mt = vmlal_s16(mt, vget_low_s16(bs1), vget_low_s16(m1));
        mt = vmlal_high_s16(mt, bs1, m1);
        int32x4_t isum = vdupq_n_s32(0);
        for (int g = 0; g < 2; ++g) {
            const int8_t* a = y[b].qs + 128 * g;
            const uint8x16_t q0 = vld1q_u8(x[b].qs + 32 * g), q1 = vld1q_u8(x[b].qs + 32 * g + 16);
            for (int p = 0; p < 4; ++p) {
                const int8x16_t shift = vdupq_n_s8(static_cast<int8_t>(-2 * p));
                const int8x16_t v0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q0, shift), low2));
                const int8x16_t v1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q1, shift), low2));
                isum = dot16x2_scaled(isum, v0, vld1q_s8(a + 32 * p), sc[8 * g + 2 * p], v1, vld1q_s8(a + 32 * p + 16),
                                      sc[8 * g + 2 * p + 1]);
            }
        }
        const float dy = y[b].d;
        sum += dy * h2f(x[b].d) * static_cast<float>(vaddvq_s32(isum)) - dy * h2f(x[b].dmin) * static_cast<float>(vaddvq_s32(mt));
    }
    *s = sum;
}

// Q3_K: q = low2 + 4 * hbit - 4 in [-4, 3], signed, dotted directly; the high
// bit of element 32 j + l is bit j of hmask[l].
void vec_dot_q3_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q3_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const uint8x16_t low2 = vdupq_n_u8(3), four = vdupq_n_u8(4);
    float sum = 0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int8_t sc[16];
        q3_scales(x[b].scales, sc);
        int32x4_t isum = vdupq_n_s32(0);
        for (int g = 0; g < 2; ++g) {
            const int8_t* a = y[b].qs + 128 * g;
            const uint8x16_t q[2] = {vld1q_u8(x[b].qs + 32 * g), vld1q_u8(x[b].qs + 32 * g + 16)};
            const uint8x16_t hm[2] = {vld1q_u8(x[b].hmask), vld1q_u8(x[b].hmask + 16)};
            for (int p = 0; p < 4; ++p) {
                int8x16_t w[2];
                for (int h = 0; h < 2; ++h) {
                    const uint8x16_t low = vandq_u8(vshlq_u8(q[h], vdupq_n_s8(static_cast<int8_t>(-2 * p))), low2);
                    const uint8x16_t hb = vandq_u8(vtstq_u8(hm[h], vdupq_n_u8(static_cast<uint8_t>(1u << (4 * g + p)))), four);
                    w[h] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, hb)), vdupq_n_s8(4));
                }
                isum = dot16x2_scaled(isum, w[0], vld1q_s8(a + 32 * p), sc[8 * g + 2 * p], w[1], vld1q_s8(a + 32 * p + 16),
                                      sc[8 * g + 2 * p + 1]);
            }
        }
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(vaddvq_s32(isum));
    }
    *s = sum;
}

}  // namespace KILN_NEON_NS

#endif  // KILN_NEON_BODY
