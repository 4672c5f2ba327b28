#include "backends/cpu/fused_acts.h"

#include <algorithm>

#include "backends/cpu/rms_scale.h"

namespace kiln::cpu {
namespace {

bool f32_rows(const Tensor* t) { return t && t->type == Type::F32 && t->nb[0] == sizeof(float); }
bool same_shape(const Tensor* a, const Tensor* b) { return a && b && a->ne == b->ne; }
// A result that may be left unwritten: read by exactly `readers` nodes (those fused with it), not
// by the caller. readers == 0 means not counted (a graph no scheduler planned): never.
bool private_result(const Tensor* t, int readers) { return t->readers == readers && !t->is_output; }

}  // namespace

void FusedActs::chunk_sums(int64_t i1, int64_t i2, int64_t i3, int64_t ch0, int64_t ch1, double* sums) const {
    const int64_t K = h->ne[0];
    auto* hr = reinterpret_cast<float*>(h->row(i1, i2, i3));
    for (int64_t ch = ch0; ch < ch1; ++ch) {
        const int64_t j0 = ch * kNormChunk, j1 = std::min(K, j0 + kNormChunk);
        if (add_a) {  // h = a + b, as op_add
            const auto* a = reinterpret_cast<const float*>(add_a->row(i1, i2, i3));
            const auto* b = reinterpret_cast<const float*>(add_b->row(i1, i2, i3));
            for (int64_t j = j0; j < j1; ++j) hr[j] = a[j] + b[j];
        }
        sums[ch] = chunk_sum_squares([hr](int64_t j) { return hr[j]; }, j0, j1);
    }
}

void FusedActs::values(int64_t i1, int64_t i2, int64_t i3, int64_t c0, int64_t c1, const double* sums, float* out) const {
    if (kind == Kind::Glu) {
        glu(reinterpret_cast<const float*>(gate->row(i1, i2, i3)) + c0, reinterpret_cast<const float*>(up->row(i1, i2, i3)) + c0, out, c1 - c0);
        return;
    }
    // The same float operations as the nodes: h * s (op_rms_norm), then * w (op_mul).
    const int64_t K = h->ne[0];
    const float s = rms_scale(add_chunk_sums(sums, (K + kNormChunk - 1) / kNormChunk), K, eps);
    const auto* hr = reinterpret_cast<const float*>(h->row(i1, i2, i3));
    if (weight) {
        for (int64_t j = c0; j < c1; ++j) out[j - c0] = (hr[j] * s) * weight[j];
    } else {
        for (int64_t j = c0; j < c1; ++j) out[j - c0] = hr[j] * s;
    }
}

FusedActs match_fused_acts(std::span<Tensor* const> nodes, size_t i, size_t n_products, const ActivationKernels& act) {
    FusedActs f;
    if (i == 0 || i + n_products > nodes.size() || n_products == 0) return f;
    const Tensor* x = nodes[i]->src[1];
    const int n_readers = static_cast<int>(n_products);
    if (!f32_rows(x) || !x->is_contiguous() || nodes[i - 1] != x || !private_result(x, n_readers)) return f;

    if ((x->op == Op::SwiGlu || x->op == Op::GeGlu) && f32_rows(x->src[0]) && f32_rows(x->src[1]) && same_shape(x, x->src[0]) &&
        same_shape(x, x->src[1])) {
        f.kind = FusedActs::Kind::Glu;
        f.n_nodes = 1;
        f.gate = x->src[0];
        f.up = x->src[1];
        f.glu = x->op == Op::SwiGlu ? act.swiglu : act.geglu;
        return f;
    }

    // x = mul(rms_norm(h), w), or rms_norm(h) itself
    const Tensor* norm = x;
    const float* weight = nullptr;
    int n_nodes = 1;
    if (x->op == Op::Mul) {
        const Tensor* w = x->src[1];
        norm = x->src[0];
        if (i < 2 || nodes[i - 2] != norm || !f32_rows(w) || !w->is_contiguous() || w->nrows() != 1 || w->ne[0] != x->ne[0] ||
            !same_shape(x, norm) || !private_result(norm, 1)) {
            return f;
        }
        weight = static_cast<const float*>(w->data);
        n_nodes = 2;
    }
    if (norm->op != Op::RmsNorm || !f32_rows(norm->src[0]) || !same_shape(norm, norm->src[0])) return f;
    f.kind = FusedActs::Kind::RmsNorm;
    f.h = norm->src[0];
    f.weight = weight;
    f.eps = norm->fparams[0];
    // h = add(a, b) just before: computed here too, and written (others read h: the next residual add)
    const Tensor* h = f.h;
    if (i >= static_cast<size_t>(n_nodes) + 1 && nodes[i - static_cast<size_t>(n_nodes) - 1] == h && h->op == Op::Add && h->is_contiguous() &&
        f32_rows(h->src[0]) && f32_rows(h->src[1]) && same_shape(h, h->src[0]) && same_shape(h, h->src[1]) && h->src[0] != h &&
        h->src[1] != h) {
        f.add_a = h->src[0];
        f.add_b = h->src[1];
        ++n_nodes;
    }
    f.n_nodes = n_nodes;
    return f;
}

}  // namespace kiln::cpu
