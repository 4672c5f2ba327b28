// Element-wise activation kernels (SiLU, GELU-tanh and their gated forms), one table per
// instruction set like the dot products: the scalar file is the reference (std::exp /
// std::tanh), the SIMD files use a vectorised exp accurate to about 2 ulp. Prompt processing
// applies them to n_ff x n_tokens values per layer, where libm calls would cost as much as a
// matmul.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernels.h"

namespace kiln::cpu {

struct ActivationKernels {
    void (*silu)(const float* x, float* y, int64_t n);
    void (*gelu_tanh)(const float* x, float* y, int64_t n);
    void (*swiglu)(const float* g, const float* u, float* y, int64_t n);  // y = silu(g) * u
    void (*geglu)(const float* g, const float* u, float* y, int64_t n);   // y = gelu_tanh(g) * u
};

// The set for isa (falls back to the scalar reference where a set has none).
const ActivationKernels& activation_kernels(Isa isa);
inline const ActivationKernels& activation_kernels() { return activation_kernels(selected_isa()); }

namespace detail {
#if defined(KILN_ARCH_X86)
const ActivationKernels* activations_avx2();
const ActivationKernels* activations_avx512();
#endif
}  // namespace detail

}  // namespace kiln::cpu
