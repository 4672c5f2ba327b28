// Horizontal reductions of AVX-512 registers, shared by the *_avx512.cpp kernel files (only
// they include it: the code needs their AVX-512 compile flags). Written out instead of
// _mm512_reduce_*, which trip GCC 12's -Wmaybe-uninitialized. Internal linkage: every
// kernel file gets its own copy, compiled with its own flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kiln::cpu {
namespace {

inline float hmax(__m512 v) {
    __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    b = _mm_max_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

inline int32_t hsum(__m512i v) {
    __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti32x8_epi32(v, 1));
    __m128i b = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0x4E));
    b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0xB1));
    return _mm_cvtsi128_si32(b);
}

}  // namespace
}  // namespace kiln::cpu
