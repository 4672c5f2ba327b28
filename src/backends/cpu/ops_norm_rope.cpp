// Row-wise ops: RMS norm, rotary position embedding, softmax.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/ops.h"
#include "backends/cpu/rms_scale.h"

namespace kiln::cpu {
namespace {

template <typename F>
void for_rows(const Tensor& t, ComputeContext& ctx, F f) {
    int64_t r0, r1;
    split_rows(t.nrows(), ctx.ith, ctx.nth, r0, r1);
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t i1 = r % t.ne[1], i2 = (r / t.ne[1]) % t.ne[2], i3 = r / (t.ne[1] * t.ne[2]);
        f(i1, i2, i3);
    }
}

}  // namespace

void op_rms_norm(const Tensor& t, ComputeContext& ctx) {
    const Tensor& a = *t.src[0];
    const float eps = t.fparams[0];
    const int64_t n = t.ne[0];
    for_rows(t, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
        const auto* x = reinterpret_cast<const float*>(a.row(i1, i2, i3));
        auto* y = reinterpret_cast<float*>(t.row(i1, i2, i3));
        const float s = rms_scale([x](int64_t j) { return x[j]; }, n, eps);
        for (int64_t j = 0; j < n; ++j) y[j] = x[j] * s;
    });
}

// x [head_dim, n_head, n_tokens]: each (head, token) row rotates its first n_dims
// values in pairs by angle pos * freq_scale * base^(-2i / n_dims).
void op_rope(const Tensor& t, ComputeContext& ctx) {
    const Tensor& x = *t.src[0];
    const auto* pos = static_cast<const int32_t*>(t.src[1]->data);
    const int n_dims = t.iparams[0];
    const auto mode = static_cast<RopeMode>(t.iparams[1]);
    const float base = t.fparams[0], freq_scale = t.fparams[1];
    const int64_t head_dim = t.ne[0];
    const int half = n_dims / 2;
    const double theta_scale = std::pow(static_cast<double>(base), -2.0 / n_dims);
    // The rotation depends only on the position: one cos/sin table per token, shared by its
    // heads (rows of one token are consecutive, heads fastest), and by later ropes of the same
    // position on this thread (ctx.rope).
    RopeTable local;
    RopeTable& tab = ctx.rope ? *ctx.rope : local;
    for_rows(t, ctx, [&](int64_t ih, int64_t it, int64_t i3) {
        if (!tab.valid || tab.pos != pos[it] || tab.n_dims != n_dims || tab.base != base || tab.freq_scale != freq_scale) {
            tab.cos.resize(static_cast<size_t>(half));
            tab.sin.resize(static_cast<size_t>(half));
            double theta = static_cast<double>(pos[it]) * freq_scale;
            for (int i = 0; i < half; ++i, theta *= theta_scale) {
                tab.cos[static_cast<size_t>(i)] = static_cast<float>(std::cos(theta));
                tab.sin[static_cast<size_t>(i)] = static_cast<float>(std::sin(theta));
            }
            tab.valid = true;
            tab.pos = pos[it];
            tab.n_dims = n_dims;
            tab.base = base;
            tab.freq_scale = freq_scale;
        }
        const float* cos_t = tab.cos.data();
        const float* sin_t = tab.sin.data();
        const auto* src = reinterpret_cast<const float*>(x.row(ih, it, i3));
        auto* dst = reinterpret_cast<float*>(t.row(ih, it, i3));
        for (int i = 0; i < half; ++i) {
            const float c = cos_t[i], s = sin_t[i];
            const int64_t a = mode == RopeMode::Neox ? i : 2 * i;
            const int64_t b = mode == RopeMode::Neox ? i + half : 2 * i + 1;
            const float x0 = src[a], x1 = src[b];
            dst[a] = x0 * c - x1 * s;
            dst[b] = x0 * s + x1 * c;
        }
        for (int64_t j = n_dims; j < head_dim; ++j) dst[j] = src[j];
    });
}

void op_soft_max(const Tensor& t, ComputeContext& ctx) {
    const Tensor& a = *t.src[0];
    const Tensor* mask = t.src[1];
    const float scale = t.fparams[0];
    const int64_t n = t.ne[0];
    for_rows(t, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
        const auto* x = reinterpret_cast<const float*>(a.row(i1, i2, i3));
        const auto* m = mask ? reinterpret_cast<const float*>(mask->row(i1)) : nullptr;
        auto* y = reinterpret_cast<float*>(t.row(i1, i2, i3));
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
            y[j] = x[j] * scale + (m ? m[j] : 0.0f);
            max = std::max(max, y[j]);
        }
        if (max == -std::numeric_limits<float>::infinity()) {  // fully masked row
            std::fill(y, y + n, 0.0f);
            return;
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) {
            y[j] = std::exp(y[j] - max);
            sum += y[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) y[j] *= inv;
    });
}

}  // namespace kiln::cpu
