// What an architecture's build_graph() works with: the graph, the model, the
// micro-batch inputs, and helpers for the blocks every decoder shares
// (norms, attention over the KV cache, gated FFN).
#pragma once

#include <cstdint>

#include "core/graph.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace kiln {

class KvCache;

// Inputs of one micro-batch's graph, filled by the context before compute.
struct BatchInputs {
    Tensor* tokens = nullptr;     // I32 [n_tokens]
    Tensor* positions = nullptr;  // I32 [n_tokens]
    Tensor* out_ids = nullptr;    // I32 [n_outputs]: rows whose logits are computed
    // Per KV cache (0: global layers, 1: sliding-window layers; null when absent).
    struct Cache {
        Tensor* store_idx = nullptr;  // I32 [n_tokens]: cell each new token is written to
        Tensor* mask = nullptr;       // F32 [n_kv, n_tokens]: 0 visible, -inf hidden
        int64_t n_kv = 0;             // cells attended (a prefix of the cache)
    } cache[2];
};

class GraphBuilder {
public:
    GraphBuilder(Graph& g, const HParams& hp, const ModelWeights& w, KvCache* kv_global, KvCache* kv_swa,
                 int64_t n_tokens, int64_t n_outputs);

    Graph& g;
    const HParams& hp;
    const ModelWeights& w;
    const int64_t n_tokens;
    const int64_t n_outputs;
    BatchInputs in;
    // Tokens of more than one sequence set in this micro-batch (set by the context before build_graph).
    bool mixed_sequences = false;

    // Token embeddings scaled by hp.embd_scale: F32 [n_embd, n_tokens].
    Tensor* embed();
    // rms_norm(x) * weight
    Tensor* norm(Tensor* x, Tensor* weight, const char* name);
    // x @ W (+ b when b is not null)
    Tensor* linear(Tensor* x, Tensor* weight, Tensor* bias, const char* name);
    // Self-attention of layer il for normalised input x [n_embd, n_tokens]: projections (+ biases,
    // + q/k norms when the layer has them), RoPE with the layer's base, KV store, attention, output
    // projection. Returns [n_embd, n_tokens].
    Tensor* self_attention(int il, Tensor* x);
    // Gated FFN: down(act(gate(x)) * up(x)), act = SiLU or GELU(tanh).
    Tensor* gated_ffn(int il, Tensor* x, bool gelu);
    // Keeps only the rows that produce logits, then final norm and output projection (+ softcap).
    Tensor* logits(Tensor* x);

private:
    KvCache* kv_[2];
};

}  // namespace kiln
