// qwen2: the llama block with biases on the Q/K/V projections and NeoX-style RoPE.
#include "model/arch_llama.h"
#include "model/gguf.h"

namespace kiln {
namespace {

class Qwen2 final : public Architecture {
public:
    std::string_view name() const override { return "qwen2"; }
    void load_hparams(const gguf::File&, HParams& hp) const override { hp.rope_mode = RopeMode::Neox; }
    void load_weights(WeightLoader& wl, const HParams& hp, ModelWeights& w) const override {
        load_decoder_weights(wl, hp, w, /*qkv_bias=*/true, /*qk_norm=*/false, /*post_norms=*/false);
    }
    Tensor* build_graph(GraphBuilder& b) const override { return build_llama_like(b); }
};

}  // namespace

const Architecture& qwen2_architecture() {
    static const Qwen2 arch;
    return arch;
}

}  // namespace kiln
