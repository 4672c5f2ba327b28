// Element-wise ops: add/mul with broadcasting, scale, activations, gated activations.
#include <cmath>

#include "backends/cpu/kernels/activations.h"
#include "backends/cpu/ops.h"

namespace kiln::cpu {
namespace {

// Applies f(out_row, a_row, b_row, n) for every row of t, with b broadcast (its
// row index wraps in each dim; its ne0 either equals a's or divides it).
template <typename F>
void binary_rows(const Tensor& t, ComputeContext& ctx, F f) {
    const Tensor& a = *t.src[0];
    const Tensor& b = *t.src[1];
    int64_t r0, r1;
    split_rows(t.nrows(), ctx.ith, ctx.nth, r0, r1);
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
        auto* out = reinterpret_cast<float*>(t.row(i1, i2, i3));
        const auto* pa = reinterpret_cast<const float*>(a.row(i1, i2, i3));
        const auto* pb = reinterpret_cast<const float*>(b.row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]));
        for (int64_t j = 0; j < t.ne[0]; j += b.ne[0]) f(out + j, pa + j, pb, b.ne[0]);
    }
}

template <typename F>
void unary_rows(const Tensor& t, ComputeContext& ctx, F f) {
    const Tensor& a = *t.src[0];
    int64_t r0, r1;
    split_rows(t.nrows(), ctx.ith, ctx.nth, r0, r1);
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
        f(reinterpret_cast<float*>(t.row(i1, i2, i3)), reinterpret_cast<const float*>(a.row(i1, i2, i3)), t.ne[0]);
    }
}

}  // namespace

void op_add(const Tensor& t, ComputeContext& ctx) {
    binary_rows(t, ctx, [](float* o, const float* a, const float* b, int64_t n) {
        for (int64_t j = 0; j < n; ++j) o[j] = a[j] + b[j];
    });
}

void op_mul(const Tensor& t, ComputeContext& ctx) {
    binary_rows(t, ctx, [](float* o, const float* a, const float* b, int64_t n) {
        for (int64_t j = 0; j < n; ++j) o[j] = a[j] * b[j];
    });
}

void op_scale(const Tensor& t, ComputeContext& ctx) {
    const float s = t.fparams[0];
    unary_rows(t, ctx, [s](float* o, const float* a, int64_t n) {
        for (int64_t j = 0; j < n; ++j) o[j] = a[j] * s;
    });
}

void op_unary(const Tensor& t, ComputeContext& ctx) {
    const ActivationKernels& k = activation_kernels();
    const auto fn = t.op == Op::Silu ? k.silu : k.gelu_tanh;
    unary_rows(t, ctx, [fn](float* o, const float* a, int64_t n) { fn(a, o, n); });
}

void op_glu(const Tensor& t, ComputeContext& ctx) {
    const ActivationKernels& k = activation_kernels();
    const auto fn = t.op == Op::SwiGlu ? k.swiglu : k.geglu;
    binary_rows(t, ctx, [fn](float* o, const float* g, const float* u, int64_t n) { fn(g, u, o, n); });
}

}  // namespace kiln::cpu
