// The AVX-512 VNNI kernels for Q4_K and Q6_K weights (gemm_kquants_avx512_tiles.h), the Q6_K
// generation tile unpacking with shifts and masks (gemm_kquants_avx512gfni.cpp: GF(2) affine ops),
// and the entry points: packed_kquants_avx512 and the group decoder the matrix-unit kernels share.
#include "backends/cpu/kernels/gemm_kquants_avx512_tiles.h"

namespace kiln::cpu {
namespace {

constexpr PackedKernels kQ4_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q4K, ActScale::SuperBlock>, .gemm = gemm<Q4K, Q4KDecoded<true>::T, decode_q4_K>};
constexpr PackedKernels kQ6_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q6K, ActScale::SuperBlock>, .gemm = gemm<Q6K<Q6ShiftUnpack>::T, Q6KDecoded<true>::T, decode_q6_K>};
constexpr PackedKernels kQ4_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q4K>, .gemm = gemm<Q4K, Q4KDecoded<false>::T, decode_q4_K>, .coarse = &kQ4_KCoarse};
constexpr PackedKernels kQ6_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q6K>, .gemm = gemm<Q6K<Q6ShiftUnpack>::T, Q6KDecoded<false>::T, decode_q6_K>, .coarse = &kQ6_KCoarse};

}  // namespace

namespace detail {
namespace {
// kQ4_K (and its coarse kernels) with the AMX int8 kernels as their batch kernels.
const PackedKernels* q4_K_with_amx_batch() {
    static const PackedKernels kCoarse = with_batch(kQ4_KCoarse, packed_kquants_amx(Type::Q4_K, true), nullptr);
    static const PackedKernels kWith = [] {
        const PackedKernels* amx = packed_kquants_amx(Type::Q4_K, false);
        PackedKernels c = with_batch(kQ4_K, amx, amx);
        c.coarse = &kCoarse;
        return c;
    }();
    return &kWith;
}
}  // namespace

const PackedKernels* packed_kquants_avx512(Type t, const CpuFeatures& f) {
    if (!f.avx512vnni) return nullptr;
    if (f.amx_int8 && t == Type::Q4_K && packed_kquants_amx(t)) return q4_K_with_amx_batch();
    switch (t) {
        case Type::Q4_K: return &kQ4_K;
        // GFNI: Q6_K quants in 2.25 instead of 3.25 ops per register (gemm_kquants_avx512gfni.cpp);
        // not on Zen 4, where the affine op takes a vpdpbusd pipe (as for q4_0, packed_avx512).
        case Type::Q6_K: return f.gfni && !f.zen4 ? packed_q6_K_avx512gfni() : &kQ6_K;
        default: return nullptr;
    }
}

void decode_kquant_group_avx512(Type t, const uint8_t* wg, int64_t nsb, uint8_t* dst) {
    if (t == Type::Q4_K) {
        decode_q4_K(wg, nsb, dst);
    } else {
        decode_q6_K(wg, nsb, dst);
    }
}
}  // namespace detail

}  // namespace kiln::cpu
