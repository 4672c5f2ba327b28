// The weight tensors of a decoder-only transformer, as the GGUF tensor names
// give them. Optional tensors are null when a model does not have them.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace kiln {

struct LayerWeights {
    Tensor* attn_norm = nullptr;        // [n_embd]
    Tensor* wq = nullptr;               // [n_embd, head_dim * n_head]
    Tensor* wk = nullptr;               // [n_embd, head_dim * n_head_kv]
    Tensor* wv = nullptr;               // [n_embd, head_dim_v * n_head_kv]
    Tensor* wo = nullptr;               // [head_dim_v * n_head, n_embd]
    Tensor* bq = nullptr;               // [head_dim * n_head]  (qwen2)
    Tensor* bk = nullptr;               // [head_dim * n_head_kv]
    Tensor* bv = nullptr;               // [head_dim_v * n_head_kv]
    Tensor* q_norm = nullptr;           // [head_dim]  (gemma3)
    Tensor* k_norm = nullptr;           // [head_dim]
    Tensor* post_attn_norm = nullptr;   // [n_embd]    (gemma3)
    Tensor* ffn_norm = nullptr;         // [n_embd]
    Tensor* ffn_gate = nullptr;         // [n_embd, n_ff]
    Tensor* ffn_up = nullptr;           // [n_embd, n_ff]
    Tensor* ffn_down = nullptr;         // [n_ff, n_embd]
    Tensor* post_ffn_norm = nullptr;    // [n_embd]    (gemma3)
};

struct ModelWeights {
    Tensor* tok_embd = nullptr;     // [n_embd, n_vocab]
    Tensor* output_norm = nullptr;  // [n_embd]
    Tensor* output = nullptr;       // [n_embd, n_vocab]; tok_embd when tied
    std::vector<LayerWeights> layers;
};

}  // namespace kiln
