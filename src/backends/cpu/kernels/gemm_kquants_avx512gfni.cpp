// The AVX-512 VNNI Q6_K kernels (gemm_kquants_avx512_tiles.h) for CPUs that also have GFNI, whose
// generation tile unpacks with vgf2p8affineqb: it moves any bits of every byte anywhere in it (a bit
// permutation is a linear map over GF(2)), so a quant register takes 2 ops for 3 of its 4 element
// ranges and 3 for the last, where the shifts and masks (Q6ShiftUnpack) take 3 and 4. Measured on
// the AMX Xeon (family 6 model 167): bench_gemm L2/q6_K/M:1/precise:1 (one thread, weights in L2)
// 10.9 -> 10.2 us; in the 1b Q4_K_M model's generation, the Q6_K products' time in one process with
// calls alternating between the two: 0.994-0.995 (3 runs). The prompt tiles keep the shifts: with
// 8 activation rows (bench_gemm q6_K/M:8) the affine ops made them 3-10% slower, the ports being
// full of vpdpbusd there. Products are bit-identical to gemm_kquants_avx512.cpp's (tested).
#include "backends/cpu/kernels/gemm_kquants_avx512_tiles.h"

namespace kiln::cpu {
namespace {

// affine(x, M) sets output bit i of each byte to input bit src(i) where byte 7 - i of M is
// 1 << src(i) (a zero byte: bit i is 0). Bits 2k, 2k + 1 to 4, 5:
constexpr long long qh_pair(int k) { return (1LL << (2 * k)) << 24 | (1LL << (2 * k + 1)) << 16; }

struct Q6GfniUnpack {
    static __m512i quants(__m512i ql, __m512i qh, int k) {
        if (k < 2) {  // (ql & 0x0F) | the pair in bits 4, 5
            const __m512i hs = _mm512_gf2p8affine_epi64_epi8(qh, _mm512_set1_epi64(qh_pair(k)), 0);
            return _mm512_ternarylogic_epi32(ql, hs, _mm512_set1_epi8(0x0F), 0xEC);  // (a & c) | b
        }
        const __m512i lo = _mm512_gf2p8affine_epi64_epi8(ql, _mm512_set1_epi64(detail::kGfniHighNibble), 0);
        if (k == 2) return _mm512_ternarylogic_epi32(lo, qh, _mm512_set1_epi8(0x30), 0xF8);  // a | (b & c)
        return _mm512_or_si512(lo, _mm512_gf2p8affine_epi64_epi8(qh, _mm512_set1_epi64(qh_pair(3)), 0));
    }
};

constexpr PackedKernels kQ6_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q6K, ActScale::SuperBlock>, .gemm = gemm<Q6K<Q6GfniUnpack>::T, Q6KDecoded<true>::T, decode_q6_K>};
constexpr PackedKernels kQ6_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Q6K>, .gemm = gemm<Q6K<Q6GfniUnpack>::T, Q6KDecoded<false>::T, decode_q6_K>, .coarse = &kQ6_KCoarse};

}  // namespace

namespace detail {
const PackedKernels* packed_q6_K_avx512gfni() { return &kQ6_K; }
}  // namespace detail

}  // namespace kiln::cpu
