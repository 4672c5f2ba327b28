// What the AMX int8 kernels share (gemm_avx512amx.cpp: q4_0 / q8_0; gemm_kquants_avx512amx.cpp:
// Q4_K): the tile configuration and the pipeline that runs one weight group's 32-element blocks
// through the tile unit against one or two 8-row activation tiles (gemm.h's q8 tiles, read in
// place), handing each block's int32 sums to the caller's float code. Included only by files
// compiled with -mamx-tile -mamx-int8; everything is in an unnamed namespace.
//
// Why a block at a time: every 32-element block has its own scales per weight row and per
// activation row, so the sums cannot stay in the tile over K. Each block's 8 x 16 sums leave
// through tilestored and are scaled in AVX-512 registers exactly as the VNNI tiles scale their
// vpdpbusd sums, so the products are bit-identical to theirs. tilestored costs about 16 cycles
// whatever the rows (measured on this Xeon: 4.4 ns for 8 or 16 rows), so it, the float work
// and the products are what a block costs.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "backends/cpu/kernels/gemm.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

// LDTILECFG's operand: the shape of each tile register (palette 1: 8 tiles of up to 16 rows of
// 64 bytes).
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};  // bytes per row
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG takes 64 bytes");

// Tile registers of run_block_products:
//   tmm0, tmm1  int32 sums of an even / odd block: 16 activation rows x 16 weight rows
//   tmm4        activations, one block: 16 rows x 32 int8 (32 bytes a row)
//   tmm6, tmm7  weights of the even / odd block: 8 rows x 16 columns x 4 int8 (64 bytes a row)
inline TileConfig q8_tile_config() {
    TileConfig c;
    c.rows[0] = c.rows[1] = c.rows[4] = 16;
    c.colsb[0] = c.colsb[1] = 64;
    c.colsb[4] = 32;
    c.rows[6] = c.rows[7] = 8;
    c.colsb[6] = c.colsb[7] = 64;
    return c;
}

// One block's sums: [activation tile of the pair][8 rows x 16 weight rows] (tmm0/1 stored).
using BlockSums = int32_t[2][kActTile * 16];

// The quants of a pair of activation tiles with their blocks side by side, so that one block's
// 16 rows are a 16 x 32 tile 32 bytes a row: pair p, block b at 512 * (p * nb + b) (tile 2p's
// 8 rows, then tile 2p + 1's). gemm.h's tiles keep 8 rows per block (every other kernel reads
// them so); the copy costs about 1% of the products. 16-row tiles take one tilestored per
// block and pair where 8-row ones take two: measured (one thread, operands in L1) 17 against
// 22 ns per block and pair. A pair without a second tile gets zeros there.
constexpr size_t kPairBlockBytes = 2 * kActTile * 32;
inline void pair_activations(const uint8_t* x, size_t tile_bytes, int64_t nb, int64_t n_tiles, uint8_t* out) {
    for (int64_t ti = 0; ti < n_tiles; ti += 2) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* o = out + ((ti / 2) * nb + b) * kPairBlockBytes;
            for (int i = 0; i < 2; ++i) {
                const uint8_t* src = x + (ti + i) * tile_bytes + b * kActBlockBytes;
#pragma GCC unroll 4
                for (int c = 0; c < 4; ++c) {
                    const __m512i v = ti + i < n_tiles ? _mm512_loadu_si512(src + 64 * c) : _mm512_setzero_si512();
                    _mm512_store_si512(o + i * 256 + 64 * c, v);
                }
            }
        }
    }
}

// GCC's tile intrinsics are asm statements that declare no memory operands: the compiler may
// move the loads of tilestored sums above the store. This store names the 1 KiB it writes, so
// the loads stay after it (and the next store into the buffer after them) without a memory
// clobber inside the loop, which made GCC keep the float accumulators in memory.
// (Memory written before the loop is ordered by a compiler_fence there.) For the files that
// include this header, with literal tile numbers.
#define KILN_AMX_STORE_SUMS(tmm, dst) \
    asm volatile("tilestored %%tmm" #tmm ", (%1,%2,1)" : "=m"(*reinterpret_cast<BlockSums*>(dst)) : "r"(dst), "r"(int64_t{64}))

// Runs nb blocks of one weight group against a pair of activation tiles (a16: the pair's first
// block in pair_activations' layout) and calls blocks.add(sums, b) with each block's sums, in
// block order. blocks.weights(b): block b's B tile (8 rows of 64 bytes: elements 4r..4r+3 of
// the 16 weight rows), signed (kUnsignedWeights false: tdpbssd) or unsigned (tdpbsud). Needs
// q8_tile_config loaded.
//
// The tile unit runs its instructions in order, and a tilestored waits for the product it
// stores: each block's products are issued a step before they are stored, and a block's sums
// are scaled a step after they are stored (the loads would wait for the tile store to reach
// the cache), so the float work overlaps the products. Measured against issuing, storing and
// scaling each block in turn (one thread, K = 2048, operands in L1): 17 against 19 ns.
template <bool kUnsignedWeights, class Blocks>
__attribute__((always_inline)) inline void run_block_products(Blocks& blocks, int64_t nb, const uint8_t* a16) {
    alignas(64) BlockSums sums[2];  // [even / odd block]
#define KILN_AMX_ISSUE(c, w, b)                                   \
    _tile_zero(c);                                                \
    _tile_loadd(w, blocks.weights(b), 64);                        \
    _tile_loadd(4, a16 + (b) * kPairBlockBytes, 32);              \
    if constexpr (kUnsignedWeights) {                             \
        _tile_dpbsud(c, 4, w);                                    \
    } else {                                                      \
        _tile_dpbssd(c, 4, w);                                    \
    }
    KILN_AMX_ISSUE(0, 6, int64_t{0});
    for (int64_t b = 0; b < nb; b += 2) {
        if (b + 1 < nb) {
            KILN_AMX_ISSUE(1, 7, b + 1);
        }
        KILN_AMX_STORE_SUMS(0, sums[0]);
        if (b > 0) blocks.add(sums[1], b - 1);
        if (b + 1 >= nb) {
            blocks.add(sums[0], b);
            break;
        }
        if (b + 2 < nb) {
            KILN_AMX_ISSUE(0, 6, b + 2);
        }
        KILN_AMX_STORE_SUMS(1, sums[1]);
        blocks.add(sums[0], b);
        if (b + 2 >= nb) blocks.add(sums[1], b + 1);
    }
#undef KILN_AMX_ISSUE
}

// The outer loop of the AMX int8 gemms (t: at least kMatrixUnitMinRows activation rows).
// Activation tiles are taken in slices that stay in L2 (as gemm.h's for_each_packed_tile), in
// pairs (pair_activations, per slice); each weight group is prepared once per slice:
// prepare(wg, buf) writes its tile form into buf (group_bytes, allocated here, not zeroed).
// pair(buf, a16, x0, x1, acc) then computes acc[i][j] = activation row j of tile i of the pair
// (tile 0 at x0, tile 1 at x1, the same as x0 where the pair has one) x the group's 16 rows,
// which this writes to t.y (precise mode: a row and its residual added).
// cfg: the tile shapes pair's products take (q8_tile_config for run_block_products).
template <class Prepare, class Pair>
void amx_q8_gemm(const GemmTask& t, const TileConfig& cfg, size_t group_bytes, Prepare&& prepare, Pair&& pair) {
    const int64_t rows = t.M * t.pairs;
    const int64_t nb = t.K / 32;
    const size_t tile_bytes = act_tile_bytes(t.K);
    const int64_t n_tiles = (rows + kActTile - 1) / kActTile;
    const int64_t slice = std::max<int64_t>(2, static_cast<int64_t>((size_t{1} << 20) / tile_bytes) & ~int64_t{1});
    // Not value-initialised: every byte is written before it is read.
    std::unique_ptr<__m512i[]> mem(new __m512i[group_bytes / sizeof(__m512i) + 1]);
    std::unique_ptr<__m512i[]> pairs(new __m512i[static_cast<size_t>((std::min(slice, n_tiles) + 1) / 2 * nb) * kPairBlockBytes / sizeof(__m512i)]);
    auto* buf = reinterpret_cast<uint8_t*>(mem.get());
    auto* a16 = reinterpret_cast<uint8_t*>(pairs.get());
    _tile_loadconfig(&cfg);
    for (int64_t s0 = 0; s0 < n_tiles; s0 += slice) {
        const int64_t s1 = std::min(n_tiles, s0 + slice);
        pair_activations(t.x + s0 * tile_bytes, tile_bytes, nb, s1 - s0, a16);
        for (int64_t g = 0; g < t.n_groups; ++g) {
            prepare(t.w + g * t.w_group_bytes, buf);
            compiler_fence();  // tileloadd declares no memory operand: the stores go first
            for (int64_t ti = s0; ti < s1; ti += 2) {
                const int nt = static_cast<int>(std::min<int64_t>(2, s1 - ti));
                __m512 acc[2][kActTile];
                const uint8_t* x0 = t.x + ti * tile_bytes;
                pair(buf, a16 + (ti - s0) / 2 * nb * kPairBlockBytes, x0, nt == 2 ? x0 + tile_bytes : x0, acc);
                for (int i = 0; i < nt; ++i) {
                    const int64_t r0 = (ti + i) * kActTile;
                    const int nc = static_cast<int>(std::min<int64_t>(kActTile, rows - r0));
                    for (int j = 0; j < nc; j += t.pairs) {
                        float* y = t.y + ((r0 + j) / t.pairs) * t.y_stride + g * kPackRows;
                        _mm512_storeu_ps(y, t.pairs == 2 ? _mm512_add_ps(acc[i][j], acc[i][j + 1]) : acc[i][j]);
                    }
                }
            }
            compiler_fence();  // the next group's preparation overwrites what these tiles read
        }
        compiler_fence();  // the next slice's pairs overwrite what these tiles read
    }
    _tile_release();
}

}  // namespace
}  // namespace kiln::cpu
