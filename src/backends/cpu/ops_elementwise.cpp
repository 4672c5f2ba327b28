// Element-wise ops: add/mul with broadcasting, scale, activations, gated activations.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/activations.h"
#include "backends/cpu/ops.h"

namespace kiln::cpu {
namespace {

// The part of t's rows [r0, r1) x columns [c0, c1) a thread computes: whole rows split between
// the threads, or, with fewer rows than threads (generation's single token), each row's columns in
// whole cache lines (`columns`: the op allows it). A row left to one thread made the other wait:
// one token's swiglu, mul and add took 71-78 us a token on the busy thread and ~0 on the other
// (kiln-bench --profile, 1b Q4_0 tg32, Xeon), and the busy one read the half of its inputs that the
// other thread's matmul had written from the other core.
struct Part {
    int64_t r0, r1, c0, c1;
};
Part thread_part(const Tensor& t, const ComputeContext& ctx, bool columns) {
    constexpr int64_t kLine = 16;  // floats per cache line
    const int64_t rows = t.nrows(), n = t.ne[0];
    if (!columns || rows >= ctx.nth || n < 2 * kLine * ctx.nth) {
        int64_t r0, r1;
        split_rows(rows, ctx.ith, ctx.nth, r0, r1);
        return {r0, r1, 0, n};
    }
    int64_t l0, l1;
    split_rows((n + kLine - 1) / kLine, ctx.ith, ctx.nth, l0, l1);
    return {0, rows, std::min(n, l0 * kLine), std::min(n, l1 * kLine)};
}

// Applies f(out_row, a_row, b_row, n) for every row of t, with b broadcast (its
// row index wraps in each dim; its ne0 either equals a's or divides it).
template <typename F>
void binary_rows(const Tensor& t, ComputeContext& ctx, F f) {
    const Tensor& a = *t.src[0];
    const Tensor& b = *t.src[1];
    const Part part = thread_part(t, ctx, b.ne[0] == t.ne[0]);  // (columns: b's row lines up with a's)
    for (int64_t r = part.r0; r < part.r1; ++r) {
        const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
        auto* out = reinterpret_cast<float*>(t.row(i1, i2, i3));
        const auto* pa = reinterpret_cast<const float*>(a.row(i1, i2, i3));
        const auto* pb = reinterpret_cast<const float*>(b.row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]));
        if (part.c0 > 0 || part.c1 < t.ne[0]) {
            if (part.c0 < part.c1) f(out + part.c0, pa + part.c0, pb + part.c0, part.c1 - part.c0);
            continue;
        }
        for (int64_t j = 0; j < t.ne[0]; j += b.ne[0]) f(out + j, pa + j, pb, b.ne[0]);
    }
}

template <typename F>
void unary_rows(const Tensor& t, ComputeContext& ctx, F f) {
    const Tensor& a = *t.src[0];
    const Part part = thread_part(t, ctx, true);
    if (part.c0 >= part.c1) return;
    for (int64_t r = part.r0; r < part.r1; ++r) {
        const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
        f(reinterpret_cast<float*>(t.row(i1, i2, i3)) + part.c0, reinterpret_cast<const float*>(a.row(i1, i2, i3)) + part.c0,
          part.c1 - part.c0);
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
    const ActivationKernels& k = activation_kernels(ctx.isa);
    const auto fn = t.op == Op::Silu ? k.silu : k.gelu_tanh;
    unary_rows(t, ctx, [fn](float* o, const float* a, int64_t n) { fn(a, o, n); });
}

void op_glu(const Tensor& t, ComputeContext& ctx) {
    const ActivationKernels& k = activation_kernels(ctx.isa);
    const auto fn = t.op == Op::SwiGlu ? k.swiglu : k.geglu;
    binary_rows(t, ctx, [fn](float* o, const float* g, const float* u, int64_t n) { fn(g, u, o, n); });
}

}  // namespace kiln::cpu
