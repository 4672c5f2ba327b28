// Matrix multiplication (weights of any type x F32 activations) and row gathers.
#include <algorithm>
#include <array>
#include <span>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/rms_scale.h"
#include "core/float_convert.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_repack.h"

namespace kiln::cpu {

void op_get_rows(const Tensor& t, ComputeContext& ctx) {
    const Tensor& table = *t.src[0];
    const auto* ids = static_cast<const int32_t*>(t.src[1]->data);
    int64_t r0, r1;
    split_rows(t.ne[1], ctx.ith, ctx.nth, r0, r1);
    std::vector<uint8_t> packed_row(table.layout == Layout::Packed16 ? table.row_bytes() : 0);
    for (int64_t r = r0; r < r1; ++r) {
        auto* out = reinterpret_cast<float*>(t.row(r));
        if (table.layout == Layout::Packed16) {
            unpack_row(table.type, table.data, table.ne[0], ids[r], packed_row.data());
            dequantize_row(table.type, packed_row.data(), out, t.ne[0]);
        } else if (table.type == Type::F32) {
            std::memcpy(out, table.row(ids[r]), static_cast<size_t>(t.ne[0]) * sizeof(float));
        } else {
            dequantize_row(table.type, table.row(ids[r]), out, t.ne[0]);
        }
    }
}

namespace {

// Activations converted to the weight type's vec_dot_type live in scratch, one
// row per activation row; F32 activations with F32 weights are used in place.
bool needs_conversion(const Tensor& t, Isa isa) { return kernels(t.src[0]->type, isa).vec_dot_type != Type::F32; }

// Q8_1 carries each block's sum as s = fp16(d * sum(q)), which the *_1 formats use for their offset
// term. The residual pass cannot fix the fp16 rounding of the first pass's s by itself, so its
// blocks take over the whole remainder: s2 = exact block sum - s1.
void fix_block_sums(const float* x, const uint8_t* q1, uint8_t* q2, int64_t K) {
    const auto* b1 = reinterpret_cast<const block_q8_1*>(q1);
    auto* b2 = reinterpret_cast<block_q8_1*>(q2);
    for (int64_t b = 0; b < K / QK8_1; ++b) {
        double sum = 0;
        for (int j = 0; j < QK8_1; ++j) sum += x[b * QK8_1 + j];
        b2[b].s = fp32_to_fp16(static_cast<float>(sum - static_cast<double>(fp16_to_fp32(b1[b].s))));
    }
}

}  // namespace

size_t scratch_bytes(const Tensor& node, int nth, bool precise, Isa isa) {
    switch (node.op) {
        case Op::MulMat: {
            if (node.src[0]->layout == Layout::Packed16) {
                const PackedKernels& pk = *packed_kernels(node.src[0]->type, isa);
                const int64_t K = node.src[1]->ne[0], M = node.src[1]->nrows();
                // The activation tiles, then (from a cache line boundary) each thread's gemm scratch.
                const size_t per_thread = packed_gemm_scratch_bytes(pk, K, M, precise);
                return packed_act_bytes(pk, K, M, precise) + (per_thread ? 64 + static_cast<size_t>(nth) * per_thread : 0);
            }
            if (!needs_conversion(node, isa)) return 0;
            const Type vt = kernels(node.src[0]->type, isa).vec_dot_type;
            const int64_t K = node.src[1]->ne[0];
            const size_t rows = row_size(vt, K) * static_cast<size_t>(node.src[1]->nrows());
            // precise: the residual rows too, and a float row per thread to compute residuals in
            return precise ? 2 * rows + static_cast<size_t>(nth * K) * sizeof(float) : rows;
        }
        case Op::Attention:
            return attention_scratch_bytes(node, nth);
        default:
            return 0;
    }
}

namespace {

// Groups (of kPackRows weight rows) a thread claims at a time from its own region
// (work_regions.h). Prompts: about 8 claims per region, at most 4 groups; kernels with
// PackedKernels::prompt_claim_groups claim more: the AVX2 F16 / BF16 prompt kernel reads every
// activation row (floats) again in each call, so 4-group claims read the activations more than the
// weights (gemm_float_avx2.cpp). Generation (one activation tile): half the region, at most 32
// groups; WorkRegions::claim halves what is left for the owner as its region runs out, so the
// threads still end within about one group of each other. The weights' requests run ahead
// across claims (the region is contiguous), so a claim's size does not break the stream, but each
// claim costs an atomic on the region's line and a kernel call: 4-group claims (~6,700 a token of
// the 1b llama) were 0.6% of generation's time (AMX Xeon, 2 threads, 1b Q4_0, bench/ab_builds
// 200 steps both orders, twice: B/A time 0.9991 / 1.0112 and 0.9967 / 1.0084).
int64_t matmul_chunk_groups(int64_t n_groups, int nth, int64_t rows, int prompt_claim_groups) {
    if (rows > kActTile) {
        if (prompt_claim_groups > 0) return std::clamp<int64_t>(n_groups / (4 * static_cast<int64_t>(nth)), 1, prompt_claim_groups);
        return std::clamp<int64_t>(n_groups / (8 * static_cast<int64_t>(nth)), 1, 4);
    }
    return std::clamp<int64_t>(n_groups / (2 * static_cast<int64_t>(nth)), 1, 32);
}

// The activation format node t would quantize its input into (packed weights only).
PackedActs packed_acts_of(const Tensor& t, const PackedPlan& plan) {
    return PackedActs{.x = t.src[1], .quantize = reinterpret_cast<const void*>(plan.k->quantize_act), .offset = plan.k->offset,
                      .tile_bytes = plan.tile_bytes, .pairs = plan.pairs};
}

PackedProductPlan plan_of(const Tensor& t, bool precise, bool coarse, Isa isa) {
    const PackedKernels* k = packed_kernels(t.src[0]->type, isa);
    return {.kernels = k, .plan = packed_plan(*k, t.src[0]->ne[0], precise, t.src[1]->nrows(), coarse)};
}

// Where a group's activation tiles (one per activation format, in order of first use) and each
// thread's gemm scratch lie in the op's scratch, in bytes from its start (at address `base`): the
// first tile at the start itself (as before there were several: the start sits at 16 mod 64 here,
// and the tiles 64-aligned made 1b Q4_0 generation 1.3% slower, not understood), later ones and
// the gemm scratch from a cache line. bytes: what the layout may take at any base (scratch_bytes).
// fused: then each thread's float row for FusedActs (K floats, from a cache line), and the rows'
// chunk sums of squares (M x ceil(K / kNormChunk) doubles, shared).
struct GroupScratch {
    std::array<size_t, kMaxActFormats> tile{};
    size_t gemm = 0;  // thread ith's at gemm + ith * per_thread
    size_t per_thread = 0, bytes = 0;
    size_t fused = 0, fused_per_thread = 0;  // thread ith's row at fused + ith * fused_per_thread
    size_t sums = 0;                         // row r's chunk sums at sums + r * chunks * sizeof(double)
};
GroupScratch group_scratch(std::span<const PackedProductPlan> plans, std::span<const size_t> first, int64_t K, int64_t M, bool precise, int nth,
                           uintptr_t base, bool fused) {
    auto line_up = [base](size_t off) { return static_cast<size_t>((base + off + 63) / 64 * 64 - base); };
    GroupScratch s;
    size_t end = 0;
    for (size_t f = 0; f < first.size(); ++f) {
        const size_t act = packed_act_bytes(*plans[first[f]].kernels, K, M, precise);
        s.tile[f] = f == 0 ? 0 : line_up(end);
        end = s.tile[f] + act;
        s.bytes += act + (f == 0 ? 0 : 64);
    }
    for (const PackedProductPlan& p : plans) s.per_thread = std::max(s.per_thread, packed_gemm_scratch_bytes(*p.kernels, K, M, precise));
    if (s.per_thread) {
        s.gemm = line_up(end);
        end = s.gemm + static_cast<size_t>(nth) * s.per_thread;
        s.bytes += 64 + static_cast<size_t>(nth) * s.per_thread;
    }
    if (fused) {
        s.fused_per_thread = (static_cast<size_t>(K) * sizeof(float) + 63) / 64 * 64;
        s.fused = line_up(end);
        s.sums = s.fused + static_cast<size_t>(nth) * s.fused_per_thread;
        s.bytes += 64 + static_cast<size_t>(nth) * s.fused_per_thread + static_cast<size_t>(M * ((K + kNormChunk - 1) / kNormChunk)) * sizeof(double);
    }
    return s;
}

// The activation formats seen so far in a group, in order of first use.
struct ActFormats {
    std::array<PackedActs, kMaxActFormats> seen{};
    size_t n = 0;
    // a's index, added when new; kMaxActFormats when it is new and there is no room.
    size_t index(const PackedActs& a) {
        size_t f = 0;
        while (f < n && seen[f] != a) ++f;
        if (f == n && n < kMaxActFormats) seen[n++] = a;
        return f;
    }
};

// The activation formats of a group's products (mul_mat_group_size keeps them to kMaxActFormats):
// fmt[i] for product i, first[f] the first product of format f. Returns how many.
size_t act_formats(std::span<const Tensor* const> ts, std::span<const PackedProductPlan> plans, std::array<size_t, kMaxMulMatGroup>& fmt,
                   std::array<size_t, kMaxActFormats>& first) {
    ActFormats formats;
    for (size_t i = 0; i < ts.size(); ++i) {
        const size_t before = formats.n;
        fmt[i] = formats.index(packed_acts_of(*ts[i], plans[i].plan));
        if (formats.n > before) first[fmt[i]] = i;
    }
    return formats.n;
}

// Weights in a packed layout: activations become q8 rows (two per row in precise mode: the
// row and its quantization residual, summed by the kernel; F16/BF16 weights: BF16 or F32
// rows, see packed_plan), then each thread computes its share of the 16-row weight groups
// against all activation rows. Several products of the same activations (q, k and v; gate and
// up: mul_mat_group_size) are one index space of groups: the activations are quantized once per
// format the products take (Q4_K_M's Q4_K q and k and Q6_K v: two), and a thread done with its
// share of q goes on to k without a barrier between them.
void mul_mat_packed(std::span<const Tensor* const> ts, ComputeContext& ctx) {
    const Tensor& x = *ts[0]->src[1];  // [K, M...] F32, the same for every product
    const int64_t K = x.ne[0], M = x.nrows();
    struct Part {
        const PackedKernels* pk;
        const uint8_t* w;    // [K, N] packed
        size_t group_bytes;  // kPackRows rows
        float* y;
        int64_t y_stride;
        int64_t g_end;       // this product's groups end here in the joint index space
        size_t fmt;          // its activation format
    };
    const size_t n_parts = std::min(ts.size(), kMaxMulMatGroup);
    std::array<PackedProductPlan, kMaxMulMatGroup> plans{};
    for (size_t i = 0; i < n_parts; ++i) plans[i] = ctx.products ? ctx.products[i] : plan_of(*ts[i], ctx.precise, ctx.coarse, ctx.isa);
    std::array<size_t, kMaxMulMatGroup> fmt{};
    std::array<size_t, kMaxActFormats> first{};
    const size_t n_formats = act_formats(ts.first(n_parts), std::span(plans).first(n_parts), fmt, first);
    const FusedActs* fused = ctx.fused && ctx.fused->fused() ? ctx.fused : nullptr;
    const GroupScratch layout = group_scratch(std::span(plans).first(n_parts), std::span(first).first(n_formats), K, M, ctx.precise, ctx.nth,
                                              reinterpret_cast<uintptr_t>(ctx.scratch), fused != nullptr);
    auto* fused_row = fused ? reinterpret_cast<float*>(ctx.scratch + layout.fused + static_cast<size_t>(ctx.ith) * layout.fused_per_thread) : nullptr;
    std::array<Part, kMaxMulMatGroup> parts{};
    int64_t n_groups = 0;
    for (size_t i = 0; i < n_parts; ++i) {
        const Tensor& t = *ts[i];
        n_groups += t.src[0]->ne[1] / kPackRows;
        parts[i] = Part{.pk = plans[i].plan.k, .w = static_cast<const uint8_t*>(t.src[0]->data), .group_bytes = row_size(t.src[0]->type, K) * kPackRows,
                        .y = static_cast<float*>(t.data), .y_stride = static_cast<int64_t>(t.nb[1] / sizeof(float)), .g_end = n_groups,
                        .fmt = fmt[i]};
    }
    // The activations, quantized by all threads: row by row, or with fewer rows than threads
    // (generation) where the tiles are q8 blocks (PackedKernels::tile_bytes null: block b of a row
    // at b * kActBlockBytes of its tile, quantized alone or with its super-block) each row's blocks
    // in runs of whole super-blocks. One thread took 1.5 us for a row of 2048 and 3.9 us for 5632
    // (bench_gemm QuantizeAct, precise) while the others waited. 1b Q4_0 tg32, AMX Xeon, 4
    // alternated runs with --profile: ffn_down's products 0.98-0.985 x the time, the token
    // 0.990-0.996.
    // A fused norm's sums of squares first (fused_acts.h): each thread its rows, or with fewer rows
    // than threads its share of every row's chunks, which (and the h they write) the others then
    // read after a barrier.
    const int64_t n_chunks = (K + kNormChunk - 1) / kNormChunk;
    auto* sums = fused ? reinterpret_cast<double*>(ctx.scratch + layout.sums) : nullptr;
    if (fused && fused->needs_sums()) {
        const bool split = M < ctx.nth;
        int64_t r0 = 0, r1 = M, ch0 = 0, ch1 = n_chunks;
        if (split) {
            split_rows(n_chunks, ctx.ith, ctx.nth, ch0, ch1);
        } else {
            split_rows(M, ctx.ith, ctx.nth, r0, r1);
        }
        for (int64_t r = r0; r < r1 && ch0 < ch1; ++r) {
            fused->chunk_sums(r % x.ne[1], (r / x.ne[1]) % x.ne[2], r / (x.ne[1] * x.ne[2]), ch0, ch1, sums + r * n_chunks);
        }
        if (split) ctx.barrier();
    }
    // fused_row holds row `held_row`'s columns [held_c0, held_c1) (a second format over the same
    // columns of one row quantizes them again; Q4_K_M's q+k+v and Q4_K / Q6_K groups).
    int64_t held_row = -1, held_c0 = 0, held_c1 = 0;
    for (size_t f = 0; f < n_formats; ++f) {
        const PackedPlan& plan = plans[first[f]].plan;
        // The first format's tile starts the scratch: an earlier node may have left it there.
        const PackedActs acts = packed_acts_of(*ts[0], plan);
        if (f == 0 && ctx.acts && *ctx.acts == acts && !fused) continue;
        uint8_t* const tiles = ctx.scratch + layout.tile[f];
        const bool split_blocks = M < ctx.nth && !plan.k->tile_bytes && plan.tile_rows == kActTile;
        int64_t r0 = 0, r1 = M, b0 = 0, b1 = K / 32;
        if (split_blocks) {
            constexpr int64_t kRun = QK_K / 32;  // blocks of a super-block
            split_rows((b1 + kRun - 1) / kRun, ctx.ith, ctx.nth, b0, b1);
            b0 *= kRun;
            b1 = std::min(b1 * kRun, K / 32);
        } else {
            split_rows(M, ctx.ith, ctx.nth, r0, r1);
        }
        for (int64_t r = b0 >= b1 ? r1 : r0; r < r1; ++r) {
            const int64_t i1 = r % x.ne[1], i2 = (r / x.ne[1]) % x.ne[2], i3 = r / (x.ne[1] * x.ne[2]);
            const int64_t a = r * plan.pairs;  // activation row (and a + 1 for its residual)
            uint8_t* tile = tiles + static_cast<size_t>(a / plan.tile_rows) * plan.tile_bytes + static_cast<size_t>(b0) * kActBlockBytes;
            const int64_t n = split_blocks ? 32 * (b1 - b0) : K;
            const float* src = reinterpret_cast<const float*>(x.row(i1, i2, i3)) + 32 * b0;
            if (fused) {  // x is not there: computed from the fused nodes' inputs
                if (r != held_row || 32 * b0 != held_c0 || 32 * b0 + n != held_c1) {
                    fused->values(i1, i2, i3, 32 * b0, 32 * b0 + n, sums + r * n_chunks, fused_row);
                    held_row = r, held_c0 = 32 * b0, held_c1 = 32 * b0 + n;
                }
                src = fused_row;
            }
            plan.k->quantize_act(src, n, plan.k->offset, tile, static_cast<int>(a % plan.tile_rows), plan.pairs == 2);
        }
        if (f == 0 && ctx.acts) *ctx.acts = acts;
    }
    // This thread's gemm scratch, the largest any product of the group takes.
    uint8_t* gemm_scratch = layout.per_thread ? ctx.scratch + layout.gemm + static_cast<size_t>(ctx.ith) * layout.per_thread : nullptr;
    const int64_t chunk = matmul_chunk_groups(n_groups, ctx.nth, M * plans[0].plan.pairs, plans[0].plan.k->prompt_claim_groups);
    if (ctx.work && ctx.ith == 0) ctx.work->reset(n_groups, ctx.nth);
    ctx.barrier();  // activations ready (and the work regions set) for every thread
    // Joint groups [g0, g1), cut where one product ends and the next begins.
    auto run = [&](int64_t g0, int64_t g1) {
        int64_t base = 0;
        for (size_t i = 0; i < n_parts && g0 < g1; base = parts[i].g_end, ++i) {
            const Part& p = parts[i];
            if (g0 >= p.g_end) continue;
            const int64_t e = std::min(g1, p.g_end), l0 = g0 - base;
            p.pk->gemm(GemmTask{.K = K,
                                .w = p.w + static_cast<size_t>(l0) * p.group_bytes,
                                .w_group_bytes = p.group_bytes,
                                .n_groups = e - g0,
                                .x = ctx.scratch + layout.tile[p.fmt],
                                .M = M,
                                .pairs = plans[i].plan.pairs,
                                .y = p.y + l0 * kPackRows,
                                .y_stride = p.y_stride,
                                .scratch = gemm_scratch});
            g0 = e;
        }
    };
    if (!ctx.work) {  // no shared regions: an even static split
        int64_t g0, g1;
        split_rows(n_groups, ctx.ith, ctx.nth, g0, g1);
        if (g0 < g1) run(g0, g1);
        return;
    }
    // Claimed in chunks: a thread that the VM or the memory system slows down is helped
    // with the rest of its region instead of holding up the barrier.
    for (int64_t g0, g1; ctx.work->claim(ctx.ith, chunk, g0, g1);) run(g0, g1);
}

}  // namespace

size_t mul_mat_group_size(std::span<Tensor* const> nodes, bool precise, bool coarse, Isa isa, PackedProductPlan* plans) {
    auto packed = [](const Tensor& n) { return n.op == Op::MulMat && n.src[0]->layout == Layout::Packed16 && n.src[1]->nrows() > 0; };
    if (nodes.empty() || !packed(*nodes[0])) return 1;
    const PackedProductPlan p0 = plan_of(*nodes[0], precise, coarse, isa);
    if (plans) plans[0] = p0;
    ActFormats formats;
    formats.index(packed_acts_of(*nodes[0], p0.plan));
    size_t n = 1;
    // Each product's output must not be another's input (the shared x is none of theirs).
    while (n < nodes.size() && n < kMaxMulMatGroup && packed(*nodes[n]) && nodes[n]->src[1] == nodes[0]->src[1]) {
        const PackedProductPlan p = plan_of(*nodes[n], precise, coarse, isa);
        if (formats.index(packed_acts_of(*nodes[n], p.plan)) == kMaxActFormats) break;  // a third format
        if (plans) plans[n] = p;
        ++n;
    }
    return n;
}

size_t mul_mat_group_scratch_bytes(std::span<Tensor* const> nodes, std::span<const PackedProductPlan> plans, int nth, bool precise, bool fused) {
    const size_t n = std::min({nodes.size(), plans.size(), kMaxMulMatGroup});
    std::array<const Tensor*, kMaxMulMatGroup> ts{};
    std::copy_n(nodes.begin(), n, ts.begin());
    std::array<size_t, kMaxMulMatGroup> fmt{};
    std::array<size_t, kMaxActFormats> first{};
    const size_t n_formats = act_formats(std::span(ts).first(n), plans.first(n), fmt, first);
    const Tensor& x = *nodes[0]->src[1];
    return group_scratch(plans.first(n), std::span(first).first(n_formats), x.ne[0], x.nrows(), precise, nth, 0, fused).bytes;
}

void plan_idle_prefetch(std::span<const Tensor* const> nodes, int ith, int nth, size_t bytes, IdlePrefetch& idle) {
    if (idle.key == nodes[0]->src[0]->data) return;  // already planned: keep what was asked
    idle.clear();
    idle.key = nodes[0]->src[0]->data;
    const Tensor& x = *nodes[0]->src[1];
    // Only where the weights stream from memory once: generation (one activation tile).
    if (x.nrows() == 0 || x.nrows() > kActTile) return;
    const int64_t K = x.ne[0];
    int64_t n_groups = 0;
    for (const Tensor* t : nodes) n_groups += t->src[0]->ne[1] / kPackRows;
    int64_t g0, g1;
    split_rows(n_groups, ith, nth, g0, g1);  // this thread's region (WorkRegions::reset splits alike)
    int64_t base = 0;
    for (const Tensor* t : nodes) {
        if (bytes == 0 || g0 >= g1 || idle.n == IdlePrefetch::kMaxRanges) break;
        const int64_t ng = t->src[0]->ne[1] / kPackRows;
        if (g0 < base + ng) {
            const size_t group_bytes = row_size(t->src[0]->type, K) * kPackRows;
            const int64_t e = std::min(g1, base + ng);
            const size_t len = std::min(bytes, static_cast<size_t>(e - g0) * group_bytes);
            const auto* p = static_cast<const uint8_t*>(t->src[0]->data) + static_cast<size_t>(g0 - base) * group_bytes;
            idle.ranges[idle.n++] = {p, p + len};
            bytes -= len;
            g0 = e;
        }
        base += ng;
    }
}

void op_mul_mat_group(std::span<const Tensor* const> nodes, ComputeContext& ctx) {
    if (nodes[0]->src[1]->nrows() == 0) return;
    mul_mat_packed(nodes, ctx);
}

void op_mul_mat(const Tensor& t, ComputeContext& ctx) {
    const Tensor& w = *t.src[0];
    const Tensor& x = *t.src[1];
    // No rows (a ubatch none of whose positions wants logits): nothing to compute, and the
    // packed kernels take M >= 1. Every thread sees the same M, so none waits at a barrier.
    if (x.nrows() == 0) return;
    if (w.layout == Layout::Packed16) {
        const Tensor* one[] = {&t};
        mul_mat_packed(one, ctx);
        return;
    }
    const TypeKernels& k = kernels(w.type, ctx.isa);
    const int64_t K = w.ne[0], N = w.ne[1];
    const int64_t M = x.nrows();
    const size_t xrow_bytes = row_size(k.vec_dot_type, K);

    // Phase 1: convert the activation rows once, shared by all threads. Precise mode also
    // quantizes what the first pass lost (x - dequant(q1)) into a second set of rows.
    const uint8_t* xq = nullptr;
    const uint8_t* xq2 = nullptr;
    const bool precise = ctx.precise && k.vec_dot_type != Type::F32;
    if (k.vec_dot_type != Type::F32) {
        xq = ctx.scratch;
        xq2 = precise ? ctx.scratch + M * xrow_bytes : nullptr;
        float* resid = precise ? reinterpret_cast<float*>(ctx.scratch + 2 * M * xrow_bytes) + ctx.ith * K : nullptr;
        int64_t r0, r1;
        split_rows(M, ctx.ith, ctx.nth, r0, r1);
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t i1 = r % x.ne[1], i2 = (r / x.ne[1]) % x.ne[2], i3 = r / (x.ne[1] * x.ne[2]);
            const auto* xr = reinterpret_cast<const float*>(x.row(i1, i2, i3));
            uint8_t* q1 = ctx.scratch + r * xrow_bytes;
            k.from_float(xr, q1, K);
            if (precise) {
                dequantize_row(k.vec_dot_type, q1, resid, K);
                for (int64_t j = 0; j < K; ++j) resid[j] = xr[j] - resid[j];
                uint8_t* q2 = ctx.scratch + (M + r) * xrow_bytes;
                k.from_float(resid, q2, K);
                if (k.vec_dot_type == Type::Q8_1) fix_block_sums(xr, q1, q2, K);
            }
        }
        ctx.barrier();
    }
    auto xrow = [&](int64_t r) -> const void* {
        if (xq) return xq + r * xrow_bytes;
        const int64_t i1 = r % x.ne[1], i2 = (r / x.ne[1]) % x.ne[2], i3 = r / (x.ne[1] * x.ne[2]);
        return x.row(i1, i2, i3);
    };

    // Phase 2: each thread takes a range of weight rows; blocks of weight rows
    // stay in cache while every activation row streams past them.
    int64_t n0, n1;
    split_rows(N, ctx.ith, ctx.nth, n0, n1);
    constexpr int64_t kRowBlock = 16;
    for (int64_t nb = n0; nb < n1; nb += kRowBlock) {
        const int64_t ne = std::min(nb + kRowBlock, n1);
        for (int64_t m = 0; m < M; ++m) {
            const void* xr = xrow(m);
            const int64_t i1 = m % t.ne[1], i2 = (m / t.ne[1]) % t.ne[2], i3 = m / (t.ne[1] * t.ne[2]);
            auto* out = reinterpret_cast<float*>(t.row(i1, i2, i3));
            if (xq2) {
                const void* xr2 = xq2 + m * xrow_bytes;
                for (int64_t n = nb; n < ne; ++n) {
                    float s1, s2;
                    k.vec_dot(K, &s1, w.row(n), xr);
                    k.vec_dot(K, &s2, w.row(n), xr2);
                    out[n] = s1 + s2;
                }
            } else {
                for (int64_t n = nb; n < ne; ++n) k.vec_dot(K, out + n, w.row(n), xr);
            }
        }
    }
}

}  // namespace kiln::cpu
