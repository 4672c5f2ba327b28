// Architectures: each is one file (arch_<name>.cpp) implementing this
// interface plus one line in arch_registry.cpp. An architecture reads its own
// hyper-parameters, names its weights, and builds the graph of one batch.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/graph_builder.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace kiln {

namespace gguf { class File; }

// Finds weight tensors by GGUF name and checks their shapes.
class WeightLoader {
public:
    virtual ~WeightLoader() = default;
    // The tensor, which must exist with this shape (ne[0] first; trailing 1s may be omitted).
    virtual Tensor* require(const std::string& name, std::vector<int64_t> shape) = 0;
    // The tensor if it exists (then with this shape), else null.
    virtual Tensor* optional(const std::string& name, std::vector<int64_t> shape) = 0;
};

class Architecture {
public:
    virtual ~Architecture() = default;
    virtual std::string_view name() const = 0;
    // Architecture-specific hyper-parameters (read_common_hparams has run already).
    virtual void load_hparams(const gguf::File& f, HParams& hp) const = 0;
    virtual void load_weights(WeightLoader& wl, const HParams& hp, ModelWeights& w) const = 0;
    // Builds the graph of one micro-batch; returns logits F32 [n_vocab, n_outputs].
    virtual Tensor* build_graph(GraphBuilder& b) const = 0;
};

// The architecture registered under a GGUF `general.architecture` name, or null.
const Architecture* find_architecture(std::string_view name);
// Names of every registered architecture (for error messages).
std::vector<std::string_view> architecture_names();

// Weights every decoder shares: token embedding, final norm, output (tied if absent), and the
// per-layer attention + FFN tensors; `extra` adds optional per-layer tensors (biases, q/k norms...).
void load_decoder_weights(WeightLoader& wl, const HParams& hp, ModelWeights& w, bool qkv_bias, bool qk_norm,
                          bool post_norms);

}  // namespace kiln
