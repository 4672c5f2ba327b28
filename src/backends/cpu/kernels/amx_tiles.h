// What the AMX kernels share (gemm_avx512amx.cpp: q4_0 / q8_0; gemm_kquants_avx512amx.cpp:
// Q4_K; gemm_bf16_matrix_avx512amx.cpp: TileConfig): the tile configuration, and the int8
// loops that run a weight group's 32-element blocks through the tile unit against 16-row
// activation tiles (gemm.h's q8 tiles with kMatrixTileRows rows, read in place), handing each
// block's int32 sums to the caller's float code. Included only by files compiled with
// -mamx-tile -mamx-int8 -mamx-bf16; everything is in an unnamed namespace.
//
// Why a block at a time: every 32-element block has its own scales per weight row and per
// activation row, so the sums cannot stay in the tile over K. Each block's 16 x 16 sums leave
// through tilestored and are scaled in AVX-512 registers exactly as the VNNI tiles scale their
// vpdpbusd sums, so the products are bit-identical to theirs. The tile unit runs tileloadd,
// tdpbssd and tilestored in order, one after the other, and tdpbssd costs about as much for
// K = 32 as for 64, so a block costs what those instructions cost in sequence; measured on this
// Xeon (one thread, operands in L1): tilestored about 4.4 ns whatever the rows, so one 16-row
// tile per block (17 ns a block) rather than two of 8 rows (22 ns).
#pragma once

#include <immintrin.h>

// GCC 12's AVX-512 headers trigger -Wmaybe-uninitialized on their own intrinsics
// (_mm512_undefined_* inside cvtph/cvtepi32), as in gemm_avx512_tiles.h; the code of the
// including files initialises everything.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <cstdint>

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
    c.rows[0] = c.rows[1] = c.rows[4] = kMatrixTileRows;
    c.colsb[0] = c.colsb[1] = 64;
    c.colsb[4] = 32;
    c.rows[6] = c.rows[7] = 8;
    c.colsb[6] = c.colsb[7] = 64;
    return c;
}

// One block's sums: 16 activation rows x 16 weight rows, as [rows 0..7 / 8..15][8 x 16] (each
// half scaled as one of the VNNI kernels' 8-row tiles).
using BlockSums = int32_t[2][kActTile * 16];

// GCC's tile intrinsics are asm statements that declare no memory operands: the compiler may
// move the loads of tilestored sums above the store. This store names the 1 KiB it writes, so
// the loads stay after it (and the next store into the buffer after them) without a memory
// clobber inside the loop, which made GCC keep the float accumulators in memory. (Memory
// written before the loop is ordered by a compiler_fence there.) Tile numbers are literals.
#define KILN_AMX_STORE_SUMS(tmm, dst) \
    asm volatile("tilestored %%tmm" #tmm ", (%1,%2,1)" : "=m"(*reinterpret_cast<BlockSums*>(dst)) : "r"(dst), "r"(int64_t{64}))

// Runs nb blocks of one weight group against one activation tile (x: its first block,
// kMatrixActBlockBytes a block) and calls blocks.add(sums, b) with each block's sums, in block
// order. blocks.weights(b): block b's B tile (8 rows of 64 bytes: elements 4r..4r+3 of the 16
// weight rows), signed (kUnsignedWeights false: tdpbssd) or unsigned (tdpbsud). Needs
// q8_tile_config loaded.
//
// A tilestored waits for the product it stores: each block's product is issued a step before
// it is stored, and a block's sums are scaled a step after they are stored, so the float work
// overlaps the tile unit. Measured against issuing, storing and scaling each block in turn
// (one thread, K = 2048, operands in L1): 17 against 19 ns a block.
template <bool kUnsignedWeights, class Blocks>
__attribute__((always_inline)) inline void run_block_products(Blocks& blocks, int64_t nb, const uint8_t* x) {
    alignas(64) BlockSums sums[2];  // [even / odd block]
#define KILN_AMX_ISSUE(c, w, b)                             \
    _tile_zero(c);                                          \
    _tile_loadd(w, blocks.weights(b), 64);                  \
    _tile_loadd(4, x + (b) * kMatrixActBlockBytes, 32);     \
    if constexpr (kUnsignedWeights) {                       \
        _tile_dpbsud(c, 4, w);                              \
    } else {                                                \
        _tile_dpbssd(c, 4, w);                              \
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

// The outer loop of the AMX int8 gemms. Activation tiles are taken in slices that stay in L2
// (as gemm.h's for_each_packed_tile); each weight group is prepared once per slice:
// prepare(wg, t.scratch) writes its tile form into the thread's scratch. tile(t.scratch, x,
// acc) then computes acc[h][j] = activation row 8h + j of the tile at x times the group's 16
// rows, which this writes to t.y (precise mode: a row and its residual added). cfg: the tile
// shapes tile() uses.
template <class Prepare, class Tile>
void amx_q8_gemm(const GemmTask& t, const TileConfig& cfg, Prepare&& prepare, Tile&& tile) {
    const int64_t rows = t.M * t.pairs;
    const size_t tile_bytes = matrix_act_tile_bytes(t.K);
    const int64_t n_tiles = (rows + kMatrixTileRows - 1) / kMatrixTileRows;
    const int64_t slice = std::max<int64_t>(1, static_cast<int64_t>((size_t{1} << 20) / tile_bytes));
    _tile_loadconfig(&cfg);
    for (int64_t s0 = 0; s0 < n_tiles; s0 += slice) {
        const int64_t s1 = std::min(n_tiles, s0 + slice);
        for (int64_t g = 0; g < t.n_groups; ++g) {
            prepare(t.w + g * t.w_group_bytes, t.scratch);
            compiler_fence();  // tileloadd declares no memory operand: the stores go first
            for (int64_t ti = s0; ti < s1; ++ti) {
                __m512 acc[2][kActTile];
                tile(t.scratch, t.x + ti * tile_bytes, acc);
                const int64_t r0 = ti * kMatrixTileRows;
                const int nc = static_cast<int>(std::min<int64_t>(kMatrixTileRows, rows - r0));
                for (int j = 0; j < nc; j += t.pairs) {
                    float* y = t.y + ((r0 + j) / t.pairs) * t.y_stride + g * kPackRows;
                    const __m512 a = acc[j / kActTile][j % kActTile];
                    _mm512_storeu_ps(y, t.pairs == 2 ? _mm512_add_ps(a, acc[j / kActTile][j % kActTile + 1]) : a);
                }
            }
            compiler_fence();  // the next group's preparation overwrites what these tiles read
        }
    }
    _tile_release();
}

}  // namespace
}  // namespace kiln::cpu
