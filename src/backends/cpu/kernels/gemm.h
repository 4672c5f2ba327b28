// Matrix products with weights repacked into the interleaved x16 layouts of
// core/quant_blocks.h (see core/quant_repack.h). One kernel call computes groups of
// kPackRows weight rows against a tile of activation rows, so each weight load feeds
// many dot products (prompt processing) and weights stream once per token (generation).
//
// Activations are first converted, once per matmul and shared by all threads, into q8
// "tiles" of kActTile rows: for each 32-element block b, the tile stores the kActTile
// rows' int8 quants (32 bytes each), then their scales d, then their corrections corr =
// -offset * sum(q), offset being what the packed weight layout adds to each weight quant:
//   dot(w, x) = sum over blocks b of  d_w[b] * d_x[b] * (sum_i (qw_i + offset) qx_i + corr[b]).
// Every operand of a tile is then at a constant offset from one pointer per block.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels.h"
#include "core/types.h"

namespace kiln::cpu {

constexpr int kActTile = 8;  // activation rows per tile
// One block of a tile: kActTile x 32 quants, kActTile float d, kActTile int32 corr.
constexpr size_t kActBlockBytes = kActTile * (32 + sizeof(float) + sizeof(int32_t));

// Bytes of one tile of K-element rows.
inline size_t act_tile_bytes(int64_t K) { return static_cast<size_t>(K / 32) * kActBlockBytes; }
// The same layout with kMatrixTileRows rows per tile, for the matrix-unit (AMX int8) kernels:
// one block's quants of all rows are then a 16 x 32 tile operand, 32 bytes a row, read in
// place (PackedKernels::tile_rows).
constexpr int kMatrixTileRows = 16;
constexpr size_t kMatrixActBlockBytes = kMatrixTileRows * (32 + sizeof(float) + sizeof(int32_t));
inline size_t matrix_act_tile_bytes(int64_t K) { return static_cast<size_t>(K / 32) * kMatrixActBlockBytes; }
// Bytes for `rows` activation rows.
inline size_t act_bytes(int64_t K, int64_t rows) { return act_tile_bytes(K) * static_cast<size_t>((rows + kActTile - 1) / kActTile); }

// What the third field of an activation tile block holds: each weight family reads the block
// sums it needs there (see gemm_kquants_scalar.cpp for the K-quants).
enum class ActAux : uint8_t {
    Corr,  // int32 -offset * sum(q): q4_0 / q8_0, whose packed quants carry an offset
    Q4K,   // float d * sum(q): the min term of a Q4_K sub-block in one FMA
    Q6K,   // two int16, the sums of quants 0..15 and 16..31: the offset 32 of each Q6_K sub-block
};
// How a row's quants are scaled. Block: one d per 32-element block (the most precise).
// SuperBlock: one d per 256 elements (QK_K, as llama.cpp's Q8_K), written into each of the 8
// blocks' d fields, so every kernel that reads d per block computes the same products on it;
// the K-quant prompt kernels of fast precision read it once per super-block instead, which
// saves a multiply per block and row (PackedKernels::coarse). K must be a multiple of 256.
enum class ActScale : uint8_t { Block, SuperBlock };
// Writes column col's third field of a tile block (of tile_rows rows) from the column's d and
// the sums of its quants 0..15 (lo) and 16..31 (hi).
inline void write_act_aux(uint8_t* blk, int col, ActAux kind, int32_t offset, float d, int32_t lo, int32_t hi, int tile_rows = kActTile) {
    uint8_t* aux = blk + 36 * tile_rows + 4 * col;
    switch (kind) {
        case ActAux::Corr: {
            const int32_t corr = -offset * (lo + hi);
            std::memcpy(aux, &corr, 4);
            return;
        }
        case ActAux::Q4K: {
            const float s = d * static_cast<float>(lo + hi);
            std::memcpy(aux, &s, 4);
            return;
        }
        case ActAux::Q6K: {
            const uint32_t pair = static_cast<uint16_t>(lo) | (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16);
            std::memcpy(aux, &pair, 4);
            return;
        }
    }
}

struct GemmTask {
    int64_t K = 0;               // elements per row (weights and activations)
    const uint8_t* w = nullptr;  // packed weights: the first group to compute
    size_t w_group_bytes = 0;    // bytes per group of kPackRows rows
    int64_t n_groups = 0;        // groups to compute
    const uint8_t* x = nullptr;  // activation tiles (act_tile_bytes(K) apart)
    int64_t M = 0;               // output rows (>= 1: op_mul_mat skips empty products); activation rows are M * pairs
    int pairs = 1;               // 2: activation rows 2m and 2m+1 (a row and its residual) add into output m
    float* y = nullptr;          // output m, weight row n (relative to the first group): y[m * y_stride + n]
    int64_t y_stride = 0;        // floats
    uint8_t* scratch = nullptr;  // this thread's PackedKernels::gemm_scratch_bytes(K) bytes, 64-byte aligned
};

using GemmFn = void (*)(const GemmTask& t);

struct PackedKernels {
    int32_t offset;  // what the packed layout adds to each quant
    // Converts one row of K floats into column `col` of an activation tile; with_resid also
    // writes the quantization residual x - dequant(q) into column col + 1 (precise mode,
    // MatmulPrecision::Precise; col is then even).
    void (*quantize_act)(const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid);
    void (*gemm)(const GemmTask& t);
    // Activation formats other than the q8 tiles (F16/BF16 weights: BF16 or F32 tiles of
    // kActTile rows). Bytes of one tile of K-element rows; null: act_tile_bytes (q8 tiles).
    size_t (*tile_bytes)(int64_t K) = nullptr;
    // Kernels precise mode uses instead of residual pairs (F16/BF16 weights: exact F32
    // products); null: these kernels with pairs == 2.
    const PackedKernels* precise = nullptr;
    // Kernels for MatmulPrecision::Fast ("as llama.cpp") with more than kActTile activation
    // rows (prompts, batched decoding), where they differ: K-quants take activations scaled per
    // super-block there (ActScale::SuperBlock, llama.cpp's Q8_K), which their AVX-512 kernels
    // turn into one multiply less per block and row (gemm_kquants_avx512_tiles.h). Auto keeps a d
    // per block for its prompts: the coarser scales cost 2.5 x the KL divergence on Gemma 3
    // (docs/engine.md). Null: these kernels.
    const PackedKernels* coarse = nullptr;
    // Kernels for kMatrixUnitMinRows activation rows or more (rows x pairs), where they differ:
    // matrix-unit tiles with an activation format of their own (AMX int8: the q8 tiles with 16
    // rows; AMX-BF16: the BF16 matrix tiles of gemm_bf16_matrix.h). Applied after precise and
    // coarse, for one activation row per output (fast mode, and precise kernels of their own).
    // Null: these kernels.
    const PackedKernels* batch = nullptr;
    // The same for precise mode's residual pairs (pairs == 2), which the BF16 tiles do not take:
    // the AMX int8 kernels, or null (these kernels).
    const PackedKernels* batch_pairs = nullptr;
    // Kernels for a single activation row (rows x pairs == 1: generation), where they differ:
    // the F32 tiles' kernels then take the row as K contiguous floats (tile_rows 1; see
    // gemm_float_avx512.cpp, gemm_precise_row). Null: these kernels.
    const PackedKernels* single = nullptr;
    // Activation rows per tile (kActTile, kMatrixTileRows for the AMX int8 kernels, 1 for single).
    int tile_rows = kActTile;
    // Per-thread scratch the gemm needs for K-element rows (GemmTask::scratch); null: none.
    size_t (*gemm_scratch_bytes)(int64_t K) = nullptr;
    // > 0: with more than kActTile activation rows (prompts, batched decoding) a thread claims up
    // to this many weight groups at a time (a quarter of its region at most), for kernels that
    // read all the activations again in each call (GemmTask); 0: the small claims that keep a
    // generation's threads finishing together (ops_matmul.cpp, matmul_chunk_groups).
    int prompt_claim_groups = 0;
};
// k with other batch kernels: a copy, which the callers keep in a static per type and CPU
// choice (the same on every call).
inline PackedKernels with_batch(const PackedKernels& k, const PackedKernels* batch, const PackedKernels* batch_pairs) {
    PackedKernels c = k;
    c.batch = batch;
    c.batch_pairs = batch_pairs;
    return c;
}
// Activation rows (rows x pairs) from which the matrix-unit (AMX) tiles run: below, a weight
// group's unpacking (and, for F16, conversion) feeds too few rows, and it does not overlap the
// weights' stream from memory as the VNNI tiles' loads do. Batched decoding of the 1b Q4_0
// model on the Xeon (kiln-bench --parallel, t/s, AMX / VNNI): 8 sequences in precise mode
// (16 activation rows) 131 / 157, 16 (32 rows) 184 / 179, 32 (fast, 32 rows) 342 / 337.
constexpr int64_t kMatrixUnitMinRows = 32;

// What one matmul runs: the kernels of its precision mode and their activation layout.
struct PackedPlan {
    const PackedKernels* k = nullptr;
    int pairs = 1;          // activation rows per output row (GemmTask::pairs)
    size_t tile_bytes = 0;  // bytes of one activation tile (tile_rows rows)
    int tile_rows = kActTile;
};
// rows: the product's output rows; coarse: MatmulPrecision::Fast itself (not Auto's 8-bit
// prompts), which may take PackedKernels::coarse.
inline PackedPlan packed_plan(const PackedKernels& pk, int64_t K, bool precise, int64_t rows = 1, bool coarse = false) {
    const PackedKernels* k = precise && pk.precise ? pk.precise : &pk;
    const int pairs = precise && !pk.precise ? 2 : 1;
    if (coarse && !precise && k->coarse && rows > kActTile) k = k->coarse;
    if (k->single && rows * pairs == 1) k = k->single;
    if (const PackedKernels* b = pairs == 2 ? k->batch_pairs : k->batch; b && rows * pairs >= kMatrixUnitMinRows) k = b;
    return {.k = k, .pairs = pairs, .tile_bytes = k->tile_bytes ? k->tile_bytes(K) : act_tile_bytes(K), .tile_rows = k->tile_rows};
}
// Activation bytes for `rows` output rows of one matmul (every plan of a size takes the same).
inline size_t packed_act_bytes(const PackedKernels& pk, int64_t K, int64_t rows, bool precise) {
    const PackedPlan p = packed_plan(pk, K, precise, rows);
    return p.tile_bytes * static_cast<size_t>((rows * p.pairs + p.tile_rows - 1) / p.tile_rows);
}
// Per-thread gemm scratch of that plan, rounded up to whole cache lines (0: none).
inline size_t packed_gemm_scratch_bytes(const PackedKernels& pk, int64_t K, int64_t rows, bool precise) {
    const PackedPlan p = packed_plan(pk, K, precise, rows);
    return p.k->gemm_scratch_bytes ? (p.k->gemm_scratch_bytes(K) + 63) / 64 * 64 : 0;
}

// Weights that stream from memory (generation tiles, and the first tile to read each group in
// prompts) are asked for ahead of use: "near" requests into L1 kL1Ahead bytes ahead, and "far"
// ones WeightsPrefetch::far_bytes ahead. How, depends on the CPU (weights_prefetch):
// - Intel: near into L1 4 KiB ahead, far into L2 (prefetcht1) 6 KiB ahead (at least the near
//   distance + 1 KiB: Q6_K's 7.6 KiB). Generation's tiles spread their requests over their steps
//   and run them up to 1 KiB further (gemm_avx512_tiles.h add_blocks, gemm_float_avx512.cpp
//   prefetch_line_at_step, gemm_kquants_avx512_tiles.h tile_q4_K_gen_lines). The L2 requests
//   keep more lines in flight than L1's fill buffers allow: one thread streaming 300 MiB through
//   the precise q4_0 generation tile read at 83% of a plain read with the L1 requests alone and at
//   90-100% with both (L1 1-4 KiB, L2 8-24 KiB ahead all measured alike); kiln-bench tg32 on the
//   1b Q4_0 model, alternated runs: +8%.
//   With both threads streaming, the far requests 16 KiB ahead held fill buffers for a whole
//   memory latency each (the hardware's own L2 streamer had not reached those lines yet); 6 KiB
//   ahead they mostly find the streamer's lines. Measured on the AMX Xeon (2 vCPUs, family 6
//   model 167), 2 threads each streaming 256 MiB of 2048 x 5632 matrices through the precise
//   generation tiles, as a share of a plain read in the same run (16 -> 6 KiB): q4_0 0.94-0.95 ->
//   1.00-1.01, q8_0 0.98-1.01 -> 1.06-1.07, Q4_K 0.92-0.93 -> 0.94-0.96, Q6_K 0.89-0.94 -> 0.93,
//   F16 0.90-0.95 -> 1.03-1.05 (near 2-4 KiB with far 4-8 KiB: no better). kiln-bench tg32, 2
//   threads, alternated: Q4_0 48.8-51.6 -> 51.9-54.0 t/s, Q8_0 26.4-26.7 -> 28.6-28.8, Q4_K_M
//   43.1-43.9 -> 44.7-45.4, F16 13.8-14.0 -> 16.0-16.5.
// - AMD Zen 4: far into L2 only. The L1 requests cost more than they bring (its own L1
//   prefetcher follows the stream): one thread streaming 512 MiB (bench_gemm
//   M:1/precise:1/dram:1, alternated, GB/s, both -> L2 only) q8_0 13.0-16.8 -> 16.5-17.5, f16
//   15.1-15.3 -> 15.5-17.0, bf16 17.4-18.2 -> 17.7-19.9, q4_0 alike; kiln-bench tg32, 3 pairs:
//   Q4_0 39.6-45.8 -> 40.0-56.9, Q8_0 20.1-22.4 -> 20.3-25.4, F16 12.7-13.8 -> 13.3-16.3.
// - AMD Zen 5: far into every level (prefetcht0) 8 KiB ahead, no near requests. prefetcht1 is
//   reported to be dropped at times on Zen 4 (the hint lands in L2 only when it is taken);
//   prefetcht0 is not. Measured on Zen 5, 2 threads, tokens of one process alternating between
//   the settings (which cancels this VM's memory phases; median per-token time ratio, 4-6 runs
//   each): 1b Q4_0 generation 1.05 over the Zen 4 setting (T0 16 KiB ahead 1.03, 32 KiB worse
//   than the Zen 4 setting), Q8_0 1.05-1.18, Q4_K_M 1.05 (its near requests kept, see
//   prefetch_weights_part; without them 0.97); 128-token prompts Q4_0 1.04, Q8_0 1.01, Q4_K_M 1.01.
//   Far distances (prefetcht0): Q4_0 4 and 12 KiB 4-6% slower than 6-8 KiB, Q8_0 alike from 4 to
//   12 KiB. Not measured on Zen 4, which keeps its setting.
// - AMD Zen 3 (family 19h without AVX-512): far into L2 only, as on Zen 4, but 2 KiB ahead (why
//   nearer requests serve the AVX2 tiles better there was not measured; their arithmetic is not
//   the bound: fast precision, half of it, streamed no faster). Measured on 2 vCPUs of an EPYC
//   (Zen 3, 512 KiB L2 per core), 2026-12-06, 1b generation with both settings' libraries decoding
//   token by token in one process (bench/ab_builds.c, both orders, 150 tokens each, B/A time):
//   Q4_0 0.973 / 0.976, Q8_0 0.962 / 0.953, Q4_K_M 0.993 / 1.004 (its tiles' requests then ran at
//   least 6.5 KiB ahead, see prefetch_weights_part); 5 KiB ahead 0.95-0.97 (Q4_0), 8 KiB alike, 3 KiB
//   within 1% of 5 KiB. Without any requests Q4_0 took 1.22 x the time. The K-quant tiles' pieces
//   (prefetch_weights_part) make only far requests too (WeightsPrefetch::part_far_bytes), instead of
//   near ones 2 super-blocks ahead and far ones 6.5 KiB: 2 KiB ahead, Q4_K_M generation 0.996 /
//   0.983 / 0.979 / 0.997 x the time; then (with the unrolled Q6_K generation tile) 4 KiB ahead
//   against 2: Q6_K alone 0.963 / 0.969 / 0.960 / 0.966, Q4_K too 0.972 / 0.989 / 0.992 / 0.986 /
//   0.994 / 0.995 more (both at 4 KiB against 2, later, geometric means of both orders: 0.984 /
//   0.980 / 0.985); Q6_K 6 KiB ahead alike (1.001 / 0.998 / 0.994 / 1.001 x 4 KiB). One thread
//   streaming 512 MiB of Q6_K (bench_gemm q6_K/M:1/precise:1/dram:1, 3 rounds, GB/s): 2 KiB
//   10.7 / 12.5 / 11.6, 4 KiB 12.9 / 14.5 / 14.8, 6 KiB 12.0 / 12.6 / 14.2, 8 KiB 11.1 / 14.7 / 12.3.
//
// The settings are read once per tile call, into a local copy that the tile's loop passes to
// prefetch_weights. Read inside the loop (a function-local static: its first-use guard, with
// a call to the initialiser on the cold path), they made GCC keep the loop's accumulators in
// memory, a store and a reload per block. Measured on Zen 4 (bench/ab_builds.c), the two
// builds' kernels alternating call by call in one process, one thread, M = 1, 2048 x 256
// weights in L2: Q4_K 0.60 x the time, Q6_K 0.82, q4_0 0.88, F16 1.00, q8_0 1.29 (its loop of
// one 8-vpdpbusd chain per block ran faster around the reload; not understood). In 2-thread
// generation, which streams from memory, the two builds' contexts decoding tokens in turn (both
// orders, to cancel the second model's placement): Q8_0 0.92 x the time, Q4_0 1.01, Q4_K_M
// 0.97, F16 1.00 (noise about 3%). Kept out: fewer loads in the generation tiles (one load per
// q4_0 / Q4_K quant register instead of one per use; Q6_K's shared bits loaded once for 4
// blocks): 0.65-0.78 x the time in L2, but the model streamed slower, Q4_K_M 1.04-1.08.
struct WeightsPrefetch {
    bool near_l1;         // near requests (prefetch_weights; prefetch_weights_part makes them unless part_far_bytes)
    bool far_all_levels;  // far requests with prefetcht0 instead of prefetcht1
    size_t far_bytes;     // how far ahead the far requests run (with near requests at least kL1Ahead + 1 KiB; in pieces + 2.5 KiB)
    bool q8_0_gen;        // the AVX-512 q8_0 generation tiles make requests (see below)
    bool float_weights;   // the F16/BF16 tiles make requests (see below)
    size_t part_far_bytes = 0;  // > 0: prefetch_weights_part makes only far requests, this far ahead (Zen 3)
    // > 0: attention's products of few rows request the KV rows they read this far ahead, into L2
    // alone (Zen 3; ops_attention.cpp product_prefetch)
    size_t kv_far_bytes = 0;
};
// F16/BF16 weights (the float tiles of gemm_float_*.cpp) stream without software requests on
// AMD: Zen 4's hardware prefetchers follow that stream alone, and the requests only took fill
// buffers from it. kiln-bench tg32 on the 1b F16 model, 2 threads, 3 alternated pairs (t/s,
// with -> without): AVX-512 13.2-14.5 -> 17.4-19.8, AVX2 kernels (KILN_CPU=avx2) 13.8-14.3 ->
// 15.5-20.5. The q4_0 and K-quant tiles still need theirs there (without: Q4_K_M 41-50 -> 27-31
// t/s; Q8_0 26-32 -> 11 while its tiles read blocks in pairs, see q8_0_gen). On Zen 5 likewise:
// F16 generation with the Zen 5 requests (prefetcht0 8 or 16 KiB ahead) or the Zen 4 ones took
// 1.02-1.06 x the time without.
// The AVX-512 q8_0 generation tiles (one block at a time, one or two activation rows) stream
// without software requests on Zen 4 as well: one thread streaming 512 MiB (bench_gemm
// q8_0/M:1/precise:1/dram:1, alternated, GB/s) 18.1-20.9 with them (L2 6-64 KiB ahead; prefetcht0
// 8 or 16 KiB: 11.8-19.1) against 21.4-22.4 without; kiln-bench tg32 on the 1b Q8_0 model, 3
// alternated pairs: 27.3 / 30.6 / 30.9 -> 28.4 / 33.4 / 33.8 t/s. q4_0 still needs them there
// (15.3-16.5 GB/s without, 23.4-27.9 with). Zen 5 and Intel were not measured this way.
// Constant for the process. Defined out of line (gemm_scalar.cpp): as an inline function its
// function-local static was a unique symbol, which the dynamic linker shares between two builds of
// the library loaded into one process (bench/ab_builds.c), so both ran whichever setting was
// computed first.
WeightsPrefetch weights_prefetch();
namespace {
// weights_prefetch() as the kernels read it at the top of every tile (a call per weight group,
// ~27,000 a token of the 1b llama): a copy per translation unit, of internal linkage (so two
// builds of the library in one process do not share it either), read without the call through the
// PLT that perf put at ~0.15% of generation's samples.
inline const WeightsPrefetch& tile_prefetch() {
    static const WeightsPrefetch p = weights_prefetch();
    return p;
}
}  // namespace
constexpr size_t kPrefetchL1Bytes = 4096;
// The far request for the line at p.
inline void prefetch_far(const uint8_t* p, bool all_levels) {
    if (all_levels) {
        prefetch_l1(p);
    } else {
        prefetch_l2(p);
    }
}
// Prefetches the kBytes of weights at p: near (if wp.near_l1) from kL1Ahead and far from
// wp.far_bytes ahead (wp: the tile's copy of weights_prefetch()).
// Without near requests the far ones may run closer than the near distance (Zen 3's 2 KiB).
template <size_t kBytes, size_t kL1Ahead = kPrefetchL1Bytes>
inline void prefetch_weights(const WeightsPrefetch& wp, const uint8_t* p) {
    const uint8_t* far = p + (wp.near_l1 ? std::max(wp.far_bytes, kL1Ahead + 1024) : wp.far_bytes);
#pragma GCC unroll 64
    for (size_t off = 0; off < kBytes; off += 64) {
        if (wp.near_l1) prefetch_l1(p + kL1Ahead + off);
        prefetch_far(far + off, wp.far_all_levels);
    }
}

// Keeps the compiler from moving memory accesses (and prefetches) across this point; emits no
// instruction (a compiler barrier only; the CPU still reorders freely).
inline void compiler_fence() {
#if defined(__GNUC__) || defined(__clang__)
    asm volatile("" ::: "memory");
#endif
}

// The requests of prefetch_weights<kBytes, kL1Ahead> in kParts pieces, for a kernel to issue
// piece `part` at step `part` of its loop over the kBytes. Issued all at once, a block's
// requests (36 lines of L1 and 36 of L2 for a Q4_K super-block of 16 rows) waited on the fill
// buffers; spread over the super-block's 8 steps, K-quant generation ran 3-7% faster.
// The fences keep each piece at its step: without them GCC 12 tuning for Zen 4
// (-march=native = znver4) moved all 8 pieces of the unrolled AVX-512 Q6_K loop (and part of
// Q4_K's) to the top of the super-block. Measured on Zen 4 (AVX-512), one thread streaming
// 512 MiB (bench_gemm M:1/precise:1/dram:1, alternated, GB/s): Q4_K 12.4-13.5 -> 19.4-22.1,
// Q6_K 9.6-10.8 -> 19.0-23.7; kiln-bench tg32 on the 1b Q4_K_M model: 30.5-34.2 -> 41-54 t/s.
// The far requests run at least kFarPastNearBytes beyond the near ones: Q4_K's near requests go
// 4.5 KiB ahead (2 super-blocks), and with its far ones 6 KiB ahead (1.5 KiB past them) its
// products took 1.03 x the time of 7 KiB (AMX Xeon, 1b Q4_K_M generation, calls alternating
// between the settings in one process: far 5.5 / 6 / 6.5 / 7 / 7.5 / 8 KiB = 1.035 / 1 / 0.98 /
// 0.97-0.977 / 0.987 / 0.994-0.998; Q6_K, near 3.3 KiB, best at 6 KiB, 6.5-8 KiB 1.02-1.05; q4_0
// and q8_0, near 4 KiB, best at 6 KiB: 7 KiB 1.003 / 1.017, 5 KiB 1.15 / 1.03).
inline constexpr size_t kFarPastNearBytes = 2560;
// How far ahead the generation tiles that ask for one line near and one far at each line step
// (Intel: tile_q4_K_gen_lines, tile_q6_K_gen_lines and q8_0's add_blocks) make their requests:
// near (into L1) 7 KiB, far (into L2) 10 KiB. These had been tuned one distance at a time with
// the other held (near 5 / far 7 KiB, Q6_K 4.3 / 6.8); moving both out together gained. AMX
// Xeon, 2026-12-05, bench_gemm <type>/M:1/precise:1/dram:1 (one thread, 512 MiB), 3 alternated
// rounds, GB/s at near / far 5 / 7, 6 / 9, 7 / 9, 7 / 10, 7.5 / 10.5, 8 / 12, 9 / 13 KiB: Q4_K
// 15.9-16.6 / 16.6-17.0 / 16.5-17.3 / 17.1-17.8 / 16.2-16.8 / 14.5-15.4 / 14.8-15.7; Q6_K
// 15.2-15.6 / 15.6-15.8 / 15.6-16.0 / 15.5-15.9 (4.3 / 6.9: 14.4-15.1); q8_0 (4 / 7) 17.1-18.2,
// 7 / 10 17.8-18.3. kiln-bench tg32 with --profile, 3 alternated pairs: the 1b Q4_K_M model's
// gate / up products (Q4_K) 30.1-30.6 -> 32.0-33.6 GiB/s, its logits (Q6_K) 29.7-30.2 -> 30.4-32.2,
// the token 0.94-0.97 x the time; the 1b Q8_0 model's 0.985-0.99 x. q4_0's tile (288-byte blocks)
// gained nothing from 6 / 9 or 7 / 9 KiB (1b Q4_0, 3 alternated triples) and keeps 5 / 7.
inline constexpr size_t kLineNearBytes = 7168, kLineFarBytes = 10240;
template <size_t kBytes, int kParts, size_t kL1Ahead = kPrefetchL1Bytes>
inline void prefetch_weights_part(const WeightsPrefetch& wp, const uint8_t* p, int part) {
    constexpr size_t kChunk = (kBytes + kParts * 64 - 1) / (kParts * 64) * 64;
    const bool far_only = wp.part_far_bytes > 0;
    const uint8_t* far = p + (far_only ? wp.part_far_bytes : std::max(wp.far_bytes, kL1Ahead + kFarPastNearBytes));
    const size_t first = static_cast<size_t>(part) * kChunk;
    compiler_fence();
    for (size_t off = first; off < first + kChunk && off < kBytes; off += 64) {
        if (!far_only) prefetch_l1(p + kL1Ahead + off);
        prefetch_far(far + off, wp.far_all_levels);
    }
    compiler_fence();
}

// The loop of the q8-tile kernels: activation tiles are re-read for every weight group, so
// they are taken in slices of about slice_bytes that stay in L2, and the weights stream once
// per slice. Calls tile(wg, g, r0, nc, first) for every group_step-th group g (at wg; a tile
// over two groups takes g and g + 1, where g + 1 < t.n_groups) and tile of nc rows starting at
// activation row r0; first: the slice's first tile, i.e. the one whose reads bring the group
// in from memory.
template <class TileCall>
void for_each_packed_tile(const GemmTask& t, size_t slice_bytes, TileCall&& tile, int group_step = 1) {
    const int64_t rows = t.M * t.pairs;
    const size_t tile_bytes = act_tile_bytes(t.K);
    const int64_t slice = std::max<int64_t>(1, static_cast<int64_t>(slice_bytes / tile_bytes)) * kActTile;
    for (int64_t s0 = 0; s0 < rows; s0 += slice) {
        const int64_t s1 = std::min(rows, s0 + slice);
        for (int64_t g = 0; g < t.n_groups; g += group_step) {
            const uint8_t* wg = t.w + g * t.w_group_bytes;
            for (int64_t r0 = s0; r0 < s1; r0 += kActTile) {
                tile(wg, g, r0, static_cast<int>(std::min<int64_t>(kActTile, s1 - r0)), r0 == s0);
            }
        }
    }
}

// Packed kernels for weight type t in instruction set isa, falling back to the scalar
// reference for sets that have none of their own; null if t has no packed layout.
const PackedKernels* packed_kernels(Type t, Isa isa);
inline const PackedKernels* packed_kernels(Type t) { return packed_kernels(t, selected_isa()); }
// True if isa has its own (accelerated) packed kernels for t, i.e. repacking pays off.
bool packed_accelerated(Type t, Isa isa);

namespace detail {
// Converts one row of K floats into column col of an activation tile (with_resid: its
// quantization residual into col + 1, scaled as the row: one d per super-block for both),
// third field of `kind`; PackedKernels::quantize_act of every packed type is one of these.
// All round alike (x * (1/d), to nearest even), so their tiles are identical (tested).
void quantize_act_scalar(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid);
#if defined(KILN_ARCH_X86)
void quantize_act_avx2(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid);
void quantize_act_avx512(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid);
// The same into tiles of kMatrixTileRows rows (the AMX int8 kernels' activations).
void quantize_act_avx512_matrix(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid);
#endif
const PackedKernels* packed_scalar(Type t);
// PackedKernels::quantize_act of one tile kind, from one of the quantizers above.
template <void (*kQuantize)(ActAux, ActScale, const float*, int64_t, int32_t, uint8_t*, int, bool), ActAux kKind, ActScale kScale = ActScale::Block>
void quantize_act_as(const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid) {
    kQuantize(kKind, kScale, x, K, offset, tile, col, with_resid);
}
#if defined(KILN_ARCH_X86)
const PackedKernels* packed_avx512(Type t, const CpuFeatures& f);
// The q4_0 kernels of packed_avx512 with GFNI unpacking (gemm_avx512gfni.cpp); packed_avx512
// returns them where the features say GFNI (wide: with gemm_wide, where they say zen5).
const PackedKernels* packed_q4_0_avx512gfni(bool wide = false);
// The AMX int8 kernels for Q4_0 / Q8_0 weights (gemm_avx512amx.cpp), null for other types or
// where the build has none; packed_avx512 makes them the batch kernels (PackedKernels::batch)
// of its VNNI kernels where CpuFeatures::amx_int8.
const PackedKernels* packed_amx(Type t);
// Q4_0 / Q8_0 weights on AVX2 + FMA + F16C (gemm_avx2.cpp).
const PackedKernels* packed_avx2(Type t, const CpuFeatures& f);
#endif
// F16 / BF16 weights (gemm_float_*.cpp).
const PackedKernels* packed_float_scalar(Type t);
#if defined(KILN_ARCH_X86)
const PackedKernels* packed_float_avx512(Type t, const CpuFeatures& f);
const PackedKernels* packed_float_avx2(Type t, const CpuFeatures& f);
#endif
// Q4_K / Q6_K weights (gemm_kquants_*.cpp).
const PackedKernels* packed_kquants_scalar(Type t);
#if defined(KILN_ARCH_X86)
const PackedKernels* packed_kquants_avx512(Type t, const CpuFeatures& f);
// The Q6_K kernels of packed_kquants_avx512 with GFNI unpacking (gemm_kquants_avx512gfni.cpp);
// packed_kquants_avx512 returns them where the features say GFNI and not zen4.
const PackedKernels* packed_q6_K_avx512gfni();
// The GF(2) affine matrix (vgf2p8affineqb) that moves bits 4..7 of every byte to 0..3 and clears
// the rest: byte 7 - i of the matrix selects input bit src(i) for output bit i. Shared by the q4_0
// and Q6_K GFNI unpacking.
inline constexpr long long kGfniHighNibble = 0x1020408000000000LL;
// The AMX int8 kernels for Q4_K weights (gemm_kquants_avx512amx.cpp; coarse: for activations
// scaled per super-block), null for other types or where the build has none;
// packed_kquants_avx512 makes them the batch kernels of its own where CpuFeatures::amx_int8.
const PackedKernels* packed_kquants_amx(Type t, bool coarse = false);
// A Q4_K / Q6_K group decoded for prompts by the AVX-512 kernels (gemm_kquants_avx512_tiles.h):
// per super-block 64 registers of 8-bit quants (register 8j + c: elements 4c..4c+3 of sub-block
// j, or for Q6_K of 32-element block j, in the 16 rows), then 16 float scale vectors (Q4_K:
// d * sc of the 8 sub-blocks, then dmin * m; Q6_K: d * sc of the 16 sub-blocks).
constexpr size_t kKQuantDecodedBytes = 64 * 64 + 16 * 64;
void decode_kquant_group_avx512(Type t, const uint8_t* wg, int64_t nsb, uint8_t* dst);
const PackedKernels* packed_kquants_avx2(Type t, const CpuFeatures& f);
#endif
}  // namespace detail

}  // namespace kiln::cpu
