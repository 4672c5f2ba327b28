// Scalar attention kernels: the reference the SIMD tables are tested against
// (through op_attention), and the table for CPUs without one. Also the
// run-time choice of table.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "backends/cpu/kernels/attn_kernels.h"

namespace kiln::cpu {

namespace {

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, Type bt, const uint8_t* B, size_t b_stride,
          int64_t b_cols, float* C, int64_t ldc, const float* beta, const AttnPrefetch* /*pf: a hint*/) {
    for (int64_t r = 0; r < M; ++r) {
        float* c = C + r * ldc;
        const float b0 = beta ? beta[r] : 0.0f;
        for (int64_t j = 0; j < N; ++j) c[j] = beta ? c[j] * b0 : 0.0f;
    }
    // B rows of other types are converted once per row, a chunk of columns at a time.
    constexpr int64_t kChunk = 64;
    float conv[kChunk];
    for (int64_t k = 0; k < K; ++k) {
        const uint8_t* row = B + static_cast<size_t>(k) * b_stride;
        for (int64_t j0 = 0; j0 < b_cols; j0 += kChunk) {
            const int64_t n = std::min(kChunk, b_cols - j0);
            const float* b = reinterpret_cast<const float*>(row) + j0;
            if (bt != Type::F32) {
                for (int64_t j = 0; j < n; ++j) conv[j] = attn_elem(bt, row, j0 + j);
                b = conv;
            }
            for (int64_t r = 0; r < M; ++r) {
                const float a = A[r * lda + k];
                float* c = C + r * ldc + j0;
                for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
            }
        }
    }
}

void k_transpose(Type t, const uint8_t* src, size_t stride, const int32_t* idx, int64_t n, int64_t hd, float* dst,
                 int64_t ld) {
    const int64_t np = attn_pad(n);
    for (int64_t d = 0; d < hd; ++d) {
        for (int64_t i = 0; i < n; ++i) dst[d * ld + i] = attn_elem(t, attn_row(src, stride, idx, i), d);
        for (int64_t i = n; i < np; ++i) dst[d * ld + i] = 0.0f;
    }
}

void v_rows(Type t, const uint8_t* src, size_t stride, int64_t n, int64_t hdv, float* dst, int64_t ld) {
    const int64_t cp = attn_pad(hdv);
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* row = src + static_cast<size_t>(i) * stride;
        for (int64_t c = 0; c < hdv; ++c) dst[i * ld + c] = attn_elem(t, row, c);
        for (int64_t c = hdv; c < cp; ++c) dst[i * ld + c] = 0.0f;
    }
}

float score_row(float* s, const float* mask, int64_t n, float softcap) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
        float x = s[j];
        if (softcap > 0) x = softcap * std::tanh(x / softcap);
        x += mask[j];
        s[j] = x;
        mx = x > mx ? x : mx;
    }
    return mx;
}

float exp_row(float* s, int64_t n, float m) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - m));
    return sum;
}

}  // namespace

namespace detail {
const AttnKernels& attn_scalar() {
    static const AttnKernels k{
        .gemm = gemm, .k_transpose = k_transpose, .v_rows = v_rows, .score_row = score_row, .exp_row = exp_row};
    return k;
}
}  // namespace detail

const AttnKernels& attn_kernels(Isa isa) {
    if (!isa_supported(isa)) {
        throw std::runtime_error("attn_kernels: instruction set " + std::string(isa_name(isa)) +
                                 " is not supported by this CPU or build");
    }
    switch (isa) {
#if defined(KILN_ARCH_X86)
        case Isa::Avx512: return detail::attn_avx512();
        case Isa::Avx2: return detail::attn_avx2();
#endif
#if defined(KILN_ARCH_ARM64)
        case Isa::Neon: return detail::attn_neon();
#endif
        default: return detail::attn_scalar();
    }
}

}  // namespace kiln::cpu
