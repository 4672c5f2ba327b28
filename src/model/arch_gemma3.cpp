// gemma3: embeddings scaled by sqrt(n_embd); RMSNorm on Q and K per head;
// norms after attention and after the FFN as well as before; GELU(tanh)-gated
// FFN; NeoX RoPE; sliding-window attention on all layers but every sixth,
// which attends globally with its own RoPE base.
#include <cmath>
#include <stdexcept>

#include "model/arch.h"
#include "model/gguf.h"

namespace kiln {
namespace {

constexpr int kDefaultPattern = 6;          // layers 5, 11, 17, ... attend globally
constexpr double kLocalRopeBase = 10000.0;  // RoPE base of the sliding-window layers (default)

class Gemma3 final : public Architecture {
public:
    std::string_view name() const override { return "gemma3"; }

    void load_hparams(const gguf::File& f, HParams& hp) const override {
        hp.rope_mode = RopeMode::Neox;
        hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
        hp.sliding_window = static_cast<int64_t>(f.get_u64("gemma3.attention.sliding_window").value_or(0));
        // Layer il is local when il % pattern < pattern - 1 (the last layer of each group attends globally).
        const auto pattern = static_cast<int64_t>(f.get_u64("gemma3.attention.sliding_window_pattern").value_or(kDefaultPattern));
        if (pattern <= 0) throw std::runtime_error(f.path() + ": gemma3.attention.sliding_window_pattern must be > 0");
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            hp.layer_is_swa[static_cast<size_t>(il)] = hp.sliding_window > 0 && il % pattern < pattern - 1;
        }
        hp.rope_freq_base_swa = static_cast<float>(f.get_f64("gemma3.rope.freq_base_swa").value_or(kLocalRopeBase));
        hp.rope_freq_scale_swa = 1.0f;  // rope scaling applies to the global layers only
        // query_pre_attn_scalar: head_dim, except Gemma 3 27B (62 layers), which uses n_embd / n_head.
        const float q_scale = hp.n_layer == 62 ? static_cast<float>(hp.n_embd / hp.n_head) : static_cast<float>(hp.head_dim);
        hp.attn_scale = 1.0f / std::sqrt(q_scale);
        if (f.find("gemma3.final_logit_softcapping")) {
            throw std::runtime_error(f.path() + ": gemma3.final_logit_softcapping is not supported yet");
        }
    }

    void load_weights(WeightLoader& wl, const HParams& hp, ModelWeights& w) const override {
        load_decoder_weights(wl, hp, w, /*qkv_bias=*/false, /*qk_norm=*/true, /*post_norms=*/true);
    }

    Tensor* build_graph(GraphBuilder& b) const override {
        Tensor* x = b.embed();
        for (int il = 0; il < static_cast<int>(b.hp.n_layer); ++il) {
            b.g.set_layer(il);
            const LayerWeights& L = b.w.layers[static_cast<size_t>(il)];
            Tensor* a = b.self_attention(il, b.norm(x, L.attn_norm, "attn_norm"));
            a = b.norm(a, L.post_attn_norm, "post_attn_norm");
            x = b.g.add(x, a, "attn_residual");
            Tensor* f = b.gated_ffn(il, b.norm(x, L.ffn_norm, "ffn_norm"), /*gelu=*/true);
            f = b.norm(f, L.post_ffn_norm, "post_ffn_norm");
            x = b.g.add(x, f, "ffn_residual");
        }
        return b.logits(x);
    }
};

}  // namespace

const Architecture& gemma3_architecture() {
    static const Gemma3 arch;
    return arch;
}

}  // namespace kiln
