#include <string>

#include "model/arch.h"

namespace kiln {

void load_decoder_weights(WeightLoader& wl, const HParams& hp, ModelWeights& w, bool qkv_bias, bool qk_norm,
                          bool post_norms) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, F = hp.n_ff;
    const int64_t q_dim = hp.head_dim * hp.n_head, k_dim = hp.n_embd_k_gqa(), v_dim = hp.n_embd_v_gqa();
    w.tok_embd = wl.require("token_embd.weight", {E, V});
    w.output_norm = wl.require("output_norm.weight", {E});
    w.output = wl.optional("output.weight", {E, V});
    if (!w.output) w.output = w.tok_embd;  // tied embeddings
    w.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        LayerWeights& L = w.layers[static_cast<size_t>(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = wl.require(p + "attn_norm.weight", {E});
        L.wq = wl.require(p + "attn_q.weight", {E, q_dim});
        L.wk = wl.require(p + "attn_k.weight", {E, k_dim});
        L.wv = wl.require(p + "attn_v.weight", {E, v_dim});
        L.wo = wl.require(p + "attn_output.weight", {hp.head_dim_v * hp.n_head, E});
        if (qkv_bias) {
            L.bq = wl.require(p + "attn_q.bias", {q_dim});
            L.bk = wl.require(p + "attn_k.bias", {k_dim});
            L.bv = wl.require(p + "attn_v.bias", {v_dim});
        }
        if (qk_norm) {
            L.q_norm = wl.require(p + "attn_q_norm.weight", {hp.head_dim});
            L.k_norm = wl.require(p + "attn_k_norm.weight", {hp.head_dim});
        }
        if (post_norms) {
            L.post_attn_norm = wl.require(p + "post_attention_norm.weight", {E});
            L.post_ffn_norm = wl.require(p + "post_ffw_norm.weight", {E});
        }
        L.ffn_norm = wl.require(p + "ffn_norm.weight", {E});
        L.ffn_gate = wl.require(p + "ffn_gate.weight", {E, F});
        L.ffn_up = wl.require(p + "ffn_up.weight", {E, F});
        L.ffn_down = wl.require(p + "ffn_down.weight", {F, E});
    }
}

}  // namespace kiln
