// AVX-512 (F + BW + VL + DQ) dot-product kernels, with VNNI and BF16
// variants chosen at dispatch time. Only called once cpu_features.cpp has
// found AVX-512F/BW/VL/DQ (and AVX2/FMA/F16C) usable.
//
// The file is compiled with -mavx512vnni -mavx512bf16 so that both variants
// can live here, but the plain variants never use those instructions (they
// are written with intrinsics only, and the dispatch below hands out the
// VNNI / BF16 functions only when the CPU reports them). Under MSVC, which
// does not define __AVX512VNNI__ / __AVX512BF16__, only the plain variants
// are built.
//
// Layout choices:
//  * 4-bit 32-element formats: two blocks per 512-bit register. A block's 16
//    nibble bytes are broadcast into both halves of a 256-bit lane and a
//    per-64-bit variable shift (0 | 4) exposes low nibbles in the first half
//    and high nibbles in the second, the element order of the activations,
//    so the activations need no shuffles at all. Q8_0 weights need no
//    unpacking and stay one block per 256-bit register (see its kernel).
//  * VNNI (vpdpbusd: unsigned x signed bytes, 4 products into int32)
//    replaces maddubs + madd. Signed weights are handled by applying the
//    weight's offset through the activations (sum (u - o) a = sum u a +
//    sum o (-a), two dpbusd) or by moving the weight's sign onto the
//    activation (|w| * (a * sign(w))).
//  * K-quants: 64 elements per step (two 32-element sub-blocks, or four
//    16-element ones, one per 128-bit lane); sub-block scales multiply the
//    int16 pair sums with vpmaddwd, which is as cheap as dpbusd followed by
//    a scale multiply would be, so VNNI is not used there.

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers trigger -Wmaybe-uninitialized on their own
// _mm512_undefined_*() placeholders once inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "backends/cpu/kernels/kernels.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"

#if defined(__AVX512VNNI__)
#define KILN_HAVE_VNNI 1
#else
#define KILN_HAVE_VNNI 0
#endif
#if defined(__AVX512BF16__)
#define KILN_HAVE_BF16 1
#else
#define KILN_HAVE_BF16 0
#endif

namespace kiln::cpu::detail {

const TypeKernels* avx512_kernels(Type t, const CpuFeatures& f);

namespace {

// ---------------------------------------------------------------------------
// Helpers.

inline float h2f(fp16_t h) { return _cvtsh_ss(h); }

inline uint16_t load_u16(const void* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// Eight fp16 values at a byte stride, by scalar loads (see vec_dot_q8_0_vnni256).
inline __m256 load8_fp16(const void* base, size_t stride) {
    const auto* p = static_cast<const uint8_t*>(base);
    const __m128i h = _mm_setr_epi16(
        static_cast<short>(load_u16(p)), static_cast<short>(load_u16(p + stride)),
        static_cast<short>(load_u16(p + 2 * stride)), static_cast<short>(load_u16(p + 3 * stride)),
        static_cast<short>(load_u16(p + 4 * stride)), static_cast<short>(load_u16(p + 5 * stride)),
        static_cast<short>(load_u16(p + 6 * stride)), static_cast<short>(load_u16(p + 7 * stride)));
    return _mm256_cvtph_ps(h);
}

// Word indices 0, W, 2W, ... (n of them), for vpermt2w.
template <int W, int N>
struct StrideIndex {
    alignas(64) uint16_t v[32] = {};
    constexpr StrideIndex() {
        for (int i = 0; i < N; ++i) v[i] = static_cast<uint16_t>(i * W);
    }
};

// The fp16 scales (first field) of eight consecutive blocks of Bytes bytes,
// picked out of 128-byte windows with one or two vpermt2w rather than eight
// scalar loads and inserts (those occupy port 5, which the 512-bit integer
// work needs). Windows stay inside the eight blocks.
template <size_t Bytes>
inline __m128i scales8_fp16(const void* base) {
    static_assert(Bytes % 2 == 0 && Bytes >= 16 && Bytes <= 40, "block size outside the windows below");
    constexpr int W = static_cast<int>(Bytes / 2);
    const auto* p = static_cast<const uint8_t*>(base);
    if constexpr (7 * W < 64) {  // all eight scales in the first 128 bytes
        static constexpr StrideIndex<W, 8> idx;
        const __m512i i = _mm512_load_si512(idx.v);
        return _mm512_castsi512_si128(_mm512_permutex2var_epi16(_mm512_loadu_si512(p), i, _mm512_loadu_si512(p + 64)));
    } else {  // four per window
        static constexpr StrideIndex<W, 4> idx;
        const __m512i i = _mm512_load_si512(idx.v);
        const __m512i lo = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), i, _mm512_loadu_si512(p + 64));
        const __m512i hi = _mm512_permutex2var_epi16(_mm512_loadu_si512(p + 4 * Bytes), i, _mm512_loadu_si512(p + 4 * Bytes + 64));
        return _mm_unpacklo_epi64(_mm512_castsi512_si128(lo), _mm512_castsi512_si128(hi));
    }
}

inline __m512i loadu512(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float hsum(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Sum over 64 byte pairs of u * s (u unsigned, s signed) as 16 int32.
template <bool Vnni>
inline __m512i dot_u8s8(__m512i u, __m512i s) {
#if KILN_HAVE_VNNI
    if constexpr (Vnni) return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
#endif
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

// sum (u - o) * a for unsigned u, constant unsigned offset bytes o, signed a.
template <bool Vnni>
inline __m512i dot_u8s8_offset(__m512i u, __m512i a, __m512i o) {
#if KILN_HAVE_VNNI
    if constexpr (Vnni) {
        const __m512i neg_a = _mm512_sub_epi8(_mm512_setzero_si512(), a);
        return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, a), o, neg_a);
    }
#endif
    const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(u, a), _mm512_maddubs_epi16(o, a));
    return _mm512_madd_epi16(p, _mm512_set1_epi16(1));
}

// sum w * a for signed w (-128 allowed) and a (|a| <= 127).
template <bool Vnni>
inline __m512i dot_s8s8(__m512i w, __m512i a) {
    const __mmask64 neg = _mm512_movepi8_mask(w);
    const __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
    return dot_u8s8<Vnni>(_mm512_abs_epi8(w), sa);
}

// Nibbles of one or two consecutive 32-element blocks (16 bytes each, at a
// byte stride): [b0 low | b0 high | b1 low | b1 high]; with Two == false the
// upper half is zero and the second block is not read.
template <bool Two>
inline __m512i nibbles2(const uint8_t* qs, size_t stride) {
    const __m256i a = _mm256_broadcastsi128_si256(loadu128(qs));
    __m512i v;
    if constexpr (Two) {
        v = _mm512_inserti64x4(_mm512_castsi256_si512(a), _mm256_broadcastsi128_si256(loadu128(qs + stride)), 1);
    } else {
        v = _mm512_zextsi256_si512(a);
    }
    v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}

// 32 bytes of one or two blocks at a byte stride.
template <bool Two>
inline __m512i bytes2(const int8_t* qs, size_t stride) {
    const __m256i a = loadu256(qs);
    if constexpr (Two) {
        return _mm512_inserti64x4(_mm512_castsi256_si512(a), loadu256(qs + stride), 1);
    } else {
        return _mm512_zextsi256_si512(a);
    }
}

// ---------------------------------------------------------------------------
// Activation converters (bit-exact with core/quant_*.cpp).

void from_float_f16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<fp16_t*>(vy);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

// Integer round-to-nearest-even on the bit pattern, NaN forced quiet, as
// fp32_to_bf16 (vcvtneps2bf16 would flush subnormal inputs to zero).
inline __m256i f32_to_bf16_16(__m512 f) {
    const __m512i v = _mm512_castps_si512(f);
    const __mmask16 is_nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(v, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(64));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan));
}

void from_float_bf16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<bf16_t*>(vy);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), f32_to_bf16_16(_mm512_loadu_ps(x + i)));
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m, f32_to_bf16_16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

// std::roundf (half away from zero), exactly: truncate, then step away from
// zero where the dropped fraction is at least one half.
inline __m512 round_half_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 step = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
    return _mm512_mask_add_ps(t, up, t, step);
}

void from_float_q8_0(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_0*>(vy);
    for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(d != 0 ? 1.0f / d : 0.0f);
        const __m512i q0 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v0, id)));
        const __m512i q1 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v1, id)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16), _mm512_cvtsepi32_epi8(q1));
        y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void from_float_q8_K(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_K*>(vy);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        block_q8_K& blk = y[b];
        __m512 amax = _mm512_setzero_ps();
        for (int i = 0; i < QK_K; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
        const float am = _mm512_reduce_max_ps(amax);
        if (!(am > 0)) {
            std::memset(&blk, 0, sizeof(blk));
            continue;
        }
        // The reference maps the FIRST element of largest magnitude to -127.
        const __m512 vam = _mm512_set1_ps(am);
        int first = 0;
        for (int i = 0; i < QK_K; i += 16) {
            const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + i)), vam, _CMP_EQ_OQ);
            if (m) {
                first = i + std::countr_zero(static_cast<unsigned>(m));
                break;
            }
        }
        const float iscale = -127.0f / x[first];
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int i = 0; i < QK_K; i += 16) {
            // cvtps rounds to nearest even, like lrintf in the reference.
            const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + i))),
                                               _mm512_set1_epi32(127));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs + i), _mm512_cvtsepi32_epi8(q));
            blk.bsums[i / 16] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
        }
        blk.d = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------------------
// Float formats: 64 elements per step in four accumulators, masked tails.

inline __mmask16 tail_mask16(int64_t r) { return static_cast<__mmask16>((1u << r) - 1); }

inline float sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

void vec_dot_f32(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = static_cast<const float*>(vx);
    const float* y = static_cast<const float*>(vy);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int k = 0; k < 4; ++k) {
            acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * k), _mm512_loadu_ps(y + i + 16 * k), acc[k]);
        }
    }
    for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc[0]);
    if (i < n) {
        const __mmask16 m = tail_mask16(n - i);
        acc[1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc[1]);
    }
    *s = sum4(acc[0], acc[1], acc[2], acc[3]);
}

inline __m512 f16x16(__m256i h) { return _mm512_cvtph_ps(h); }
inline __m512 bf16x16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// F16, and BF16 without the BF16 extension: widen 16 halves to float, FMA.
template <__m512 (*Widen)(__m256i)>
void vec_dot_half(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const uint16_t*>(vx);
    const auto* y = static_cast<const uint16_t*>(vy);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int k = 0; k < 4; ++k) {
            acc[k] = _mm512_fmadd_ps(Widen(loadu256(x + i + 16 * k)), Widen(loadu256(y + i + 16 * k)), acc[k]);
        }
    }
    for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(Widen(loadu256(x + i)), Widen(loadu256(y + i)), acc[0]);
    if (i < n) {
        const __mmask16 m = tail_mask16(n - i);
        acc[1] = _mm512_fmadd_ps(Widen(_mm256_maskz_loadu_epi16(m, x + i)), Widen(_mm256_maskz_loadu_epi16(m, y + i)), acc[1]);
    }
    *s = sum4(acc[0], acc[1], acc[2], acc[3]);
}

#if KILN_HAVE_BF16
// BF16 with vdpbf16ps: 32 pairs per instruction, products exact in float.
// (It treats subnormal inputs as zero; bf16 weights and activations of
// real models are normal numbers.)
inline __m512bh as_bh(__m512i v) { return std::bit_cast<__m512bh>(v); }

void vec_dot_bf16_dp(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const uint16_t*>(vx);
    const auto* y = static_cast<const uint16_t*>(vy);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        for (int k = 0; k < 4; ++k) {
            acc[k] = _mm512_dpbf16_ps(acc[k], as_bh(loadu512(x + i + 32 * k)), as_bh(loadu512(y + i + 32 * k)));
        }
    }
    for (; i + 32 <= n; i += 32) acc[0] = _mm512_dpbf16_ps(acc[0], as_bh(loadu512(x + i)), as_bh(loadu512(y + i)));
    if (i < n) {
        const __mmask32 m = static_cast<__mmask32>((1ull << (n - i)) - 1);
        acc[1] = _mm512_dpbf16_ps(acc[1], as_bh(_mm512_maskz_loadu_epi16(m, x + i)), as_bh(_mm512_maskz_loadu_epi16(m, y + i)));
    }
    *s = sum4(acc[0], acc[1], acc[2], acc[3]);
}
#endif

// ---------------------------------------------------------------------------
// 32-element blocks against Q8_0, two blocks per register.
// PairDot<Two>(x, y) returns the int32 partial sums of blocks x[0], x[1]
// (lanes 0-7 and 8-15). Eight blocks at a time, their eight scale products
// are gathered and converted at once and spread to the block pairs with vpermps.

template <typename BX, typename PairDot>
inline float dot_blocks(int64_t nb, const BX* x, const block_q8_0* y, PairDot dot) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const __m512i spread[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
        _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
        _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7),
    };
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        const __m256 d8 = _mm256_mul_ps(_mm256_cvtph_ps(scales8_fp16<sizeof(BX)>(x + b)),
                                        _mm256_cvtph_ps(scales8_fp16<sizeof(block_q8_0)>(y + b)));
        const __m512 d = _mm512_castps256_ps512(d8);
        for (int p = 0; p < 4; ++p) {
            const __m512i isum = dot.template operator()<true>(x + b + 2 * p, y + b + 2 * p);
            acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_permutexvar_ps(spread[p], d), acc[p]);
        }
    }
    for (; b + 2 <= nb; b += 2) {
        const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(h2f(x[b].d) * h2f(y[b].d)),
                                            _mm256_set1_ps(h2f(x[b + 1].d) * h2f(y[b + 1].d)), 1);
        acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot.template operator()<true>(x + b, y + b)), d, acc[0]);
    }
    if (b < nb) {
        const __m512 d = _mm512_set1_ps(h2f(x[b].d) * h2f(y[b].d));  // upper lanes are zero sums
        acc[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot.template operator()<false>(x + b, y + b)), d, acc[1]);
    }
    return sum4(acc[0], acc[1], acc[2], acc[3]);
}

template <bool Vnni>
void vec_dot_q4_0(int64_t n, float* s, const void* vx, const void* vy) {
    const auto dot = []<bool Two>(const block_q4_0* x, const block_q8_0* y) {
        return dot_u8s8_offset<Vnni>(nibbles2<Two>(x->qs, sizeof(block_q4_0)), bytes2<Two>(y->qs, sizeof(block_q8_0)),
                                     _mm512_set1_epi8(8));
    };
    *s = dot_blocks(n / QK4_0, static_cast<const block_q4_0*>(vx), static_cast<const block_q8_0*>(vy), dot);
}

#if KILN_HAVE_VNNI
// Q8_0 x Q8_0 with 256-bit VNNI, one block per register: the weights are
// already bytes, so pairing blocks in 512-bit registers only adds two lane
// inserts per pair (port 5); |w| * (a * sign(w)) with vpsignb + one vpdpbusd
// is one instruction shorter than the AVX2 kernel's maddubs + madd. The
// scales are gathered by scalar loads here: for 34-byte blocks the vpermt2w
// gather needs eight cache-line-splitting 64-byte loads per eight blocks,
// measured slower. (On the development machine, a virtualised Sapphire
// Rapids, this kernel and the AVX2 one run at the same speed.)
void vec_dot_q8_0_vnni256(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q8_0*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    const int64_t nb = n / QK8_0;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const auto block = [&](int64_t b) {
        const __m256i w = loadu256(x[b].qs);
        const __m256i sa = _mm256_sign_epi8(loadu256(y[b].qs), w);
        return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), sa));
    };
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        alignas(32) float d[8];
        _mm256_store_ps(d, _mm256_mul_ps(load8_fp16(&x[b].d, sizeof(block_q8_0)), load8_fp16(&y[b].d, sizeof(block_q8_0))));
        for (int k = 0; k < 8; ++k) acc[k % 4] = _mm256_fmadd_ps(block(b + k), _mm256_broadcast_ss(&d[k]), acc[k % 4]);
    }
    for (; b < nb; ++b) acc[0] = _mm256_fmadd_ps(block(b), _mm256_set1_ps(h2f(x[b].d) * h2f(y[b].d)), acc[0]);
    const __m256 t = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    *s = hsum(_mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
}
#endif

template <bool Vnni>
void vec_dot_iq4_nl(int64_t n, float* s, const void* vx, const void* vy) {
    const auto dot = []<bool Two>(const block_iq4_nl* x, const block_q8_0* y) {
        const __m512i table = _mm512_broadcast_i32x4(loadu128(kvalues_iq4nl));
        const __m512i w = _mm512_shuffle_epi8(table, nibbles2<Two>(x->qs, sizeof(block_iq4_nl)));
        return dot_s8s8<Vnni>(w, bytes2<Two>(y->qs, sizeof(block_q8_0)));
    };
    *s = dot_blocks(n / QK4_NL, static_cast<const block_iq4_nl*>(vx), static_cast<const block_q8_0*>(vy), dot);
}

// ---------------------------------------------------------------------------
// K-quants against Q8_K.

// v, or its upper 8 bytes moved down when g is 1 (a shift by a
// run-time count: _mm_srli_si128 needs a compile-time constant).
inline __m128i upper_half_if(__m128i v, int g) { return g ? _mm_unpackhi_epi64(v, v) : v; }

// Q4_K / Q5_K 6-bit scales and mins (layout: k4_scale_min in
// core/quant_blocks.h), unpacked in 32-bit lanes: returns bytes 0-7 = scales
// of sub-blocks 0-7, bytes 8-15 = mins. With w0..w2 the packed words:
//   scales 0-3 = w0 & 0x3f..,  scales 4-7 = (w2 & 0x0f..) | ((w0 >> 2) & 0x30..)
//   mins 0-3   = w1 & 0x3f..,  mins 4-7   = ((w2 >> 4) & 0x0f..) | ((w1 >> 2) & 0x30..)
// The 16-byte load reads 4 bytes of qs past the 12 scale bytes (same block).
inline __m128i k4_scales_mins(const uint8_t* p) {
    const __m128i v = loadu128(p);
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // w0 w2 w1 w2
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // w0 w0 w1 w1
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

// Sum over the eight 32-element sub-blocks of m_j * (bsums[2j] + bsums[2j+1]), as 4 int32.
inline __m128i k4_min_terms(const int16_t* bsums, __m128i mins8) {
    const __m128i pairs = _mm_hadd_epi16(loadu128(bsums), loadu128(bsums + 8));
    return _mm_madd_epi16(pairs, _mm_cvtepu8_epi16(mins8));
}

// pshufb patterns selecting an int16 scale per 256-bit half (32-element
// sub-blocks j, j+1) or per 128-bit lane (16-element sub-blocks base..base+3)
// out of eight int16 scales broadcast to every lane.
inline __m512i half_pattern(int j) {
    const int lo = (2 * j) | ((2 * j + 1) << 8), hi = (2 * j + 2) | ((2 * j + 3) << 8);
    return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(lo)), _mm256_set1_epi16(static_cast<short>(hi)), 1);
}
inline __m512i lane_pattern(int base) {
    auto w = [](int k) { return static_cast<short>((2 * k) | ((2 * k + 1) << 8)); };
    const __m128i l0 = _mm_set1_epi16(w(base)), l1 = _mm_set1_epi16(w(base + 1));
    const __m128i l2 = _mm_set1_epi16(w(base + 2)), l3 = _mm_set1_epi16(w(base + 3));
    const __m512i v = _mm512_castsi128_si512(l0);
    return _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(v, l1, 1), l2, 2), l3, 3);
}

// Two 32-element sub-blocks of Q4_K/Q5_K low nibbles: 32 bytes of qs broadcast
// to both halves, low nibbles (sub-block 2i) first, high (2i+1) second.
inline __m512i k4_nibbles(const uint8_t* q) {
    const __m512i v = _mm512_broadcast_i64x4(loadu256(q));
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(0x0F));
}

void vec_dot_q4_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float dy = y[b].d;
        const __m128i sm = k4_scales_mins(x[b].scales);
        accm = _mm_fmadd_ps(_mm_set1_ps(dy * h2f(x[b].dmin)), _mm_cvtepi32_ps(k4_min_terms(y[b].bsums, _mm_srli_si128(sm, 8))), accm);
        const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
        __m512i isum = _mm512_setzero_si512();
        for (int i = 0; i < 4; ++i) {
            const __m512i prod = _mm512_maddubs_epi16(k4_nibbles(x[b].qs + 32 * i), loadu512(y[b].qs + 64 * i));
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, _mm512_shuffle_epi8(scales, half_pattern(2 * i))));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(dy * h2f(x[b].d)), _mm512_cvtepi32_ps(isum), acc);
    }
    *s = _mm512_reduce_add_ps(acc) - hsum(accm);
}

void vec_dot_q5_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const __m512i sixteen = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float dy = y[b].d;
        const __m128i sm = k4_scales_mins(x[b].scales);
        accm = _mm_fmadd_ps(_mm_set1_ps(dy * h2f(x[b].dmin)), _mm_cvtepi32_ps(k4_min_terms(y[b].bsums, _mm_srli_si128(sm, 8))), accm);
        const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
        // Bit j of qh[l] is bit 4 of element 32 j + l.
        const __m512i qh = _mm512_broadcast_i64x4(loadu256(x[b].qh));
        __m512i isum = _mm512_setzero_si512();
        for (int i = 0; i < 4; ++i) {
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * i))),
                                                   _mm256_set1_epi8(static_cast<char>(1 << (2 * i + 1))), 1);
            const __mmask64 high = _mm512_test_epi8_mask(qh, bit);
            const __m512i w = _mm512_mask_add_epi8(k4_nibbles(x[b].qs + 32 * i), high, k4_nibbles(x[b].qs + 32 * i), sixteen);
            const __m512i prod = _mm512_maddubs_epi16(w, loadu512(y[b].qs + 64 * i));
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(prod, _mm512_shuffle_epi8(scales, half_pattern(2 * i))));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(dy * h2f(x[b].d)), _mm512_cvtepi32_ps(isum), acc);
    }
    *s = _mm512_reduce_add_ps(acc) - hsum(accm);
}

// Q6_K: u = low4 | high2 << 4 in [0, 63], q = u - 32, the -32 applied through
// the block sums. Per 128-element half g: ql[64g..64g+63] holds the low
// nibbles of elements 0-63 (low nibbles) and 64-127 (high nibbles); qh byte l
// holds the top bits of elements l, l+32, l+64, l+96 in bit pairs 0-1 .. 6-7.
void vec_dot_q6_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q6_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    const __m512i shl_a = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);  // elements 0-31 | 32-63
    const __m512i shr_b = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);  // elements 64-95 | 96-127
    const __m512i pat_a = lane_pattern(0), pat_b = lane_pattern(4);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const __m128i sc8 = loadu128(x[b].scales);
        const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(y[b].bsums), _mm256_cvtepi8_epi16(sc8)), 5);
        __m512i isum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(off));
        for (int g = 0; g < 2; ++g) {
            const __m512i scales = _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(upper_half_if(sc8, g)));
            const __m512i ql = loadu512(x[b].ql + 64 * g);
            const __m512i qh = _mm512_broadcast_i64x4(loadu256(x[b].qh + 32 * g));
            const __m512i ua = _mm512_ternarylogic_epi64(_mm512_and_si512(ql, low4), _mm512_sllv_epi64(qh, shl_a), bits45, 0xF8);
            const __m512i ub = _mm512_ternarylogic_epi64(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                                         _mm512_srlv_epi64(qh, shr_b), bits45, 0xF8);
            const __m512i pa = _mm512_maddubs_epi16(ua, loadu512(y[b].qs + 128 * g));
            const __m512i pb = _mm512_maddubs_epi16(ub, loadu512(y[b].qs + 128 * g + 64));
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(pa, _mm512_shuffle_epi8(scales, pat_a)));
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(pb, _mm512_shuffle_epi8(scales, pat_b)));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[b].d * h2f(x[b].d)), _mm512_cvtepi32_ps(isum), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

// ---------------------------------------------------------------------------

void from_float_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); }

constexpr TypeKernels kF32{Type::F32, from_float_f32, vec_dot_f32};
constexpr TypeKernels kF16{Type::F16, from_float_f16, vec_dot_half<f16x16>};
constexpr TypeKernels kBF16{Type::BF16, from_float_bf16, vec_dot_half<bf16x16>};
constexpr TypeKernels kQ4_0{Type::Q8_0, from_float_q8_0, vec_dot_q4_0<false>};
constexpr TypeKernels kIQ4_NL{Type::Q8_0, from_float_q8_0, vec_dot_iq4_nl<false>};
constexpr TypeKernels kQ4_K{Type::Q8_K, from_float_q8_K, vec_dot_q4_K};
constexpr TypeKernels kQ5_K{Type::Q8_K, from_float_q8_K, vec_dot_q5_K};
constexpr TypeKernels kQ6_K{Type::Q8_K, from_float_q8_K, vec_dot_q6_K};
#if KILN_HAVE_VNNI
constexpr TypeKernels kQ4_0_vnni{Type::Q8_0, from_float_q8_0, vec_dot_q4_0<true>};
constexpr TypeKernels kQ8_0_vnni{Type::Q8_0, from_float_q8_0, vec_dot_q8_0_vnni256};
constexpr TypeKernels kIQ4_NL_vnni{Type::Q8_0, from_float_q8_0, vec_dot_iq4_nl<true>};
#endif
#if KILN_HAVE_BF16
constexpr TypeKernels kBF16_dp{Type::BF16, from_float_bf16, vec_dot_bf16_dp};
#endif

}  // namespace

// Types not listed here use the AVX2 kernels (see kernels() in cpu_features.cpp).
const TypeKernels* avx512_kernels(Type t, const CpuFeatures& f) {
    [[maybe_unused]] const bool vnni = f.avx512vnni;
    switch (t) {
        case Type::F32: return &kF32;
        case Type::F16: return &kF16;
        case Type::BF16:
#if KILN_HAVE_BF16
            if (f.avx512bf16) return &kBF16_dp;
#endif
            return &kBF16;
        case Type::Q4_0:
#if KILN_HAVE_VNNI
            if (vnni) return &kQ4_0_vnni;
#endif
            return &kQ4_0;
        case Type::Q8_0:
#if KILN_HAVE_VNNI
            if (vnni) return &kQ8_0_vnni;
#endif
            return nullptr;  // without VNNI the AVX2 kernel is as fast
        case Type::IQ4_NL:
#if KILN_HAVE_VNNI
            if (vnni) return &kIQ4_NL_vnni;
#endif
            return &kIQ4_NL;
        case Type::Q4_K: return &kQ4_K;
        case Type::Q5_K: return &kQ5_K;
        case Type::Q6_K: return &kQ6_K;
        default: return nullptr;
    }
}

}  // namespace kiln::cpu::detail
