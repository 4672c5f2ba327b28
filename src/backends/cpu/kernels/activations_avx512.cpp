// AVX-512 activations with a vectorised exp (Cephes-style: e^x = 2^n e^r, |r| <= ln2/2,
// degree-6 polynomial, 2^n applied with vscalefps so under/overflow behave like expf).
#include <immintrin.h>

#include "backends/cpu/kernels/activations.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 AVX-512 headers (bug 105593)
#endif

namespace kiln::cpu {
namespace {

inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.72283f));
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
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

inline __m512 silu16(__m512 x) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// 0.5 x (1 + tanh(u)) with tanh(u) = 1 - 2 / (e^{2u} + 1).
inline __m512 gelu16(__m512 x) {
    const __m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), x),
                                   _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), x, _mm512_set1_ps(1.0f)));
    const __m512 e = exp16(_mm512_add_ps(u, u));
    const __m512 th = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), th));
}

template <__m512 (*F)(__m512)>
void unary(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

template <__m512 (*F)(__m512)>
void gated(const float* g, const float* u, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(F(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(F(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

constexpr ActivationKernels kAvx512{.silu = unary<silu16>, .gelu_tanh = unary<gelu16>, .swiglu = gated<silu16>, .geglu = gated<gelu16>};

}  // namespace

namespace detail {
const ActivationKernels* activations_avx512() { return &kAvx512; }
}  // namespace detail

}  // namespace kiln::cpu
