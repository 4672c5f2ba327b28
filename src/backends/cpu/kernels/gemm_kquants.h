// Shared by the Q4_K / Q6_K packed GEMM kernels (gemm_kquants_*.cpp): what the third field
// of an activation tile block holds for them (see gemm_kquants_scalar.cpp).
#pragma once

namespace kiln::cpu {

enum class KQuantAct {
    Q4K,  // float d * sum(q) of the 32-element block
    Q6K,  // int16 sums of the block's quants 0..15 (low half) and 16..31 (high half)
};

}  // namespace kiln::cpu
