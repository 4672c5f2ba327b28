// e^x for 8 floats with AVX2 + FMA, shared by the AVX2 activations and attention kernels.
// Only included by files compiled for AVX2.
#pragma once

#include <immintrin.h>

namespace kiln::cpu {

// e^x with x clamped to [-87.33654, 88.3762626647949] first: 2^n is built in the exponent bits,
// so x below the normal range gives about 1.2e-38 (not a smaller value or 0) and x above it inf.
// Cody-Waite reduction by n ln 2 (two constants), then a degree-6 polynomial: within 2 ulp of libm
// over the clamped range (tests/test_attn_kernels.cpp).
inline __m256 exp8_clamped(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.3762626647949f));
    // n = round(x / ln 2) by adding 1.5 * 2^23 + 127 (one fma): the sum's ulp is 1, so its low
    // mantissa bits hold n + 127, which is 2^n's exponent field (no round, no conversion to int).
    // bench_kernels attn_tg1_kv4096/f16/k_panels/avx2/t1, Zen 3, 5 alternated runs (with vroundps
    // and vcvtps2dq -> this): 518-550 -> 490-543 us; attn_pp512_kv512 18392-18985 -> 18049-19103.
    const __m256 magic = _mm256_set1_ps(12583039.0f);
    const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
    const __m256 n = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    // 2^n in the exponent field; n is in [-126, 128] after the clamp (128 gives inf).
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(t), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

}  // namespace kiln::cpu
