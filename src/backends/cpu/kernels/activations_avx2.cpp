// AVX2 activations with a vectorised exp (exp_avx2.h; as the AVX-512 file, 2^n is built in the
// exponent bits, so x is clamped to the normal range: e^x for x < -87.3 comes out as about 1e-38
// instead of smaller, which no activation here can tell apart from 0).
#include <immintrin.h>

#include "backends/cpu/kernels/activations.h"
#include "backends/cpu/kernels/exp_avx2.h"

namespace kiln::cpu {
namespace {

inline __m256 silu8(__m256 x) {
    const __m256 e = exp8_clamped(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline __m256 gelu8(__m256 x) {
    const __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), x),
                                   _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), x, _mm256_set1_ps(1.0f)));
    const __m256 e = exp8_clamped(_mm256_add_ps(u, u));
    const __m256 th = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), th));
}

// Scalar tails go through a padded 8-lane buffer so every element takes the same formula.
template <__m256 (*F)(__m256)>
void unary(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));
    if (i < n) {
        alignas(32) float buf[8] = {};
        for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
        _mm256_store_ps(buf, F(_mm256_load_ps(buf)));
        for (int64_t j = i; j < n; ++j) y[j] = buf[j - i];
    }
}

template <__m256 (*F)(__m256)>
void gated(const float* g, const float* u, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(F(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    if (i < n) {
        alignas(32) float buf[8] = {};
        for (int64_t j = i; j < n; ++j) buf[j - i] = g[j];
        _mm256_store_ps(buf, F(_mm256_load_ps(buf)));
        for (int64_t j = i; j < n; ++j) y[j] = buf[j - i] * u[j];
    }
}

constexpr ActivationKernels kAvx2{.silu = unary<silu8>, .gelu_tanh = unary<gelu8>, .swiglu = gated<silu8>, .geglu = gated<gelu8>};

}  // namespace

namespace detail {
const ActivationKernels* activations_avx2() { return &kAvx2; }
}  // namespace detail

}  // namespace kiln::cpu
