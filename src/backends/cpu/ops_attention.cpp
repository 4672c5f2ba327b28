// Attention over the KV cache (tiling, masks and threading here; the arithmetic is in
// kernels/attn_*.cpp), and writing new K/V rows into it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/gemm_float.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/ops.h"
#include "core/kv_layout.h"
#include "core/quant.h"

namespace kiln::cpu {

void op_store_rows(const Tensor& t, ComputeContext& ctx) {
    const Tensor& dst = *t.src[0];
    const Tensor& x = *t.src[1];
    const auto* ids = static_cast<const int32_t*>(t.src[2]->data);
    // The vector converter where the instruction set has one for the cache type (the
    // reference F16 conversion took ~1% of prompt processing).
    const FromFloatFn conv = native_from_float(dst.type, ctx.isa);
    if (t.iparams[0] > 0) {  // K panels: each head's elements go down a column of its tile
        const KPanels kp{.type = dst.type, .head_dim = t.iparams[0], .n_head = dst.ne[0] / t.iparams[0], .cells = dst.ne[1]};
        // Items are (row, head), so that one row (generation) is shared too: its elements land in
        // head_dim different lines per head, which the weights streamed since the last token have
        // evicted, and one thread alone waited ~8 us per layer on them at depth 4096.
        int64_t i0, i1;
        split_rows(x.ne[1] * kp.n_head, ctx.ith, ctx.nth, i0, i1);
        constexpr int64_t kChunk = 256;
        alignas(64) uint8_t elems[kChunk * sizeof(float)];
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t r = i / kp.n_head, h = i % kp.n_head;
            const auto* src = reinterpret_cast<const float*>(x.row(r));
            for (int64_t d0 = 0; d0 < kp.head_dim; d0 += kChunk) {
                const int64_t n = std::min(kChunk, kp.head_dim - d0);
                const float* part = src + h * kp.head_dim + d0;
                if (conv) conv(part, elems, n);
                else quantize(dst.type, part, elems, 1, n);
                kp.scatter(dst.data, ids[r], h, d0, elems, n);
            }
        }
        return;
    }
    int64_t r0, r1;
    split_rows(x.ne[1], ctx.ith, ctx.nth, r0, r1);
    if (t.iparams[1] > 0) {  // head-major rows: each head's part of the row goes to its own region
        const HeadMajorRows hm{.type = dst.type, .head_dim = t.iparams[1], .cells = dst.ne[1]};
        for (int64_t r = r0; r < r1; ++r) {
            const auto* src = reinterpret_cast<const float*>(x.row(r));
            for (int64_t h = 0; h < dst.ne[0] / hm.head_dim; ++h) {
                uint8_t* out = hm.row(dst.data, ids[r], h);
                if (conv) conv(src + h * hm.head_dim, out, hm.head_dim);
                else quantize(dst.type, src + h * hm.head_dim, out, 1, hm.head_dim);
            }
        }
        return;
    }
    for (int64_t r = r0; r < r1; ++r) {
        const auto* src = reinterpret_cast<const float*>(x.row(r));
        if (conv) conv(src, dst.row(ids[r]), dst.ne[0]);
        else quantize(dst.type, src, dst.row(ids[r]), 1, dst.ne[0]);
    }
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// How a dense key block's two products run (attend_item picks one per item).
enum class Products : uint8_t { F32, Bf16, F16 };
// A query block gathers each token's keys when fewer than 1 / kGatherRatio of the keys in its span are
// visible: gathering costs a copy of every visible K and V row per token, the dense blocks the scores
// of every key in the span for every token (causal prompts see about half of it, and stay dense).
constexpr int64_t kGatherRatio = 4;
// Within a gathering block, a token's run of at least this many consecutive visible cells (its
// sequence's prompt, say) is read in dense blocks instead (16 sequences of 512-token prompts
// decoding together, every key gathered before: attention 2.8-2.9 -> 0.9-1.1 ms a token, Zen 4,
// kiln-bench -m 1b-q4_0.gguf -p 0 -n 16 --parallel 16 --parallel-prompt 512 --profile).
constexpr int64_t kDenseRun = 32;

// Asks for n rows of `bytes` bytes each, `stride` apart, to be brought into L2. One KV head's
// rows are strided in the cache (a cell holds every KV head), which the hardware prefetchers
// follow poorly: attention in generation waited on these loads more than it computed.
void prefetch_rows(const uint8_t* first, size_t stride, int64_t n, size_t bytes) {
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* row = first + static_cast<size_t>(i) * stride;
        for (size_t off = 0; off < bytes; off += 64) prefetch_l2(row + off);  // kernels/kernels.h
    }
}

// Floats rounded up to a 64-byte multiple, so every scratch region starts on a cache line.
constexpr size_t line_floats(int64_t n) { return static_cast<size_t>((n + 15) / 16 * 16); }

// How op_attention splits and tiles one node; scratch_bytes and the op compute it from the same inputs.
struct AttnPlan {
    int64_t hd = 0, hdv = 0, n_head_kv = 0, n_rep = 0, n_tokens = 0, n_kv = 0;
    int64_t bq = 1;       // tokens per query block; its M = bq * n_rep rows share each K/V block
    int64_t bk = 128;     // keys per block (K^T, V and the score tile stay in L1/L2)
    int64_t ldv = 16;     // hdv padded to the kernels' lanes
    int64_t n_qb = 1;     // query blocks
    int64_t n_split = 1;  // key ranges per (query block, KV head); > 1: partial results merged after a barrier
    int64_t split_len = 0;
    bool staged = false;  // K/V type the kernels cannot read: rows dequantized to float first
    bool k_panels = false;  // K stored as K^T tiles (core/kv_layout.h); blocks then start on panel boundaries
    KPanels kp;
    // Per-thread regions, in floats from the thread's base.
    size_t q_off = 0, kt_off = 0, v_off = 0, s_off = 0, o_off = 0, stat_off = 0, stage_off = 0, range_off = 0;
    size_t gather_off = 0;  // gathered keys: mask values [bk], raw rows [bk, max(hd, hdv)] (floats or cache rows)
    // BF16 products (fast precision): Q [M, hp], K^T [hp, bk], P [M, bk / 2] and V [bk / 2, ldv] in pairs
    // FP16 products: Q [M, hd] and P [M, bk] in fp16 in the regions of QB and PB, Q's inverse row scales [M]
    size_t qb_off = 0, kb_off = 0, pb_off = 0, vb_off = 0, qinv_off = 0;
    int64_t hp = 0;  // pairs per Q / K row: (hd + 1) / 2
    size_t vis_off = 0;  // a token's visible cells (gathered path): int32 [n_kv + kAttnLanes]
    size_t per_thread = 0;
    size_t partial_floats = 0;  // per item when n_split > 1: O [M, ldv], then m [M] and l [M]
    // Mixed sequences with K panels: gathered keys are read from float rows [kr_cells][kr_ld] of
    // their KV head (per thread, at krows_off), converted from the panels a panel at a time as
    // gathered keys first need them (KRows), so each key is one contiguous row instead of head_dim
    // lines of its panel. A thread takes its items KV head by KV head, so the rows serve all of them.
    bool k_rows = false;
    int64_t kr_cells = 0, kr_ld = 0;
    size_t krows_off = 0, krows_done_off = 0;

    WeightsPrefetch wp{};  // the CPU's prefetch settings (kernels/gemm.h), for product_prefetch
    FromFloatFn to_bf16 = nullptr, to_f16 = nullptr;  // the backend's converters for Q (op_attention sets them)

    int64_t M() const { return bq * n_rep; }
    int64_t n_items() const { return n_qb * n_head_kv * n_split; }
};

// Key ranges from which a few items are cut into more (make_plan): below, the merge's barrier
// would cost more than the balance brings.
constexpr int64_t kSplitMinKeys = 1024;
// Items per thread that splitting the keys aims at. 8 (ranges of 1024 keys for the 1b model's 4 KV
// heads on 2 threads) let a slowed thread be helped sooner, but each item costs its start, its
// partial result and the merge after a barrier: with 2 (whole KV heads there, no merge) generation's
// attention took 0.956-0.974 x the time at depth 4096, 0.952 at 2048 and 0.908 at 1024 (1b Q4_0;
// Q4_K_M at 4096 0.946), waits at the op's end included (AMX Xeon, 2026-12-05, layers alternating
// between the two in one process).
constexpr int64_t kSplitItemsPerThread = 2;

AttnPlan make_plan(const Tensor& t, int nth) {
    const Tensor& q = *t.src[0];
    const Tensor& k = *t.src[1];
    const Tensor& v = *t.src[2];
    AttnPlan p;
    p.hd = q.ne[0];
    p.hdv = v.ne[0];
    p.n_head_kv = k.ne[1];
    p.n_rep = q.ne[1] / k.ne[1];
    p.n_tokens = q.ne[2];
    p.n_kv = k.ne[2];
    // About 64 query rows per tile: enough reuse of each converted K/V block to make the
    // kernels compute bound, while Q, S and O of the tile stay in L2.
    p.bq = std::clamp<int64_t>(64 / p.n_rep, 1, std::max<int64_t>(p.n_tokens, 1));
    // Generation (one query token) takes 256 keys per block: fewer per-block costs (the softmax's
    // setup, the products' calls), 0.986-0.989 x the op's time at depth 4096 (1b Q4_0, AMX Xeon,
    // layers alternating in one process; 512: 0.980-0.990, 64: 1.026).
    p.bk = p.hd <= 128 ? (p.n_tokens == 1 ? 256 : 128) : 64;
    p.ldv = attn_pad(p.hdv);
    p.n_qb = (p.n_tokens + p.bq - 1) / p.bq;
    // Too few (query block, KV head) items for the threads to finish together: split the keys too.
    // Items that do not divide evenly (one token with a single KV head, say) get one range per
    // thread; over long ranges (generation at depth) each item is cut into ranges of at least 2
    // blocks, up to kSplitItemsPerThread items per thread, so a thread that the machine slows down
    // for a while can be helped with the rest of its share (work regions in op_attention).
    const int64_t q_items = p.n_qb * p.n_head_kv;
    if (nth > 1 && q_items < 4 * nth && p.n_kv >= 2 * p.bk) {
        p.n_split = q_items % nth != 0 ? nth : 1;
        if (p.n_kv >= kSplitMinKeys) {
            p.n_split = std::max(p.n_split, std::min((kSplitItemsPerThread * nth + q_items - 1) / q_items, p.n_kv / (2 * p.bk)));
        }
    }
    p.split_len = (p.n_kv + p.n_split - 1) / p.n_split;
    p.k_panels = t.iparams[0] != 0;
    if (p.k_panels) {
        // the cache's cell count: the view's source is the cache (or store_rows into it)
        p.kp = KPanels{.type = k.type, .head_dim = p.hd, .n_head = p.n_head_kv, .cells = k.src[0]->ne[1]};
        p.split_len = KPanels::padded_cells(p.split_len);
    }
    p.staged = !attn_native_type(k.type) || !attn_native_type(v.type);
    p.wp = weights_prefetch();
    p.k_rows = p.k_panels && t.iparams[1] != 0 && p.n_tokens > 1;
    if (p.k_rows) {
        p.kr_cells = KPanels::padded_cells(p.n_kv);
        p.kr_ld = attn_pad(p.hd);
    }

    const int64_t M = p.M();
    size_t off = 0;
    auto take = [&](size_t& at, int64_t floats) {
        at = off;
        off += line_floats(floats);
    };
    take(p.q_off, M * p.hd);
    take(p.kt_off, p.hd * p.bk);
    take(p.v_off, p.bk * p.ldv);
    take(p.s_off, M * p.bk);
    take(p.o_off, M * p.ldv);
    take(p.stat_off, 3 * M);  // running max, running sum, correction of this block
    take(p.stage_off, p.staged ? p.bk * std::max(p.hd, p.hdv) : 0);
    take(p.range_off, 2 * p.bq * static_cast<int64_t>(sizeof(int64_t) / sizeof(float)));
    take(p.gather_off, p.bk * (1 + std::max(p.hd, p.hdv)));
    p.hp = (p.hd + 1) / 2;
    take(p.qb_off, M * p.hp);
    take(p.kb_off, p.hp * p.bk);
    take(p.pb_off, M * p.bk / 2);
    take(p.vb_off, p.bk / 2 * p.ldv);
    take(p.qinv_off, M);
    take(p.vis_off, p.n_kv + kAttnLanes);
    take(p.krows_off, p.k_rows ? p.kr_cells * p.kr_ld : 0);
    take(p.krows_done_off, p.k_rows ? (p.kr_cells / kKPanelCells + 3) / 4 : 0);
    p.per_thread = off;
    p.partial_floats = p.n_split > 1 ? line_floats(M * p.ldv + 2 * M) : 0;
    return p;
}

// Whole rows of `stride` bytes ahead, at least one and about `bytes`: a request this far lands on a
// row of the same head however the rows are strided.
size_t rows_ahead(size_t bytes, size_t stride) { return std::max<size_t>(1, bytes / stride) * stride; }

// How far ahead product_prefetch's far requests run when it makes the products' own requests; 0
// where it asks for the next block's rows instead (product_prefetch says which CPUs do which).
size_t own_stream_far_bytes(const WeightsPrefetch& wp) {
    if (wp.kv_far_bytes > 0) return wp.kv_far_bytes;
    return wp.near_l1 && !wp.far_all_levels ? wp.far_bytes : 0;
}

// The requests a product of few rows (generation) makes while it reads its B rows (row i at
// b + i * stride): on CPUs whose weight tiles make near requests (Intel, kernels/gemm.h
// weights_prefetch) its own stream further on, rows about 4 KiB ahead into L1 and 6 KiB into L2 as
// the weights' tiles ask for theirs (the stream runs on through the item's next blocks, which follow
// in the cache); on Zen 3 (wp.kv_far_bytes) its own stream 2 KiB ahead into L2 alone; elsewhere
// `next`, the next key block's rows (AMD, measured on Zen 4). On the AMX Xeon the next block's rows
// alone held a fill buffer each for a whole memory latency: attention at depth 4096 read its 88 MiB
// at 17-19 GiB/s where a plain read of the same blocks took 25.5; with the near and far requests the
// op took 0.94-0.95 x the time (1b Q4_0, tg32 @ d4096, layers alternating between the two in one
// process, 3 runs). On Zen 3 `next` measured no better than no requests at all (bench_kernels
// attn_tg1_kv4096_dram/f16/k_panels/avx2, t1 / t2 us, 3 alternated rounds: next 791-841 / 441-563,
// none 808-883 / 432-463, own stream 2 KiB ahead 747-819 / 407-423; 4 KiB alike, 8 KiB 752-769 /
// 435-597); 1b Q4_0 generation at depth 4096 (bench/ab_builds.c, both orders) took 0.987 x the time
// with the stream 4 KiB ahead, 0.993 x that again at 2 KiB.
AttnPrefetch product_prefetch(const WeightsPrefetch& wp, const uint8_t* b, size_t stride, int64_t rows, size_t row_bytes,
                              const AttnPrefetch& next) {
    const size_t far_bytes = own_stream_far_bytes(wp);
    if (far_bytes == 0 || stride == 0) return next;
    const size_t far = rows_ahead(far_bytes, stride), near = std::min(rows_ahead(kPrefetchL1Bytes, stride), far - stride);
    // near requests into L1 where the weight tiles make them (Intel)
    return AttnPrefetch{.first = b + far, .stride = stride, .rows = rows, .row_bytes = row_bytes,
                        .l1_back = wp.near_l1 ? far - near : 0};
}

// S [Mb, bk] = Q [Mb, hd] K^T for the keys c0 .. c0 + nk of KV head hk, K stored as rows: the block is
// transposed (and converted to float) into KT [hd, bk] first.
void attend_k_rows(const Tensor& k, const AttnPlan& p, const AttnKernels& kern, int64_t c0, int64_t nk, int64_t hk,
                   const float* Q, int64_t Mb, float* KT, float* stage, float* S) {
    const int64_t hd = p.hd, bk = p.bk, nkp = attn_pad(nk);
    const uint8_t* krows = k.row(hk, c0);
    if (p.staged) {
        for (int64_t i = 0; i < nk; ++i) dequantize_row(k.type, krows + i * k.nb[2], stage + i * hd, hd);
        kern.k_transpose(Type::F32, reinterpret_cast<const uint8_t*>(stage), hd * sizeof(float), nullptr, nk, hd, KT, bk);
    } else {
        kern.k_transpose(k.type, krows, k.nb[2], nullptr, nk, hd, KT, bk);
    }
    kern.gemm(Mb, nkp, hd, Q, hd, Type::F32, reinterpret_cast<const uint8_t*>(KT), bk * sizeof(float), nkp, S, bk, nullptr,
              nullptr);
}

// The same with K in panels (c0 on a panel boundary): a tile is already K^T. Few query rows (generation) read it
// as stored, converting each element once; many rows get a float copy first (row by row, no transpose). Columns
// nk .. attn_pad(nk) read cells past the block, still inside its panel: their scores are never used.
// The n_next cells from c0 + bk (the next block) are prefetched meanwhile: tile by tile inside the
// products when they read the panels directly, else at once.
void attend_k_panels(const Tensor& k, const AttnPlan& p, const AttnKernels& kern, int64_t c0, int64_t nk, int64_t hk,
                     int64_t n_next, const float* Q, int64_t Mb, float* KT, float* S) {
    const int64_t hd = p.hd, bk = p.bk, nkp = attn_pad(nk);
    const bool direct = k.type == Type::F32 || Mb <= 8;
    if (!direct) {
        for (int64_t j = 0; j < n_next; j += kKPanelCells) prefetch_rows(p.kp.tile(k.data, c0 + bk + j, hk), 0, 1, p.kp.tile_bytes());
    }
    for (int64_t j = 0; j < nkp; j += kKPanelCells) {
        const uint8_t* tile = p.kp.tile(k.data, c0 + j, hk);
        const int64_t cols = std::min(kKPanelCells, nkp - j);
        if (direct) {
            // (the next block's tile j exists only where the block has cells there)
            const AttnPrefetch next{.first = j < n_next ? p.kp.tile(k.data, c0 + bk + j, hk) : nullptr,
                                    .stride = p.kp.tile_row_bytes(), .rows = j < n_next ? hd : 0,
                                    .row_bytes = p.kp.tile_row_bytes()};
            const AttnPrefetch pf = product_prefetch(p.wp, tile, p.kp.tile_row_bytes(), hd, p.kp.tile_row_bytes(), next);
            kern.gemm(Mb, cols, hd, Q, hd, k.type, tile, p.kp.tile_row_bytes(), kKPanelCells, S + j, bk, nullptr, &pf);
        } else {
            kern.v_rows(k.type, tile, p.kp.tile_row_bytes(), hd, kKPanelCells, KT + j, bk);
        }
    }
    if (!direct) {
        kern.gemm(Mb, nkp, hd, Q, hd, Type::F32, reinterpret_cast<const uint8_t*>(KT), bk * sizeof(float), nkp, S, bk, nullptr,
                  nullptr);
    }
}

// Rows of n floats as BF16 pairs (an odd n's last pair takes a zero).
void rows_to_bf16(FromFloatFn conv, const float* x, int64_t ldx, int64_t rows, int64_t n, uint32_t* dst, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r) {
        auto* out = reinterpret_cast<uint16_t*>(dst + r * ld);
        conv(x + r * ldx, out, n);
        if (n % 2) out[n] = 0;
    }
}

// Rows of n floats scaled by powers of two to a largest |x| in [1, 2) and rounded to fp16 (the FP16
// products' A operand): dst [rows, n], inv[r] = the scale undone. tmp: n floats.
void rows_to_f16_scaled(FromFloatFn conv, const float* x, int64_t ldx, int64_t rows, int64_t n, float* tmp,
                        uint16_t* dst, float* inv) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * ldx;
        // the largest |x| as the largest magnitude's bits (an integer max vectorizes; a NaN's bits
        // exceed every finite value's, and half_row_scale gives 1 for it)
        uint32_t amax = 0;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::bit_cast<uint32_t>(row[i]) & 0x7fffffffu);
        const float s = float_gemm::half_row_scale(std::bit_cast<float>(amax));
        for (int64_t i = 0; i < n; ++i) tmp[i] = row[i] * s;
        conv(tmp, dst + r * n, n);
        inv[r] = 1.0f / s;
    }
}

// K^T of the keys c0 .. c0 + nk of KV head hk in BF16 pairs, KB [hp, bk] (columns nk .. attn_pad(nk)
// zeros, or for K panels the cells past the block, whose scores are never used).
void k_block_bf16(const Tensor& k, const AttnPlan& p, const AttnKernels& kern, int64_t c0, int64_t nk, int64_t hk,
                  float* KT, float* stage, uint32_t* KB) {
    const int64_t hd = p.hd, bk = p.bk, nkp = attn_pad(nk);
    if (p.k_panels) {  // the panels are K^T already: pairs of their rows
        for (int64_t j = 0; j < nkp; j += kKPanelCells) {
            kern.bf16_pairs(k.type, p.kp.tile(k.data, c0 + j, hk), p.kp.tile_row_bytes(), hd,
                            std::min(kKPanelCells, nkp - j), KB + j, bk);
        }
        return;
    }
    const uint8_t* krows = k.row(hk, c0);
    if (p.staged) {
        for (int64_t i = 0; i < nk; ++i) dequantize_row(k.type, krows + i * k.nb[2], stage + i * hd, hd);
        kern.k_transpose(Type::F32, reinterpret_cast<const uint8_t*>(stage), hd * sizeof(float), nullptr, nk, hd, KT, bk);
    } else {
        kern.k_transpose(k.type, krows, k.nb[2], nullptr, nk, hd, KT, bk);
    }
    kern.bf16_pairs(Type::F32, reinterpret_cast<const uint8_t*>(KT), bk * sizeof(float), hd, nkp, KB, bk);
}

// The online softmax of one key block for a run of up to 16 rows: row i's scores at s + i * lds go
// through softcap and the mask row_mask(i) gives it (nullptr: the row sees no key of the block, P = 0),
// then exp(s - new running max). mx and sum are the rows' running maxima and sums; corr[i] the factor
// row i's output must be scaled by before this block's P V is added (1 where it sees nothing, 0 on its
// first visible block). The output factors come from one vector exp for the run (a libm expf per row
// and block was 4% of generation's attention). pb: P goes there in BF16 or fp16 (exp_half:
// exp_row_bf16 or exp_row_f16; row i at pb + i * ldpb, nk rounded up to even: BF16 pairs) instead of
// over s. Returns bit i set where row i saw a key.
constexpr int64_t kSoftmaxRun = 16;  // softmax_rows' most rows (bits of its result)
// Bytes of the lines the exp pass asks for per row of nk scores (exp_row_f16's pf: a line per 16).
constexpr size_t softmax_request_bytes(int64_t nk) { return static_cast<size_t>((nk + 15) / 16) * 64; }
template <class RowMask>
uint32_t softmax_rows(const AttnKernels& kern, int64_t nr, float* s, int64_t lds, RowMask row_mask, int64_t nk, float softcap,
                      float* mx, float* sum, float* corr, uint16_t* pb, int64_t ldpb, AttnExpRowF16Fn exp_half,
                      const uint8_t* pf = nullptr) {
    uint32_t seen = 0;
    float m_new[kSoftmaxRun];
    for (int64_t i = 0; i < nr; ++i) {
        float* row = s + i * lds;
        const float* m = row_mask(i);
        const float bmax = m ? kern.score_row(row, m, nk, softcap) : kNegInf;
        corr[i] = 0.0f;  // exp(0): rows that see nothing keep their output
        if (bmax == kNegInf) {  // P = 0
            if (pb) std::fill(pb + i * ldpb, pb + i * ldpb + (nk + 1) / 2 * 2, uint16_t{0});
            else std::fill(row, row + nk, 0.0f);
            continue;
        }
        seen |= 1u << i;
        m_new[i] = std::max(mx[i], bmax);
        corr[i] = mx[i] - m_new[i];  // -inf on the row's first visible block: corr 0
    }
    kern.exp_row(corr, nr, 0.0f);
    for (int64_t i = 0; i < nr; ++i) {
        if (!(seen >> i & 1u)) continue;
        float* row = s + i * lds;
        mx[i] = m_new[i];
        const uint8_t* row_pf = pf ? pf + i * softmax_request_bytes(nk) : nullptr;
        sum[i] = sum[i] * corr[i] + (pb ? exp_half(row, nk, m_new[i], pb + i * ldpb, row_pf) : kern.exp_row(row, nk, m_new[i]));
    }
    return seen;
}

// A thread's float rows of one KV head's K (AttnPlan::k_rows), converted from the panels as needed.
struct KRows {
    float* rows = nullptr;   // [kr_cells][kr_ld]; null: gathered keys are read from the cache
    uint8_t* done = nullptr;  // [kr_cells / kKPanelCells]: panel converted
    int64_t head = -1;

    // Makes sure cell c of KV head hk is among the rows.
    void need(const Tensor& k, const AttnPlan& p, const AttnKernels& kern, int64_t hk, int64_t c) {
        if (head != hk) {
            std::fill(done, done + p.kr_cells / kKPanelCells, uint8_t{0});
            head = hk;
        }
        const int64_t panel = c / kKPanelCells;
        if (done[panel]) return;
        // The panel's tile is K^T [hd][64 cells]: its transpose is the cells' rows.
        const int64_t c0 = panel * kKPanelCells;
        kern.k_transpose(k.type, p.kp.tile(k.data, c0, hk), p.kp.tile_row_bytes(), nullptr, p.hd, kKPanelCells,
                         rows + c0 * p.kr_ld, p.kr_ld);
        done[panel] = 1;
    }
};

// Attention of one token (its n_rep query rows from r0) over only the given keys, gathered
// bk at a time into dense tiles. Batched decoding interleaves the sequences' cells, so each token sees a
// small share of the keys in its span, and the dense blocks would compute and discard the rest.
// mx, sum and corr point at the token's first row's running statistics. idx: the n_vis cells, in order.
void attend_gathered(const Tensor& t, const AttnPlan& p, const AttnKernels& kern, float* w, KRows& kr, int64_t token,
                     int64_t r0, int64_t hk, const int32_t* vis, int64_t n_vis, float* mx, float* sum, float* corr) {
    const Tensor& k = *t.src[1];
    const Tensor& v = *t.src[2];
    const auto* mask = reinterpret_cast<const float*>(t.src[3]->row(token));
    const int64_t hd = p.hd, hdv = p.hdv, bk = p.bk, ldv = p.ldv, M = p.n_rep;
    float* Q = w + p.q_off + r0 * hd;
    float* KT = w + p.kt_off;  // [hd, bk]
    float* S = w + p.s_off + r0 * bk;
    float* O = w + p.o_off + r0 * ldv;
    float* gmask = w + p.gather_off;                        // [bk]
    auto* raw = reinterpret_cast<uint8_t*>(gmask + bk);     // [bk] rows of up to max(hd, hdv) floats
    // K is transposed straight from where its rows are (K_rows, the cache's rows) by index; rows of
    // types the kernels cannot read and keys spread over panels are first copied to `raw` as floats
    // or cache rows. V rows are always copied (the product reads them at one stride).
    const bool v_float = !attn_native_type(v.type);
    const size_t vrb = v_float ? hdv * sizeof(float) : row_size(v.type, hdv);
    for (int64_t i0 = 0; i0 < n_vis; i0 += bk) {
        const int64_t nk = std::min(bk, n_vis - i0);
        const int32_t* idx = vis + i0;
        for (int64_t i = 0; i < nk; ++i) gmask[i] = mask[idx[i]];
        const int64_t nkp = attn_pad(nk);
        if (kr.rows) {
            for (int64_t i = 0; i < nk; ++i) kr.need(k, p, kern, hk, idx[i]);
            kern.k_transpose(Type::F32, reinterpret_cast<const uint8_t*>(kr.rows), p.kr_ld * sizeof(float), idx, nk, hd, KT,
                             bk);
        } else if (!p.k_panels && attn_native_type(k.type)) {
            kern.k_transpose(k.type, k.row(hk, 0), k.nb[2], idx, nk, hd, KT, bk);
        } else {
            const bool k_float = !p.k_panels;  // panels hold a native type; other caches are dequantized
            const size_t krb = k_float ? hd * sizeof(float) : row_size(k.type, hd);
            for (int64_t i = 0; i < nk; ++i) {
                uint8_t* dst = raw + static_cast<size_t>(i) * krb;
                if (p.k_panels) p.kp.gather(k.data, idx[i], hk, 0, dst, hd);
                else dequantize_row(k.type, k.row(hk, idx[i]), reinterpret_cast<float*>(dst), hd);
            }
            kern.k_transpose(k_float ? Type::F32 : k.type, raw, krb, nullptr, nk, hd, KT, bk);
        }
        kern.gemm(M, nkp, hd, Q, hd, Type::F32, reinterpret_cast<const uint8_t*>(KT), bk * sizeof(float), nkp, S, bk, nullptr,
                  nullptr);
        bool any_row = false;
        for (int64_t rc = 0; rc < M; rc += kSoftmaxRun) {
            const auto mask_of = [&](int64_t) -> const float* { return gmask; };
            any_row |= softmax_rows(kern, std::min(kSoftmaxRun, M - rc), S + rc * bk, bk, mask_of, nk, t.fparams[1], mx + rc,
                                    sum + rc, corr + rc, nullptr, 0, nullptr) != 0;
        }
        if (!any_row) continue;
        for (int64_t i = 0; i < nk; ++i) {
            uint8_t* dst = raw + static_cast<size_t>(i) * vrb;
            if (v_float) dequantize_row(v.type, v.row(hk, idx[i]), reinterpret_cast<float*>(dst), hdv);
            else std::memcpy(dst, v.row(hk, idx[i]), vrb);
        }
        kern.gemm(M, ldv, nk, S, bk, v_float ? Type::F32 : v.type, raw, vrb, hdv, O, ldv, corr, nullptr);
    }
}

// The keys the tokens of query block qb see in key range `split`: each token's first and one past its
// last visible key (range [nt][2]), and the union's; gather: few of the keys in the tokens' spans are
// visible (sequences interleaved in batched decoding), so each token attends to its own keys,
// gathered, instead of the query block computing every score of the span.
struct ItemKeys {
    int64_t first = 0, last = 0;
    bool gather = false;
};

ItemKeys item_keys(const Tensor& mask, const AttnPlan& p, const AttnKernels& kern, int64_t qb, int64_t split, int64_t* range) {
    const int64_t t0 = qb * p.bq, nt = std::min(p.bq, p.n_tokens - t0);
    const int64_t c_lo = split * p.split_len, c_hi = std::min(p.n_kv, c_lo + p.split_len);
    ItemKeys r{.first = c_hi, .last = c_lo};
    int64_t visible = 0;
    // (One vector pass per token: scalar scans of the masked ends and the count took ~3% of a
    // 512-token prompt's attention, more in batched decoding, where the spans are long.)
    for (int64_t tt = 0; tt < nt; ++tt) {
        const MaskSpan span = kern.mask_span(reinterpret_cast<const float*>(mask.row(t0 + tt)), c_lo, c_hi);
        range[2 * tt] = span.first;
        range[2 * tt + 1] = span.last;
        visible += span.count;
        if (span.count > 0) {
            r.first = std::min(r.first, span.first);
            r.last = std::max(r.last, span.last);
        }
    }
    r.gather = visible * kGatherRatio < nt * (r.last - r.first);
    return r;
}

float* aligned_base(uint8_t* scratch) {
    const auto a = reinterpret_cast<uintptr_t>(scratch);
    return reinterpret_cast<float*>(scratch + ((64 - a % 64) % 64));
}

// One item: query block qb against KV head hk over key range `split`. Writes the normalized output
// rows, or (n_split > 1) the unnormalized partial O with its running max and sum.
// fast: BF16 products where the kernels have them (query blocks of more than 8 rows); f16: FP16
// products where they have them (an F16 cache with K panels), at any query count.
// kr: the thread's K rows (AttnPlan::k_rows).
void attend_item(const Tensor& t, const AttnPlan& p, const AttnKernels& kern, float* w, float* partial, KRows& kr,
                 int64_t qb, int64_t hk, int64_t split, bool fast, bool f16) {
    const Tensor& q = *t.src[0];  // [hd, n_head, n_tokens] F32
    const Tensor& k = *t.src[1];  // [hd, n_head_kv, n_kv]
    const Tensor& v = *t.src[2];  // [hdv, n_head_kv, n_kv]
    const Tensor& mask = *t.src[3];  // [n_kv, n_tokens]: 0 visible, -inf hidden
    const float scale = t.fparams[0], softcap = t.fparams[1];
    const int64_t hd = p.hd, hdv = p.hdv, n_rep = p.n_rep, bk = p.bk, ldv = p.ldv;
    const int64_t t0 = qb * p.bq, nt = std::min(p.bq, p.n_tokens - t0), M = nt * n_rep;

    float* Q = w + p.q_off;    // [M, hd], row (token tt, head rr) = tt * n_rep + rr, pre-scaled
    float* KT = w + p.kt_off;  // [hd, bk]
    float* V = w + p.v_off;    // [bk, ldv]
    float* S = w + p.s_off;    // [M, bk] scores, then probabilities
    float* O = w + p.o_off;    // [M, ldv] unnormalized output
    float* mx = w + p.stat_off;
    float* sum = mx + M;
    float* corr = sum + M;
    float* stage = w + p.stage_off;                             // [bk, max(hd, hdv)] staged rows
    auto* range = reinterpret_cast<int64_t*>(w + p.range_off);  // [bq][2] visible keys of each token

    for (int64_t tt = 0; tt < nt; ++tt) {
        for (int64_t rr = 0; rr < n_rep; ++rr) {
            const auto* src = reinterpret_cast<const float*>(q.row(hk * n_rep + rr, t0 + tt));
            float* dst = Q + (tt * n_rep + rr) * hd;
            for (int64_t d = 0; d < hd; ++d) dst[d] = src[d] * scale;
        }
    }
    // FP16 products over an F16 cache with K panels where the CPU has them (Q rounded once per
    // item, scaled; P per block; K and V read as stored), else for query blocks of more than 8 rows
    // in fast precision BF16 products where it has those (Q rounded once per item; K, P and V per
    // block). The gathered path stays F32.
    const Products prod = f16 && kern.gemm_f16 && kern.exp_row_f16 && p.k_panels && k.type == Type::F16 &&
                                  v.type == Type::F16
                              ? Products::F16
                          : fast && M > 8 && kern.gemm_bf16 && kern.exp_row_bf16 ? Products::Bf16
                                                                                 : Products::F32;
    const AttnExpRowF16Fn exp_half = prod == Products::F16 ? kern.exp_row_f16 : kern.exp_row_bf16;
    const int64_t hp = p.hp;
    auto* QB = reinterpret_cast<uint32_t*>(w + p.qb_off);  // [M, hp]
    auto* KB = reinterpret_cast<uint32_t*>(w + p.kb_off);  // [hp, bk]
    auto* PB = reinterpret_cast<uint32_t*>(w + p.pb_off);  // [M, bk / 2]
    auto* VB = reinterpret_cast<uint32_t*>(w + p.vb_off);  // [bk / 2, ldv]
    auto* QH = reinterpret_cast<uint16_t*>(QB);             // [M, hd] fp16, row r scaled by 1 / qinv[r]
    float* qinv = w + p.qinv_off;                           // [M]
    if (prod == Products::Bf16) rows_to_bf16(p.to_bf16, Q, hd, M, hd, QB, hp);
    if (prod == Products::F16) rows_to_f16_scaled(p.to_f16, Q, hd, M, hd, KT, QH, qinv);
    std::fill(O, O + M * ldv, 0.0f);
    std::fill(mx, mx + M, kNegInf);
    std::fill(sum, sum + M, 0.0f);

    // Dense key blocks over [lo, last) for the tokens tt_min .. tt_max (each where its range sees the
    // block). prod: how the products run; clip: one token's run of keys, whose blocks' other cells
    // are hidden here (its scattered keys are gathered).
    float* clipped = w + p.gather_off;  // [bk] (attend_gathered's mask values, not in use meanwhile)
    auto dense_blocks = [&](int64_t lo, int64_t last, int64_t tt_min, int64_t tt_max, Products blocks, bool clip) {
        // Key blocks of K panels start on a panel (the mask hides the cells before `lo`).
        const int64_t first = p.k_panels && lo < last ? lo / kKPanelCells * kKPanelCells : lo;
        for (int64_t c0 = first; c0 < last; c0 += bk) {
            const int64_t nk = std::min(bk, last - c0), c1 = c0 + nk;
            // Only the rows of tokens that see this block are computed (in batched decoding each
            // sequence's cells are seen by its own token alone).
            int64_t tt_lo = nt, tt_hi = -1;
            for (int64_t tt = tt_min; tt <= tt_max; ++tt) {
                if (range[2 * tt] < c1 && range[2 * tt + 1] > c0) {
                    tt_lo = std::min(tt_lo, tt);
                    tt_hi = tt;
                }
            }
            if (tt_hi < 0) continue;
            const int64_t r0 = tt_lo * n_rep, Mb = (tt_hi + 1 - tt_lo) * n_rep;

            // The next block's K and V, while this one computes. The products of few rows
            // (generation) that read the cache as stored spread the requests over their loops
            // (AttnPrefetch); the others take them in two bursts, K before Q K^T and V after it (FP16
            // prompts, spread: 1.2x the time in bench_kernels attn_pp512_kv512).
            const int64_t n_next = c1 < last ? std::min(bk, last - c1) : 0;
            const bool spread = Mb <= 8;
            if (blocks == Products::F16) {  // K panels, F16: each tile's rows are B's rows as stored
                if (!spread) {
                    for (int64_t j = 0; j < n_next; j += kKPanelCells) {
                        prefetch_rows(p.kp.tile(k.data, c1 + j, hk), 0, 1, p.kp.tile_bytes());
                    }
                }
                for (int64_t j = 0; j < attn_pad(nk); j += kKPanelCells) {
                    // (the next block's tile j exists only where the block has cells there)
                    const AttnPrefetch next{.first = j < n_next ? p.kp.tile(k.data, c1 + j, hk) : nullptr,
                                            .stride = p.kp.tile_row_bytes(), .rows = j < n_next ? hd : 0,
                                            .row_bytes = p.kp.tile_row_bytes()};
                    // The panel's cells past the block read as zeros: whatever they hold (cells not yet
                    // written) must not overflow the fp16 sums and send the runs to float.
                    const uint8_t* tile = p.kp.tile(k.data, c0 + j, hk);
                    const AttnPrefetch pf = product_prefetch(p.wp, tile, p.kp.tile_row_bytes(), hd, p.kp.tile_row_bytes(), next);
                    kern.gemm_f16(Mb, std::min(kKPanelCells, attn_pad(nk) - j), hd, QH + r0 * hd, hd, tile,
                                  p.kp.tile_row_bytes(), std::min(kKPanelCells, nk - j), S + r0 * bk + j, bk, nullptr,
                                  qinv + r0, spread ? &pf : nullptr);
                }
            } else if (blocks == Products::Bf16) {
                if (n_next > 0 && p.k_panels) {
                    for (int64_t j = 0; j < n_next; j += kKPanelCells) {
                        prefetch_rows(p.kp.tile(k.data, c1 + j, hk), 0, 1, p.kp.tile_bytes());
                    }
                } else if (n_next > 0) {
                    prefetch_rows(k.row(hk, c1), k.nb[2], n_next, row_size(k.type, hd));
                }
                k_block_bf16(k, p, kern, c0, nk, hk, KT, stage, KB);
                kern.gemm_bf16(Mb, attn_pad(nk), hp, QB + r0 * hp, hp, KB, bk, S + r0 * bk, bk, nullptr);
            } else if (p.k_panels) {
                attend_k_panels(k, p, kern, c0, nk, hk, n_next, Q + r0 * hd, Mb, KT, S + r0 * bk);
            } else {
                if (n_next > 0) prefetch_rows(k.row(hk, c1), k.nb[2], n_next, row_size(k.type, hd));
                attend_k_rows(k, p, kern, c0, nk, hk, Q + r0 * hd, Mb, KT, stage, S + r0 * bk);
            }
            // (v_direct: V read as stored, its prefetch spread over the product)
            const bool v_direct = (blocks == Products::F16 && spread) ||
                                  (blocks == Products::F32 && !p.staged && (v.type == Type::F32 || spread));
            if (n_next > 0 && !v_direct) prefetch_rows(v.row(hk, c1), v.nb[2], n_next, row_size(v.type, hdv));

            // The online softmax, kSoftmaxRun rows at a time. Where the products make their own
            // requests (Intel, product_prefetch), the exp pass asks for a line of this block's V
            // per 16 scores, from where the V product's far requests will start: the softmax is
            // arithmetic alone, and without requests the memory idled through it (skipping it, a
            // timing-only switch, saved as much time as it computes). 1b Q4_0 tg32 at depth 4096,
            // AMX Xeon, 2026-12-05, alternated runs: attention 0.92-0.98 x the time; two lines per
            // 16 scores 1.03-1.10 x of one, the V product's far requests starting after these
            // lines 1.03-1.04 x, 8 KiB in bursts between the rows 0.96-0.99 x of none.
            bool any_row = false;
            const uint8_t* softmax_pf = nullptr;
            if (blocks == Products::F16 && v_direct && own_stream_far_bytes(p.wp) > 0 && nk == bk && Mb <= kSoftmaxRun) {
                const size_t far = rows_ahead(own_stream_far_bytes(p.wp), v.nb[2]);  // where product_prefetch's far requests start
                const size_t bytes = static_cast<size_t>(Mb) * softmax_request_bytes(nk);  // softmax_rows' extent
                if (far + bytes <= static_cast<size_t>(nk) * v.nb[2]) softmax_pf = v.row(hk, c0) + far;
            }
            for (int64_t rc = r0; rc < r0 + Mb; rc += kSoftmaxRun) {
                const auto mask_of = [&](int64_t i) -> const float* {
                    const int64_t r = rc + i, tt = r / n_rep;
                    if (range[2 * tt] >= c1 || range[2 * tt + 1] <= c0) return nullptr;
                    const float* m = reinterpret_cast<const float*>(mask.row(t0 + tt)) + c0;
                    if (!clip) return m;
                    // one token's run: the block's other cells are hidden (gathered instead)
                    if (r == r0) {
                        for (int64_t j = 0; j < nk; ++j) clipped[j] = c0 + j >= lo && c0 + j < last ? m[j] : kNegInf;
                    }
                    return clipped;
                };
                auto* pb = blocks != Products::F32 ? reinterpret_cast<uint16_t*>(PB + rc * (bk / 2)) : nullptr;
                any_row |= softmax_rows(kern, std::min(kSoftmaxRun, r0 + Mb - rc), S + rc * bk, bk, mask_of, nk, softcap,
                                        mx + rc, sum + rc, corr + rc, pb, bk, exp_half, softmax_pf) != 0;
            }
            if (!any_row) continue;

            // O = O * corr + P V. With few query rows (generation) the kernel reads V as stored and
            // converts each element once; many rows would convert it once per row group, so a float
            // tile is made first.
            const uint8_t* vrows = v.row(hk, c0);
            const AttnPrefetch v_next =
                product_prefetch(p.wp, vrows, v.nb[2], nk, row_size(v.type, hdv),
                                 AttnPrefetch{.first = n_next > 0 ? v.row(hk, c1) : nullptr, .stride = v.nb[2], .rows = n_next,
                                              .row_bytes = row_size(v.type, hdv)});
            if (blocks == Products::F16) {  // F16 V rows read as stored
                kern.gemm_f16(Mb, ldv, nk, reinterpret_cast<const uint16_t*>(PB + r0 * (bk / 2)), bk, vrows, v.nb[2], hdv,
                              O + r0 * ldv, ldv, corr + r0, nullptr, v_direct ? &v_next : nullptr);
                continue;
            }
            if (blocks == Products::Bf16) {
                if (p.staged) {
                    for (int64_t i = 0; i < nk; ++i) dequantize_row(v.type, vrows + i * v.nb[2], stage + i * hdv, hdv);
                    kern.bf16_pairs(Type::F32, reinterpret_cast<const uint8_t*>(stage), hdv * sizeof(float), nk, hdv, VB,
                                    ldv);
                } else {
                    kern.bf16_pairs(v.type, vrows, v.nb[2], nk, hdv, VB, ldv);
                }
                kern.gemm_bf16(Mb, ldv, (nk + 1) / 2, PB + r0 * (bk / 2), bk / 2, VB, ldv, O + r0 * ldv, ldv, corr + r0);
                continue;
            }
            if (v_direct) {
                kern.gemm(Mb, ldv, nk, S + r0 * bk, bk, v.type, vrows, v.nb[2], hdv, O + r0 * ldv, ldv, corr + r0, &v_next);
                continue;
            }
            if (p.staged) {
                for (int64_t i = 0; i < nk; ++i) dequantize_row(v.type, vrows + i * v.nb[2], stage + i * hdv, hdv);
                kern.v_rows(Type::F32, reinterpret_cast<const uint8_t*>(stage), hdv * sizeof(float), nk, hdv, V, ldv);
            } else {
                kern.v_rows(v.type, vrows, v.nb[2], nk, hdv, V, ldv);
            }
            kern.gemm(Mb, ldv, nk, S + r0 * bk, bk, Type::F32, reinterpret_cast<const uint8_t*>(V), ldv * sizeof(float), ldv,
                      O + r0 * ldv, ldv, corr + r0, nullptr);
        }
    };

    // Each token's first and last visible key in this item's range; key blocks outside every
    // token's span (the future of a causal mask, the past of a sliding window) are never read.
    const ItemKeys keys = item_keys(mask, p, kern, qb, split, range);
    if (!keys.gather) {
        dense_blocks(keys.first, keys.last, 0, nt - 1, prod, false);
    } else {
        // Each token on its own: runs of at least kDenseRun consecutive visible cells (a sequence's
        // prompt) in dense blocks, as generation reads them, the scattered rest gathered.
        auto* vis = reinterpret_cast<int32_t*>(w + p.vis_off);
        for (int64_t tt = 0; tt < nt; ++tt) {
            const int64_t r0 = tt * n_rep;
            if (range[2 * tt] >= range[2 * tt + 1]) continue;
            const auto* mrow = reinterpret_cast<const float*>(mask.row(t0 + tt));
            const int64_t n_vis = kern.mask_visible(mrow, range[2 * tt], range[2 * tt + 1], vis);
            int64_t scattered = 0;  // vis[0 .. scattered): the keys outside long runs, in order
            for (int64_t i = 0; i < n_vis;) {
                int64_t j = i + 1;
                while (j < n_vis && vis[j] == vis[j - 1] + 1) ++j;
                if (j - i >= kDenseRun) {
                    dense_blocks(vis[i], vis[j - 1] + 1, tt, tt, prod == Products::F16 || n_rep > 8 ? prod : Products::F32,
                                 true);
                } else {
                    for (int64_t c = i; c < j; ++c) vis[scattered++] = vis[c];
                }
                i = j;
            }
            if (scattered > 0) {
                attend_gathered(t, p, kern, w, kr, t0 + tt, r0, hk, vis, scattered, mx + r0, sum + r0, corr + r0);
            }
        }
    }

    if (partial) {
        std::copy(O, O + M * ldv, partial);
        std::copy(mx, mx + M, partial + M * ldv);
        std::copy(sum, sum + M, partial + M * ldv + M);
        return;
    }
    for (int64_t r = 0; r < M; ++r) {
        const int64_t tt = r / n_rep, rr = r % n_rep;
        auto* out = reinterpret_cast<float*>(t.row(t0 + tt)) + (hk * n_rep + rr) * hdv;
        const float inv = sum[r] > 0 ? 1.0f / sum[r] : 0.0f;  // a row that sees no key gives zeros
        for (int64_t c = 0; c < hdv; ++c) out[c] = O[r * ldv + c] * inv;
    }
}

// Combines the n_split partial results of (qb, hk): softmax states rescaled to the common maximum.
void merge_item(const Tensor& t, const AttnPlan& p, const float* partials, int64_t qb, int64_t hk) {
    const int64_t t0 = qb * p.bq, nt = std::min(p.bq, p.n_tokens - t0), M = nt * p.n_rep;
    const float* first = partials + ((qb * p.n_head_kv + hk) * p.n_split) * p.partial_floats;
    for (int64_t r = 0; r < M; ++r) {
        float gm = kNegInf;
        for (int64_t s = 0; s < p.n_split; ++s) gm = std::max(gm, first[s * p.partial_floats + M * p.ldv + r]);
        const int64_t tt = r / p.n_rep, rr = r % p.n_rep;
        auto* out = reinterpret_cast<float*>(t.row(t0 + tt)) + (hk * p.n_rep + rr) * p.hdv;
        std::fill(out, out + p.hdv, 0.0f);
        if (gm == kNegInf) continue;
        float total = 0.0f;
        for (int64_t s = 0; s < p.n_split; ++s) {
            const float* part = first + s * p.partial_floats;
            const float m = part[M * p.ldv + r];
            if (m == kNegInf) continue;
            const float wgt = std::exp(m - gm);
            total += wgt * part[M * p.ldv + M + r];
            for (int64_t c = 0; c < p.hdv; ++c) out[c] += wgt * part[r * p.ldv + c];
        }
        const float inv = total > 0 ? 1.0f / total : 0.0f;
        for (int64_t c = 0; c < p.hdv; ++c) out[c] *= inv;
    }
}

}  // namespace

size_t attention_scratch_bytes(const Tensor& node, int nth) {
    const AttnPlan p = make_plan(node, nth);
    const size_t floats = p.per_thread * static_cast<size_t>(nth) + p.partial_floats * static_cast<size_t>(p.n_items());
    return floats * sizeof(float) + 64;  // + alignment of the base
}

// The item at position j of the claim order of op_attention's work regions: KV head by KV head
// (a thread's contiguous region keeps to few heads, whose K rows KRows converts once), in each
// the query blocks in the order 0, last, 1, last - 1, ...: with a causal mask later blocks see
// more keys, and so any contiguous run of this order has about its share of the keys.
struct ItemAt {
    int64_t qb, hk, split;
};
ItemAt item_at(const AttnPlan& p, int64_t j) {
    const int64_t per_head = p.n_qb * p.n_split, rem = j % per_head, i = rem / p.n_split;
    return {.qb = i % 2 == 0 ? i / 2 : p.n_qb - 1 - i / 2, .hk = j / per_head, .split = rem % p.n_split};
}

// Flash-attention style: for each (query block, KV head[, key range]) item, K/V blocks are
// converted to float once and used by all M = tokens x n_rep query rows of the item, with an
// online softmax (running max and sum per row) so no n_kv-sized score row is needed. The threads
// claim items from work regions (work_regions.h, in item_at's order) where the context has them,
// else take every nth item KV head by KV head (round-robin, so with a causal mask both threads
// still get a similar share).
void op_attention(const Tensor& t, ComputeContext& ctx) {
    AttnPlan p = make_plan(t, ctx.nth);
    p.to_bf16 = native_from_float(Type::BF16, ctx.isa);
    p.to_f16 = native_from_float(Type::F16, ctx.isa);
    const AttnKernels& kern = attn_kernels(ctx.isa);
    float* base = aligned_base(ctx.scratch);
    float* w = base + p.per_thread * static_cast<size_t>(ctx.ith);
    float* partials = base + p.per_thread * static_cast<size_t>(ctx.nth);
    // The thread's items taken KV head by KV head: the K rows a gathering item converts serve the
    // thread's other items of that head.
    KRows kr;
    if (p.k_rows) {
        kr.rows = w + p.krows_off;
        kr.done = reinterpret_cast<uint8_t*>(w + p.krows_done_off);
    }
    auto attend = [&](int64_t qb, int64_t hk, int64_t split) {
        const int64_t i = (qb * p.n_head_kv + hk) * p.n_split + split;  // its partial result's place
        float* partial = p.n_split > 1 ? partials + i * p.partial_floats : nullptr;
        attend_item(t, p, kern, w, partial, kr, qb, hk, split, !ctx.precise, !ctx.attn_f32);
    };
    if (ctx.work && ctx.nth > 1) {
        if (ctx.ith == 0) ctx.work->reset(p.n_items(), ctx.nth);
        ctx.barrier();  // the regions set for every thread
        for (int64_t j0, j1; ctx.work->claim(ctx.ith, 1, j0, j1);) {
            for (int64_t j = j0; j < j1; ++j) {
                const ItemAt it = item_at(p, j);
                attend(it.qb, it.hk, it.split);
            }
        }
    } else {
        for (int64_t hk = 0; hk < p.n_head_kv; ++hk) {
            for (int64_t qb = 0; qb < p.n_qb; ++qb) {
                for (int64_t split = 0; split < p.n_split; ++split) {
                    if (((qb * p.n_head_kv + hk) * p.n_split + split) % ctx.nth == ctx.ith) attend(qb, hk, split);
                }
            }
        }
    }
    if (p.n_split == 1) return;
    ctx.barrier();
    for (int64_t i = ctx.ith; i < p.n_qb * p.n_head_kv; i += ctx.nth) {
        merge_item(t, p, partials, i / p.n_head_kv, i % p.n_head_kv);
    }
}

}  // namespace kiln::cpu
