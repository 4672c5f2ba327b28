// Attention over the KV cache, and writing new K/V rows into it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/ops.h"
#include "core/quant.h"

namespace kiln::cpu {

void op_store_rows(const Tensor& t, ComputeContext& ctx) {
    const Tensor& dst = *t.src[0];
    const Tensor& x = *t.src[1];
    const auto* ids = static_cast<const int32_t*>(t.src[2]->data);
    int64_t r0, r1;
    split_rows(x.ne[1], ctx.ith, ctx.nth, r0, r1);
    for (int64_t r = r0; r < r1; ++r) {
        quantize(dst.type, reinterpret_cast<const float*>(x.row(r)), dst.row(ids[r]), 1, dst.ne[0]);
    }
}

// For each (token, KV head), one pass over the cells with an online softmax
// (running max and sum), so no n_kv-sized score buffer is needed; the query
// heads sharing that KV head (GQA) are processed together so each K and V row
// is converted to float once.
void op_attention(const Tensor& t, ComputeContext& ctx) {
    const Tensor& q = *t.src[0];     // [hd, n_head, n_tokens] F32
    const Tensor& k = *t.src[1];     // [hd, n_head_kv, n_kv]
    const Tensor& v = *t.src[2];     // [hdv, n_head_kv, n_kv]
    const Tensor& mask = *t.src[3];  // [n_kv, n_tokens]
    const float scale = t.fparams[0], softcap = t.fparams[1];
    const int64_t hd = q.ne[0], hdv = v.ne[0], n_head = q.ne[1], n_head_kv = k.ne[1];
    const int64_t n_tokens = q.ne[2], n_kv = k.ne[2];
    const int64_t n_rep = n_head / n_head_kv;

    float* base = reinterpret_cast<float*>(ctx.scratch) +
                  static_cast<size_t>(ctx.ith) * static_cast<size_t>(hd + hdv + n_rep * hdv + 2 * n_rep);
    float* krow = base;
    float* vrow = krow + hd;
    float* acc = vrow + hdv;
    float* mx = acc + n_rep * hdv;
    float* sum = mx + n_rep;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();

    int64_t p0, p1;
    split_rows(n_tokens * n_head_kv, ctx.ith, ctx.nth, p0, p1);
    for (int64_t p = p0; p < p1; ++p) {
        const int64_t it = p / n_head_kv, hk = p % n_head_kv;
        const auto* m = reinterpret_cast<const float*>(mask.row(it));
        std::fill(acc, acc + n_rep * hdv, 0.0f);
        std::fill(mx, mx + n_rep, kNegInf);
        std::fill(sum, sum + n_rep, 0.0f);
        for (int64_t c = 0; c < n_kv; ++c) {
            if (m[c] == kNegInf) continue;
            dequantize_row(k.type, k.row(hk, c), krow, hd);
            bool v_loaded = false;
            for (int64_t r = 0; r < n_rep; ++r) {
                const auto* qr = reinterpret_cast<const float*>(q.row(hk * n_rep + r, it));
                float s = 0;
                for (int64_t j = 0; j < hd; ++j) s += qr[j] * krow[j];
                s *= scale;
                if (softcap > 0) s = softcap * std::tanh(s / softcap);
                s += m[c];
                if (!v_loaded) {
                    dequantize_row(v.type, v.row(hk, c), vrow, hdv);
                    v_loaded = true;
                }
                float* a = acc + r * hdv;
                if (s > mx[r]) {
                    const float corr = mx[r] == kNegInf ? 0.0f : std::exp(mx[r] - s);
                    for (int64_t j = 0; j < hdv; ++j) a[j] = a[j] * corr + vrow[j];
                    sum[r] = sum[r] * corr + 1.0f;
                    mx[r] = s;
                } else {
                    const float e = std::exp(s - mx[r]);
                    for (int64_t j = 0; j < hdv; ++j) a[j] += e * vrow[j];
                    sum[r] += e;
                }
            }
        }
        for (int64_t r = 0; r < n_rep; ++r) {
            auto* out = reinterpret_cast<float*>(t.row(it)) + (hk * n_rep + r) * hdv;
            const float inv = sum[r] > 0 ? 1.0f / sum[r] : 0.0f;
            for (int64_t j = 0; j < hdv; ++j) out[j] = acc[r * hdv + j] * inv;
        }
    }
}

}  // namespace kiln::cpu
