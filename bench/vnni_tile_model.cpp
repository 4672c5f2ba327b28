// What bounds the AVX-512 VNNI prompt tiles of kernels/gemm_avx512_tiles.h on a CPU: loops
// that issue the tile's instruction mix with operands in L1 (no memory, no kernel code), timed
// best of 15 on one thread. Rates in vpdpbusd per ns:
//   reg        16 chains of vpdpbusd with register operands: the instruction's peak (what
//              kiln-bench --peak measures per core)
//   bcast      the same with the activation as an embedded-broadcast memory operand ({1to16}),
//              as the tiles issue it
//   bcast x2   one vpbroadcastd into a register feeding two vpdpbusd (the wide tiles' form)
//   tile       the 8-row q4_0 tile per 32-weight block: 4 x (load, mask, GF2P8 affine unpack)
//              and 64 broadcast vpdpbusd, then per row int->float, multiply by the activation
//              scale and FMA with the 16 weight scales
//   tile, no scaling   the same with one integer add per row in place of the three float ops
// On a CPU whose 512-bit integer and float ops share two ports (Intel), tile / reg is about
// 64 / (64 + 8 unpack + 24 scaling + 1): the scaling ops, not the dot products, set the ceiling.
//   build/release/vnni_tile_model
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers trip these on their own _mm512_undefined_* placeholders once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace {

alignas(64) int32_t g_x[4096];
alignas(64) uint8_t g_w[1 << 16];

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// acc += w . broadcast(*x), the broadcast as vpdpbusd's memory operand.
inline void dpbusd_mem(__m512i& acc, __m512i w, const int32_t* x) {
    asm volatile("vpdpbusd %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*x), "v"(w));
}

// 16 accumulator chains through n steps of step(s, k); returns their sum.
template <class Step>
inline __attribute__((always_inline)) __m512i chains16(int64_t n, Step step) {
    __m512i s[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) s[i] = _mm512_set1_epi32(i);
    for (int64_t k = 0; k < n; ++k) step(s, k);
    __m512i r = s[0];
#pragma GCC unroll 16
    for (int i = 1; i < 16; ++i) r = _mm512_add_epi32(r, s[i]);
    return r;
}

__attribute__((noinline)) __m512i loop_reg(int64_t n) {
    const __m512i w = _mm512_set1_epi32(0x01020304), x = _mm512_set1_epi32(0x05060708);
    return chains16(n, [&](__m512i (&s)[16], int64_t) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
            s[i] = _mm512_dpbusd_epi32(s[i], w, x);
            asm volatile("" : "+v"(s[i]));
        }
    });
}

__attribute__((noinline)) __m512i loop_bcast(int64_t n) {
    const __m512i w = _mm512_set1_epi32(0x01020304);
    return chains16(n, [&](__m512i (&s)[16], int64_t k) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) dpbusd_mem(s[i], w, g_x + i * 8 + (k & 7));
    });
}

__attribute__((noinline)) __m512i loop_bcast_x2(int64_t n) {
    const __m512i w0 = _mm512_set1_epi32(0x01020304), w1 = _mm512_set1_epi32(0x01020305);
    return chains16(n, [&](__m512i (&s)[16], int64_t k) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            __m512i x;
            asm volatile("vpbroadcastd %1, %0" : "=v"(x) : "m"(g_x[i * 8 + (k & 7)]));
            s[2 * i] = _mm512_dpbusd_epi32(s[2 * i], w0, x);
            s[2 * i + 1] = _mm512_dpbusd_epi32(s[2 * i + 1], w1, x);
        }
    });
}

// n blocks of the 8-row q4_0 tile (64 vpdpbusd each).
template <bool kScaling>
__attribute__((noinline)) __m512 loop_tile(int64_t n) {
    __m512i s[8];
    __m512 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_ps();
    const auto* xf = reinterpret_cast<const float*>(g_x);
    for (int64_t k = 0; k < n; ++k) {
        const uint8_t* blk = g_w + (k & 15) * 256;
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) s[j] = _mm512_set1_epi32(g_x[256 + j]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m512i v = _mm512_loadu_si512(blk + 64 * c);
            const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi8(15));
            const __m512i hi = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x1020408000000000LL), 0);
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) dpbusd_mem(s[j], lo, g_x + j * 8 + c);
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) dpbusd_mem(s[j], hi, g_x + j * 8 + c + 4);
        }
        if constexpr (kScaling) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(s[j]), _mm512_set1_ps(xf[300 + j]));
                acc[j] = _mm512_fmadd_ps(f, dw, acc[j]);
            }
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                asm volatile("" : "+v"(s[j]));
                acc[j] = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(acc[j]), s[j]));
            }
        }
    }
    __m512 r = acc[0];
#pragma GCC unroll 8
    for (int j = 1; j < 8; ++j) r = _mm512_add_ps(r, acc[j]);
    return r;
}

template <class F>
double best_seconds(F&& f) {
    double best = 1e30;
    for (int rep = 0; rep < 15; ++rep) {
        const double t0 = now_s();
        f();
        best = std::min(best, now_s() - t0);
    }
    return best;
}

}  // namespace

int main() {
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("gfni") || !__builtin_cpu_supports("avx512bw")) {
        std::printf("vnni_tile_model: this CPU has no AVX-512 VNNI with GFNI\n");
        return 0;
    }
    constexpr int64_t n = 2000000;
    volatile float sink = 0;
    auto keep = [&](__m512i v) { sink = sink + static_cast<float>(_mm512_reduce_add_epi32(v)); };
    const double reg = 16.0 * n / best_seconds([&] { keep(loop_reg(n)); }) / 1e9;
    const double bcast = 16.0 * n / best_seconds([&] { keep(loop_bcast(n)); }) / 1e9;
    const double bcast2 = 16.0 * n / best_seconds([&] { keep(loop_bcast_x2(n)); }) / 1e9;
    const double tile = 64.0 * (n / 4) / best_seconds([&] { sink = sink + _mm512_reduce_add_ps(loop_tile<true>(n / 4)); }) / 1e9;
    const double bare = 64.0 * (n / 4) / best_seconds([&] { sink = sink + _mm512_reduce_add_ps(loop_tile<false>(n / 4)); }) / 1e9;
    std::printf("vpdpbusd per ns, one thread (%% of reg):\n");
    std::printf("  reg                %.2f\n", reg);
    std::printf("  bcast              %.2f (%.0f%%)\n", bcast, 100 * bcast / reg);
    std::printf("  bcast x2           %.2f (%.0f%%)\n", bcast2, 100 * bcast2 / reg);
    std::printf("  tile               %.2f (%.0f%%)\n", tile, 100 * tile / reg);
    std::printf("  tile, no scaling   %.2f (%.0f%%)\n", bare, 100 * bare / reg);
    return 0;
}
