// Model hyper-parameters, read from GGUF metadata (`{arch}.*` keys). Every
// difference between architectures that is a number or a flag lives here, so
// graph code reads configuration instead of switching on the architecture.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

namespace gguf { class File; }

struct HParams {
    std::string arch;
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_ff = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;     // key/query head size
    int64_t head_dim_v = 0;   // value head size
    float rms_eps = 1e-5f;

    // Rotary embeddings.
    int n_rot = 0;                          // dimensions rotated per head
    RopeMode rope_mode = RopeMode::Normal;
    float rope_freq_base = 10000.0f;        // global-attention layers
    float rope_freq_scale = 1.0f;           // 1 / linear scaling factor
    float rope_freq_base_swa = 10000.0f;    // sliding-window layers
    float rope_freq_scale_swa = 1.0f;

    // Sliding-window attention: window size (0: none) and which layers use it.
    int64_t sliding_window = 0;
    std::vector<bool> layer_is_swa;

    float attn_scale = 0.0f;        // q.k scale (0: 1/sqrt(head_dim))
    float embd_scale = 1.0f;        // input embeddings multiplied by this (gemma: sqrt(n_embd))
    float attn_softcap = 0.0f;      // 0: none (gemma2-style tanh capping of attention logits)
    bool tied_output = false;       // output projection reuses token_embd

    int64_t n_embd_k_gqa() const { return head_dim * n_head_kv; }
    int64_t n_embd_v_gqa() const { return head_dim_v * n_head_kv; }
    bool is_swa(int64_t layer) const {
        return sliding_window > 0 && layer >= 0 && static_cast<size_t>(layer) < layer_is_swa.size() &&
               layer_is_swa[static_cast<size_t>(layer)];
    }
};

// Reads the keys every architecture shares ({arch}.embedding_length, ...).
// Missing required keys are errors naming the key and file.
void read_common_hparams(const gguf::File& f, HParams& hp);

}  // namespace kiln
