// The llama decoder block, shared by architectures that differ from it only in configuration.
#pragma once

#include "model/arch.h"

namespace kiln {

// embed -> n_layer x (attn_norm, self-attention, residual, ffn_norm, SiLU-gated FFN, residual) -> logits
Tensor* build_llama_like(GraphBuilder& b);

}  // namespace kiln
