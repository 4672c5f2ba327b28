// Dot-product and unpacking steps shared by the AVX-512 kernel files (only they include it: the
// code needs their AVX-512 compile flags). Internal linkage: every kernel file gets its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kiln::cpu {
namespace {

// acc + vpdpbusd(w, *x in every lane): the activation's 4 bytes as vpdpbusd's own embedded-
// broadcast memory operand ({1to16}, one load+op instruction). From intrinsics GCC 12 loads
// every broadcast into a register first (vpbroadcastd), an extra instruction per vpdpbusd.
// Measured on Zen 4 (bench_gemm M:128, one thread, builds alternated): q4_0 +1%, q8_0 +3%,
// q4_K +4%, q6_K +1%. A tile that feeds one broadcast to several vpdpbusd keeps it in a
// register instead (gemm_wide).
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const int32_t* x) {
#if defined(__GNUC__)
    asm("vpdpbusd %[x]%{1to16%}, %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [x] "m"(*x));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(*x));
#endif
}

// Byte t of every 32-bit lane, zero-extended (vpshufb: indices within each 128-bit lane).
inline __m512i lane_byte(__m512i v, int t) {
    const int base = static_cast<int>(0x80808000u) | t;
    return _mm512_shuffle_epi8(v, _mm512_set4_epi32(base + 12, base + 8, base + 4, base));
}

#if defined(__AVX512BF16__)
// One 64-byte F16 chunk (16 rows x 2 elements of block_f16x16) rounded to BF16, lane order unchanged.
inline __m512bh f16_chunk_to_bf16(const uint8_t* p) {
    const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    return _mm512_cvtne2ps_pbh(hi, lo);
}
#endif

}  // namespace
}  // namespace kiln::cpu
