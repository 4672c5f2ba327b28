#include "model/graph_builder.h"

#include <array>
#include <cmath>
#include <optional>
#include <string>

#include "model/kv_cache.h"

namespace kiln {
namespace {
std::string lname(int il, const char* what) { return std::string(what) + "-" + std::to_string(il); }
}  // namespace

GraphBuilder::GraphBuilder(Graph& graph, const HParams& hparams, const ModelWeights& weights, KvCache* kv_global,
                           KvCache* kv_swa, int64_t n_tok, int64_t n_out)
    : g(graph), hp(hparams), w(weights), n_tokens(n_tok), n_outputs(n_out), kv_{kv_global, kv_swa} {
    in.tokens = g.input(Type::I32, {n_tokens, 1, 1, 1}, "inp_tokens");
    in.positions = g.input(Type::I32, {n_tokens, 1, 1, 1}, "inp_pos");
    in.out_ids = g.input(Type::I32, {n_outputs, 1, 1, 1}, "inp_out_ids");
    for (int c = 0; c < 2; ++c) {
        if (!kv_[c]) continue;
        in.cache[c].n_kv = kv_[c]->n_kv();
        in.cache[c].store_idx = g.input(Type::I32, {n_tokens, 1, 1, 1}, c ? "inp_kv_idx_swa" : "inp_kv_idx");
        in.cache[c].mask = g.input(Type::F32, {in.cache[c].n_kv, n_tokens, 1, 1}, c ? "inp_mask_swa" : "inp_mask");
    }
}

Tensor* GraphBuilder::embed() {
    Tensor* x = g.get_rows(w.tok_embd, in.tokens, "inp_embd");
    if (hp.embd_scale != 1.0f) x = g.scale(x, hp.embd_scale, "inp_embd_scaled");
    return x;
}

Tensor* GraphBuilder::norm(Tensor* x, Tensor* weight, const char* name) {
    Tensor* n = g.rms_norm(x, hp.rms_eps, name);
    return weight ? g.mul(n, weight, name) : n;
}

Tensor* GraphBuilder::linear(Tensor* x, Tensor* weight, Tensor* bias, const char* name) {
    Tensor* y = g.mul_mat(weight, x, name);
    return bias ? g.add(y, bias, name) : y;
}

Tensor* GraphBuilder::self_attention(int il, Tensor* x) {
    const LayerWeights& L = w.layers[static_cast<size_t>(il)];
    const bool swa = hp.is_swa(il);
    const int c = swa && kv_[1] ? 1 : 0;
    KvCache& kv = *kv_[c];
    const BatchInputs::Cache& ci = in.cache[c];

    // The three products first, then their biases: products of one input next to each other
    // run as one op on the CPU (its activations quantized once, no barrier between them).
    const std::string qn = lname(il, "q"), kn = lname(il, "k"), vn = lname(il, "v");
    Tensor* q = g.mul_mat(L.wq, x, qn.c_str());
    Tensor* k = g.mul_mat(L.wk, x, kn.c_str());
    Tensor* v = g.mul_mat(L.wv, x, vn.c_str());
    if (L.bq) q = g.add(q, L.bq, qn.c_str());
    if (L.bk) k = g.add(k, L.bk, kn.c_str());
    if (L.bv) v = g.add(v, L.bv, vn.c_str());
    q = g.reshape(q, {hp.head_dim, hp.n_head, n_tokens, 1});
    k = g.reshape(k, {hp.head_dim, hp.n_head_kv, n_tokens, 1});
    if (L.q_norm) q = norm(q, L.q_norm, lname(il, "q_norm").c_str());
    if (L.k_norm) k = norm(k, L.k_norm, lname(il, "k_norm").c_str());
    const float base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base;
    const float scale = swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
    q = g.rope(q, in.positions, hp.n_rot, hp.rope_mode, base, scale, lname(il, "q_rope"));
    k = g.rope(k, in.positions, hp.n_rot, hp.rope_mode, base, scale, lname(il, "k_rope"));

    // Write this batch's K and V rows into the cache, then attend over the cache prefix.
    // K in panels where the cache type allows it (core/kv_layout.h): attention then reads K^T as stored.
    const bool k_panels = kv.k_panels().has_value();
    // V in head-major rows where whole blocks make a head: one head's values over the cells are contiguous.
    Tensor* kc = g.store_rows(kv.k(il), g.reshape(k, {hp.n_embd_k_gqa(), n_tokens, 1, 1}), ci.store_idx, {},
                              {.panel_head_dim = k_panels ? hp.head_dim : 0});
    const std::optional<HeadMajorRows> v_heads = kv.v_head_major();
    Tensor* vc = g.store_rows(kv.v(il), v, ci.store_idx, {}, {.head_major_dim = v_heads ? hp.head_dim_v : 0});
    const size_t k_head = row_size(kc->type, hp.head_dim), v_head = row_size(vc->type, hp.head_dim_v);
    Tensor* kview = g.view(kc, {hp.head_dim, hp.n_head_kv, ci.n_kv, 1}, {kc->nb[0], k_head, kc->nb[1], kc->nb[1] * ci.n_kv}, 0,
                           lname(il, "k_cache_view"));
    // rows: a cell's heads side by side; head-major: a head's cells one after another
    const std::array<size_t, 4> v_nb = v_heads ? std::array<size_t, 4>{vc->nb[0], v_heads->head_bytes(), v_head, v_heads->head_bytes() * hp.n_head_kv}
                                               : std::array<size_t, 4>{vc->nb[0], v_head, vc->nb[1], vc->nb[1] * ci.n_kv};
    Tensor* vview = g.view(vc, {hp.head_dim_v, hp.n_head_kv, ci.n_kv, 1}, v_nb, 0, lname(il, "v_cache_view"));
    const float kq_scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    Tensor* a = g.attention(q, kview, vview, ci.mask, AttentionParams{.scale = kq_scale, .softcap = hp.attn_softcap, .k_panels = k_panels,
                                                                   .mixed_sequences = mixed_sequences},
                            lname(il, "attn"));
    return linear(a, L.wo, nullptr, lname(il, "attn_out").c_str());
}

Tensor* GraphBuilder::gated_ffn(int il, Tensor* x, bool gelu) {
    const LayerWeights& L = w.layers[static_cast<size_t>(il)];
    Tensor* gate = linear(x, L.ffn_gate, nullptr, lname(il, "ffn_gate").c_str());
    Tensor* up = linear(x, L.ffn_up, nullptr, lname(il, "ffn_up").c_str());
    Tensor* h = gelu ? g.geglu(gate, up, lname(il, "ffn_act")) : g.swiglu(gate, up, lname(il, "ffn_act"));
    return linear(h, L.ffn_down, nullptr, lname(il, "ffn_out").c_str());
}

Tensor* GraphBuilder::logits(Tensor* x) {
    g.set_layer(-1);
    if (n_outputs < n_tokens) x = g.get_rows(x, in.out_ids, "out_rows");
    x = norm(x, w.output_norm, "output_norm");
    Tensor* out = g.mul_mat(w.output, x, "logits");
    g.mark_output(out);
    return out;
}

}  // namespace kiln
