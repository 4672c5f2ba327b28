// Scalar reference activations and the run-time choice of the activation kernels.
#include <cmath>

#include "backends/cpu/kernels/activations.h"

namespace kiln::cpu {
namespace {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float gelu_tanh(float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

void silu_rows(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = silu(x[i]);
}
void gelu_rows(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]);
}
void swiglu_rows(const float* g, const float* u, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = silu(g[i]) * u[i];
}
void geglu_rows(const float* g, const float* u, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(g[i]) * u[i];
}

constexpr ActivationKernels kScalar{.silu = silu_rows, .gelu_tanh = gelu_rows, .swiglu = swiglu_rows, .geglu = geglu_rows};

}  // namespace

const ActivationKernels& activation_kernels(Isa isa) {
#if defined(KILN_ARCH_X86)
    if (isa == Isa::Avx512) return *detail::activations_avx512();
    if (isa == Isa::Avx2) return *detail::activations_avx2();
#endif
    (void)isa;
    return kScalar;
}

}  // namespace kiln::cpu
