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

#include <cstdint>

#include "backends/cpu/kernels/gemm.h"

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
//   tmm0, tmm1  int32 sums of an even block, activation tiles 0 and 1   8 x 16 (64 bytes a row)
//   tmm2, tmm3  the same for the odd block (its products overlap the even block's float work)
//   tmm4, tmm5  activations of tiles 0 and 1: 8 rows x 32 int8           (32 bytes a row)
//   tmm6, tmm7  weights of the even / odd block: 8 rows x 16 columns x 4 int8 (64 bytes a row)
inline TileConfig q8_tile_config() {
    TileConfig c;
    for (int i = 0; i < 8; ++i) {
        c.rows[i] = 8;
        c.colsb[i] = 64;
    }
    c.colsb[4] = c.colsb[5] = 32;
    return c;
}

// One block's sums: [activation tile][8 rows x 16 weight rows].
template <int NT>
using BlockSums = int32_t[NT][kActTile * 16];

// GCC's tile intrinsics are asm statements that declare no memory operands: the compiler may
// move the loads of tilestored sums above the store. This store names the 8 x 64 bytes it
// writes, so the loads stay after it (and the next store into the buffer after them) without a
// memory clobber inside the loop, which made GCC keep the float accumulators in memory.
// (Weights written by a decoding pass before the loop are ordered by a compiler_fence there.)
#define KILN_AMX_STORE_SUMS(tmm, dst) \
    asm volatile("tilestored %%tmm" #tmm ", (%1,%2,1)" : "=m"(*reinterpret_cast<int32_t(*)[kActTile * 16]>(dst)) : "r"(dst), "r"(int64_t{64}))

// Runs nb blocks of one weight group against NT (1 or 2) activation tiles (x0, x1: the tiles'
// first blocks, kActBlockBytes a block) and calls blocks.add(sums, b) with each block's sums,
// in block order. blocks.weights(b): block b's B tile (8 rows of 64 bytes: elements 4r..4r+3 of
// the 16 weight rows), signed (kUnsignedWeights false: tdpbssd) or unsigned (tdpbsud). Needs
// q8_tile_config loaded.
//
// The tile unit runs its instructions in order, and a tilestored waits for the product it
// stores: each block's products are issued one step before they are stored, behind the
// previous block's, so the float work of a block overlaps the next block's products. Measured
// against issuing and storing each block in turn (one thread, K = 2048, two 8-row activation
// tiles, operands in L1): 22 against 26 ns per block.
template <int NT, bool kUnsignedWeights, class Blocks>
__attribute__((always_inline)) inline void run_block_products(Blocks& blocks, int64_t nb, const uint8_t* x0, const uint8_t* x1) {
    alignas(64) int32_t sums[2][NT][kActTile * 16];  // [even / odd block][tile]
#define KILN_AMX_DP(c, a, b)                  \
    if constexpr (kUnsignedWeights) {         \
        _tile_dpbsud(c, a, b);                \
    } else {                                  \
        _tile_dpbssd(c, a, b);                \
    }
    auto issue_even = [&](int64_t b) __attribute__((always_inline)) {
        _tile_zero(0);
        _tile_loadd(6, blocks.weights(b), 64);
        _tile_loadd(4, x0 + b * kActBlockBytes, 32);
        KILN_AMX_DP(0, 4, 6);
        if constexpr (NT == 2) {
            _tile_zero(1);
            _tile_loadd(5, x1 + b * kActBlockBytes, 32);
            KILN_AMX_DP(1, 5, 6);
        }
    };
    auto issue_odd = [&](int64_t b) __attribute__((always_inline)) {
        _tile_zero(2);
        _tile_loadd(7, blocks.weights(b), 64);
        _tile_loadd(4, x0 + b * kActBlockBytes, 32);
        KILN_AMX_DP(2, 4, 7);
        if constexpr (NT == 2) {
            _tile_zero(3);
            _tile_loadd(5, x1 + b * kActBlockBytes, 32);
            KILN_AMX_DP(3, 5, 7);
        }
    };
#undef KILN_AMX_DP
    issue_even(0);
    for (int64_t b = 0; b < nb; b += 2) {
        if (b + 1 < nb) issue_odd(b + 1);
        KILN_AMX_STORE_SUMS(0, sums[0][0]);
        if constexpr (NT == 2) KILN_AMX_STORE_SUMS(1, sums[0][NT - 1]);
        blocks.add(sums[0], b);
        if (b + 2 < nb) issue_even(b + 2);
        if (b + 1 < nb) {
            KILN_AMX_STORE_SUMS(2, sums[1][0]);
            if constexpr (NT == 2) KILN_AMX_STORE_SUMS(3, sums[1][NT - 1]);
            blocks.add(sums[1], b + 1);
        }
    }
}
#undef KILN_AMX_STORE_SUMS

}  // namespace
}  // namespace kiln::cpu
