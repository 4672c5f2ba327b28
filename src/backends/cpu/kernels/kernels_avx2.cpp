// AVX2 + FMA + F16C dot-product kernels (compiled with -mavx2 -mfma -mf16c;
// only called once cpu_features.cpp has found all three on the CPU).
//
// Integer kernels multiply 8-bit quants with _mm256_maddubs_epi16 (unsigned x
// signed bytes -> pairwise int16 sums) and widen with _mm256_madd_epi16. The
// unsigned operand is the weight when it is stored unsigned (Q4_1, Q5_1,
// K-quants: their offsets are applied through the activations' block sums);
// signed weights use the sign trick |w| * (a * sign(w)). No int16 pair sum
// can saturate: the largest is 2 * 127 * 127 (Q8_0, IQ4_NL) < 32767.
//
// Per-block float scales of the 32-element formats are converted eight
// blocks at a time (one vcvtph2ps) and broadcast from memory, which costs
// one load per block instead of a scalar fp16 conversion chain.
//
// The activation converters are bit-exact with the reference quantizers
// (same float operations, same rounding), so every ISA feeds identical
// activations to its dot products.

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "backends/cpu/kernels/kernels.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"

namespace kiln::cpu::detail {

const TypeKernels* avx2_kernels(Type t, const CpuFeatures& f);

namespace {

// ---------------------------------------------------------------------------
// Helpers.

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hsum(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline uint16_t load_u16(const void* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

inline float h2f(fp16_t h) { return _cvtsh_ss(h); }

// Eight fp16 values at a byte stride (the scales of eight consecutive blocks).
inline __m256 load8_fp16(const void* base, size_t stride) {
    const auto* p = static_cast<const uint8_t*>(base);
    const __m128i h = _mm_setr_epi16(
        static_cast<short>(load_u16(p)), static_cast<short>(load_u16(p + stride)),
        static_cast<short>(load_u16(p + 2 * stride)), static_cast<short>(load_u16(p + 3 * stride)),
        static_cast<short>(load_u16(p + 4 * stride)), static_cast<short>(load_u16(p + 5 * stride)),
        static_cast<short>(load_u16(p + 6 * stride)), static_cast<short>(load_u16(p + 7 * stride)));
    return _mm256_cvtph_ps(h);
}

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) then
// high nibbles (16..31), the order of the 32-element formats.
inline __m256i unpack_nibbles(const uint8_t* qs) {
    const __m128i x = loadu128(qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// Eight int32 partial sums of u[i] * s[i] (u unsigned, s signed bytes).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// Same for two signed operands; |a| <= 127 (w may be -128: |-128| read as unsigned is 128).
inline __m256i dot_s8s8(__m256i w, __m256i a) {
    return dot_u8s8(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
}

// 0xFF in byte j where bit j of the 32-bit little-endian mask qh is set (Q5 high bits).
inline __m256i expand_bits32(const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, sizeof(h));
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)), shuf), bits);
    return _mm256_cmpeq_epi8(v, bits);
}

// ---------------------------------------------------------------------------
// Activation converters (bit-exact with core/quant_*.cpp).

void from_float_f16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<fp16_t*>(vy);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// Round to nearest even on the bit pattern, NaN forced quiet: as fp32_to_bf16.
void from_float_bf16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<bf16_t*>(vy);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(64);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i v = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs_mask), inf);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(v, 16), one);
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(v, _mm256_add_epi32(bias, lsb)), 16);
        const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(v, 16), quiet);
        const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                         _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
    for (; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

// std::roundf (half away from zero), exactly: truncate, then step away from
// zero when the dropped fraction is at least one half.
inline __m256 round_half_away(__m256 v) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(v, t));
    const __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign_bit));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step));
}

// Four vectors of 8 int32 (each in [-128, 127]) -> 32 int8 in element order.
inline __m256i pack_i32x32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b);  // per 128-bit lane: a0-3 b0-3 | a4-7 b4-7
    const __m256i cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

// One 32-element block as quantize_row_q8_0 / q8_1 do it: writes the quants,
// returns their sum and (in d) the unrounded float scale.
inline int quantize_block_q8(const float* x, float& d, int8_t* qs) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, abs_ps(v[k]));
    }
    d = hmax(amax) / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[k], vid)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
    const __m256i sum4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

void from_float_q8_0(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_0*>(vy);
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        float d;
        quantize_block_q8(x + b * QK8_0, d, y[b].qs);
        y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void from_float_q8_1(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_1*>(vy);
    for (int64_t b = 0; b < n / QK8_1; ++b) {
        float d;
        const int sum = quantize_block_q8(x + b * QK8_1, d, y[b].qs);
        y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[b].s = _cvtss_sh(static_cast<float>(sum) * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void from_float_q8_K(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_K*>(vy);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        block_q8_K& blk = y[b];
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < QK_K; i += 8) amax = _mm256_max_ps(amax, abs_ps(_mm256_loadu_ps(x + i)));
        const float am = hmax(amax);
        if (!(am > 0)) {
            std::memset(&blk, 0, sizeof(blk));
            continue;
        }
        // The reference maps the FIRST element of largest magnitude to -127.
        const __m256 vam = _mm256_set1_ps(am);
        int first = 0;
        for (int i = 0; i < QK_K; i += 8) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + i)), vam, _CMP_EQ_OQ));
            if (m) {
                first = i + std::countr_zero(static_cast<unsigned>(m));
                break;
            }
        }
        const float iscale = -127.0f / x[first];
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i max127 = _mm256_set1_epi32(127);
        for (int i = 0; i < QK_K; i += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; ++k) {
                // cvtps rounds to nearest even, like lrintf in the reference.
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + i + 8 * k))), max127);
            }
            const __m256i q8 = pack_i32x32_to_i8(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs + i), q8);
            // Sums of 4 bytes, then of 16: lane 0 of each 128-bit half.
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q8), ones16);
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            blk.bsums[i / 16] = static_cast<int16_t>(_mm256_extract_epi32(s, 0));
            blk.bsums[i / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(s, 4));
        }
        blk.d = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------------------
// Float formats: 32 elements per step in four independent accumulators.

void vec_dot_f32(int64_t n, float* s, const void* vx, const void* vy) {
    const float* x = static_cast<const float*>(vx);
    const float* y = static_cast<const float*>(vy);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; ++k) {
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
        }
    }
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    float tail = 0;
    for (; i < n; ++i) tail += x[i] * y[i];
    *s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) + tail;
}

inline __m256 load_f16(const fp16_t* p) { return _mm256_cvtph_ps(loadu128(p)); }
inline __m256 load_bf16(const bf16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

template <__m256 (*Load)(const uint16_t*), float (*Scalar)(uint16_t)>
void vec_dot_half(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const uint16_t*>(vx);
    const auto* y = static_cast<const uint16_t*>(vy);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(Load(x + i + 8 * k), Load(y + i + 8 * k), acc[k]);
    }
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(Load(x + i), Load(y + i), acc[0]);
    float tail = 0;
    for (; i < n; ++i) tail += Scalar(x[i]) * Scalar(y[i]);
    *s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) + tail;
}

float f16_scalar(uint16_t h) { return fp16_to_fp32(h); }
float bf16_scalar(uint16_t h) { return bf16_to_fp32(h); }

// ---------------------------------------------------------------------------
// 32-element blocks. BlockDot(x, y) returns the block's integer dot product
// as eight int32 partial sums; the driver scales them by d_x * d_y.

template <typename BX, typename BY, typename BlockDot>
inline __m256 dot_blocks(int64_t nb, const BX* x, const BY* y, BlockDot dot) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        alignas(32) float ds[8];
        _mm256_store_ps(ds, _mm256_mul_ps(load8_fp16(&x[b].d, sizeof(BX)), load8_fp16(&y[b].d, sizeof(BY))));
        for (int k = 0; k < 8; ++k) {
            acc[k % 4] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot(x[b + k], y[b + k])), _mm256_broadcast_ss(&ds[k]),
                                         acc[k % 4]);
        }
    }
    for (; b < nb; ++b) {
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot(x[b], y[b])), _mm256_set1_ps(h2f(x[b].d) * h2f(y[b].d)), acc[0]);
    }
    return _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
}

// sum over blocks of m_x * s_y: the offset term of Q4_1 / Q5_1 against Q8_1.
template <typename BX>
inline float offset_terms(int64_t nb, const BX* x, const block_q8_1* y) {
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        acc = _mm256_fmadd_ps(load8_fp16(&x[b].m, sizeof(BX)), load8_fp16(&y[b].s, sizeof(block_q8_1)), acc);
    }
    float tail = 0;
    for (; b < nb; ++b) tail += h2f(x[b].m) * h2f(y[b].s);
    return hsum(acc) + tail;
}

void vec_dot_q4_0(int64_t n, float* s, const void* vx, const void* vy) {
    const __m256i eight = _mm256_set1_epi8(8);
    const auto dot = [&](const block_q4_0& x, const block_q8_0& y) {
        return dot_s8s8(_mm256_sub_epi8(unpack_nibbles(x.qs), eight), loadu256(y.qs));
    };
    *s = hsum(dot_blocks(n / QK4_0, static_cast<const block_q4_0*>(vx), static_cast<const block_q8_0*>(vy), dot));
}

void vec_dot_q4_1(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    const auto dot = [](const block_q4_1& xb, const block_q8_1& yb) { return dot_u8s8(unpack_nibbles(xb.qs), loadu256(yb.qs)); };
    *s = hsum(dot_blocks(n / QK4_1, x, y, dot)) + offset_terms(n / QK4_1, x, y);
}

void vec_dot_q5_0(int64_t n, float* s, const void* vx, const void* vy) {
    const __m256i sixteen = _mm256_set1_epi8(16);
    const auto dot = [&](const block_q5_0& x, const block_q8_0& y) {
        // q - 16 + 16 * hbit = nibble - (hbit ? 0 : 16)
        const __m256i w = _mm256_sub_epi8(unpack_nibbles(x.qs), _mm256_andnot_si256(expand_bits32(x.qh), sixteen));
        return dot_s8s8(w, loadu256(y.qs));
    };
    *s = hsum(dot_blocks(n / QK5_0, static_cast<const block_q5_0*>(vx), static_cast<const block_q8_0*>(vy), dot));
}

void vec_dot_q5_1(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    const __m256i sixteen = _mm256_set1_epi8(16);
    const auto dot = [&](const block_q5_1& xb, const block_q8_1& yb) {
        const __m256i w = _mm256_or_si256(unpack_nibbles(xb.qs), _mm256_and_si256(expand_bits32(xb.qh), sixteen));
        return dot_u8s8(w, loadu256(yb.qs));
    };
    *s = hsum(dot_blocks(n / QK5_1, x, y, dot)) + offset_terms(n / QK5_1, x, y);
}

void vec_dot_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
    const auto dot = [](const block_q8_0& x, const block_q8_0& y) { return dot_s8s8(loadu256(x.qs), loadu256(y.qs)); };
    *s = hsum(dot_blocks(n / QK8_0, static_cast<const block_q8_0*>(vx), static_cast<const block_q8_0*>(vy), dot));
}

void vec_dot_iq4_nl(int64_t n, float* s, const void* vx, const void* vy) {
    const __m256i table = _mm256_broadcastsi128_si256(loadu128(kvalues_iq4nl));
    const auto dot = [&](const block_iq4_nl& x, const block_q8_0& y) {
        return dot_s8s8(_mm256_shuffle_epi8(table, unpack_nibbles(x.qs)), loadu256(y.qs));
    };
    *s = hsum(dot_blocks(n / QK4_NL, static_cast<const block_iq4_nl*>(vx), static_cast<const block_q8_0*>(vy), dot));
}

// ---------------------------------------------------------------------------
// K-quants against Q8_K.
//
// Sub-block scales multiply int16 pair sums with _mm256_madd_epi16. For the
// 16-element sub-blocks (Q2_K, Q3_K, Q6_K) one 32-byte step covers two
// sub-blocks, one per 128-bit lane, so the scale vector holds scale 2p in the
// low lane and 2p+1 in the high lane: pshufb of the eight int16 scales
// (broadcast to both lanes) with pair_pattern(p).

inline __m256i pair_pattern(int p) {
    const short lo = static_cast<short>((4 * p) | ((4 * p + 1) << 8));
    const short hi = static_cast<short>((4 * p + 2) | ((4 * p + 3) << 8));
    return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
}
// For the 32-element sub-blocks (Q4_K, Q5_K): int16 scale j in every lane.
inline __m256i single_pattern(int j) { return _mm256_set1_epi16(static_cast<short>((2 * j) | ((2 * j + 1) << 8))); }

// Bit j of every byte moved to bit `to` (other bits cleared).
inline __m256i bit_to(__m256i v, int j, int to) {
    const __m256i moved = j >= to ? _mm256_srli_epi16(v, j - to) : _mm256_slli_epi16(v, to - j);
    return _mm256_and_si256(moved, _mm256_set1_epi8(static_cast<char>(1 << to)));
}

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

// Q3_K's sixteen 6-bit scales (offset 32 removed), as int8.
inline __m128i q3_scales(const uint8_t* p) {
    uint32_t w[3];
    std::memcpy(w, p, sizeof(w));
    // Low nibbles: scales 0-7 in the low nibbles of bytes 0-7, 8-15 in their high nibbles.
    const uint32_t low[4] = {w[0] & 0x0f0f0f0fu, w[1] & 0x0f0f0f0fu, (w[0] >> 4) & 0x0f0f0f0fu, (w[1] >> 4) & 0x0f0f0f0fu};
    // High 2 bits of scale 4k+i: bits 2k..2k+1 of byte 8+i.
    uint32_t v[4];
    for (int k = 0; k < 4; ++k) v[k] = low[k] | (((w[2] >> (2 * k)) & 0x03030303u) << 4);
    const __m128i u = _mm_setr_epi32(static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]), static_cast<int>(v[3]));
    return _mm_sub_epi8(u, _mm_set1_epi8(32));
}

// Sum over the eight 32-element sub-blocks of m_j * (bsums[2j] + bsums[2j+1]), as 4 int32.
inline __m128i k4_min_terms(const int16_t* bsums, __m128i mins8) {
    const __m128i pairs = _mm_hadd_epi16(loadu128(bsums), loadu128(bsums + 8));
    return _mm_madd_epi16(pairs, _mm_cvtepu8_epi16(mins8));
}

void vec_dot_q4_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float dy = y[b].d;
        const __m128i sm = k4_scales_mins(x[b].scales);
        accm = _mm_fmadd_ps(_mm_set1_ps(dy * h2f(x[b].dmin)), _mm_cvtepi32_ps(k4_min_terms(y[b].bsums, _mm_srli_si128(sm, 8))), accm);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const uint8_t* q = x[b].qs;
        const int8_t* a = y[b].qs;
        __m256i isum = _mm256_setzero_si256();
        for (int i = 0; i < 4; ++i) {
            const __m256i raw = loadu256(q + 32 * i);
            const __m256i lo = _mm256_and_si256(raw, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(a + 64 * i)),
                                                  _mm256_shuffle_epi8(scales, single_pattern(2 * i)));
            const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(a + 64 * i + 32)),
                                                  _mm256_shuffle_epi8(scales, single_pattern(2 * i + 1)));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(plo, phi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum(acc) - hsum(accm);
}

void vec_dot_q5_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float dy = y[b].d;
        const __m128i sm = k4_scales_mins(x[b].scales);
        accm = _mm_fmadd_ps(_mm_set1_ps(dy * h2f(x[b].dmin)), _mm_cvtepi32_ps(k4_min_terms(y[b].bsums, _mm_srli_si128(sm, 8))), accm);
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const __m256i qh = loadu256(x[b].qh);  // bit j of byte l: bit 4 of element 32 j + l
        const uint8_t* q = x[b].qs;
        const int8_t* a = y[b].qs;
        __m256i isum = _mm256_setzero_si256();
        for (int i = 0; i < 4; ++i) {
            const __m256i raw = loadu256(q + 32 * i);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(raw, low4), bit_to(qh, 2 * i, 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low4), bit_to(qh, 2 * i + 1, 4));
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(a + 64 * i)),
                                                  _mm256_shuffle_epi8(scales, single_pattern(2 * i)));
            const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(a + 64 * i + 32)),
                                                  _mm256_shuffle_epi8(scales, single_pattern(2 * i + 1)));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(plo, phi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum(acc) - hsum(accm);
}

// Q6_K: u = low4 | high2 << 4 in [0, 63], q = u - 32; the -32 is applied
// through the block sums: sum_j sc_j (sum u a - 32 bsum_j).
void vec_dot_q6_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q6_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const __m128i sc8 = loadu128(x[b].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        // Offset term: 32 * sum_j sc_j bsum_j.
        __m256i isum = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(y[b].bsums), sc16), 5);
        isum = _mm256_sub_epi32(_mm256_setzero_si256(), isum);
        const int8_t* a = y[b].qs;
        for (int g = 0; g < 2; ++g) {
            const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(upper_half_if(sc8, g)));
            const __m256i ql0 = loadu256(x[b].ql + 64 * g);
            const __m256i ql1 = loadu256(x[b].ql + 64 * g + 32);
            const __m256i qh = loadu256(x[b].qh + 32 * g);
            __m256i u[4];
            u[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45));
            u[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45));
            u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, bits45));
            u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45));
            for (int p = 0; p < 4; ++p) {
                const __m256i prod = _mm256_maddubs_epi16(u[p], loadu256(a + 128 * g + 32 * p));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(prod, _mm256_shuffle_epi8(scales, pair_pattern(p))));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * h2f(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum(acc);
}

// Q3_K: v = low2 | hbit << 2 in [0, 7], q = v - 4 (hbit set means +0, clear -4).
void vec_dot_q3_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q3_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const __m256i low2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const __m128i sc8 = q3_scales(x[b].scales);
        __m256i isum = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(y[b].bsums), _mm256_cvtepi8_epi16(sc8)), 2);
        isum = _mm256_sub_epi32(_mm256_setzero_si256(), isum);
        const __m256i hm = loadu256(x[b].hmask);  // bit j of byte l: element 32 j + l
        const int8_t* a = y[b].qs;
        for (int g = 0; g < 2; ++g) {
            const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(upper_half_if(sc8, g)));
            const __m256i q = loadu256(x[b].qs + 32 * g);
            for (int p = 0; p < 4; ++p) {
                const __m256i v = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * p), low2), bit_to(hm, 4 * g + p, 2));
                const __m256i prod = _mm256_maddubs_epi16(v, loadu256(a + 128 * g + 32 * p));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(prod, _mm256_shuffle_epi8(scales, pair_pattern(p))));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * h2f(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum(acc);
}

// Q2_K: x = d sc q - dmin m, q in [0, 3]; scales byte: low nibble sc, high nibble m.
void vec_dot_q2_K(int64_t n, float* s, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q2_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    const __m256i low2 = _mm256_set1_epi8(3);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float dy = y[b].d;
        const __m128i raw = loadu128(x[b].scales);
        const __m128i sc8 = _mm_and_si128(raw, low4);
        const __m128i m8 = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
        const __m256i mterm = _mm256_madd_epi16(loadu256(y[b].bsums), _mm256_cvtepu8_epi16(m8));
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[b].dmin)), _mm256_cvtepi32_ps(mterm), accm);
        const int8_t* a = y[b].qs;
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 2; ++g) {
            const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(upper_half_if(sc8, g)));
            const __m256i q = loadu256(x[b].qs + 32 * g);
            for (int p = 0; p < 4; ++p) {
                const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), low2);
                const __m256i prod = _mm256_maddubs_epi16(v, loadu256(a + 128 * g + 32 * p));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(prod, _mm256_shuffle_epi8(scales, pair_pattern(p))));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * h2f(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    *s = hsum(acc) - hsum(accm);
}

// ---------------------------------------------------------------------------

void from_float_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); }
constexpr TypeKernels kF32{Type::F32, from_float_f32, vec_dot_f32};
constexpr TypeKernels kF16{Type::F16, from_float_f16, vec_dot_half<load_f16, f16_scalar>};
constexpr TypeKernels kBF16{Type::BF16, from_float_bf16, vec_dot_half<load_bf16, bf16_scalar>};
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

const TypeKernels* avx2_kernels(Type t, const CpuFeatures&) {
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
