// llama: pre-norm decoder, RMSNorm, RoPE (adjacent pairs: the GGUF converter
// permutes Q/K for it), grouped-query attention, SiLU-gated FFN.
#include "model/arch_llama.h"

#include "model/gguf.h"

namespace kiln {

Tensor* build_llama_like(GraphBuilder& b) {
    Tensor* x = b.embed();
    for (int il = 0; il < static_cast<int>(b.hp.n_layer); ++il) {
        b.g.set_layer(il);
        const LayerWeights& L = b.w.layers[static_cast<size_t>(il)];
        Tensor* a = b.self_attention(il, b.norm(x, L.attn_norm, "attn_norm"));
        x = b.g.add(x, a, "attn_residual");
        Tensor* f = b.gated_ffn(il, b.norm(x, L.ffn_norm, "ffn_norm"), /*gelu=*/false);
        x = b.g.add(x, f, "ffn_residual");
    }
    return b.logits(x);
}

namespace {

class Llama final : public Architecture {
public:
    std::string_view name() const override { return "llama"; }
    void load_hparams(const gguf::File&, HParams& hp) const override { hp.rope_mode = RopeMode::Normal; }
    void load_weights(WeightLoader& wl, const HParams& hp, ModelWeights& w) const override {
        load_decoder_weights(wl, hp, w, /*qkv_bias=*/false, /*qk_norm=*/false, /*post_norms=*/false);
    }
    Tensor* build_graph(GraphBuilder& b) const override { return build_llama_like(b); }
};

}  // namespace

const Architecture& llama_architecture() {
    static const Llama arch;
    return arch;
}

}  // namespace kiln
