// The q4_0 AVX-512 VNNI tiles (gemm_avx512_tiles.h) for CPUs that also have GFNI: one
// vgf2p8affineqb moves the high nibble of every byte down (a bit permutation is a linear map
// over GF(2)) where gemm_avx512.cpp needs a shift and a mask. That is 2 instead of 3 ops per
// 64 bytes of weights for every 16 vpdpbusd: measured +2-4% on q4_0 prompts (1.1B llama,
// 2 threads). Not on Zen 4, where the affine op takes a vpdpbusd pipe (gemm_avx512.cpp,
// packed_avx512). Products are bit-identical to gemm_avx512.cpp's (tested).
#include <immintrin.h>

#include "backends/cpu/kernels/gemm_avx512_tiles.h"

namespace kiln::cpu {
namespace {

// q4_0 high nibbles with one affine transform: output bit i (0..3) of each byte is input bit
// i + 4 (matrix row 7 - i holds 1 << (i + 4)); output bits 4..7 are 0.
struct GfniUnpack {
    static __m512i high_nibbles(__m512i v, __m512i) {
        return _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(detail::kGfniHighNibble), 0);
    }
};

constexpr PackedKernels kQ4_0{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm<true, GfniUnpack>};
constexpr PackedKernels kQ4_0Wide{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm_wide<true, GfniUnpack>};

}  // namespace

namespace detail {
const PackedKernels* packed_q4_0_avx512gfni(bool wide) { return wide ? &kQ4_0Wide : &kQ4_0; }
}  // namespace detail

}  // namespace kiln::cpu
