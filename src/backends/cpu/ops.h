// CPU implementations of the graph ops (internal to the CPU backend). Each op
// runs on every thread of the pool at once and takes its share of the work
// from (ith, nth); ops with several phases call ctx.barrier() between them.
// Ops must not throw: the CPU backend validates nodes before computing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backends/cpu/fused_acts.h"
#include "backends/cpu/idle_prefetch.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/work_regions.h"
#include "core/tensor.h"

namespace kiln::cpu {

// The last cos/sin table op_rope computed on one thread: one position and one set of
// parameters. Generation rotates q and k of every layer by the same position, so each thread
// computes the table once per graph instead of twice per layer.
struct RopeTable {
    bool valid = false;
    int32_t pos = 0;
    int n_dims = 0;
    float base = 0, freq_scale = 0;
    std::vector<float> cos, sin;  // [n_dims / 2]
};

// What the shared scratch holds after a packed matmul, as one thread recorded it: the packed
// activations of x in the format `quantize` (with offset, tile_bytes, pairs) writes. Consecutive
// products of the same input (q, k and v; gate and up) then quantize it once. Cleared before any
// other kind of node (CpuBackend::compute), and per graph.
struct PackedActs {
    const Tensor* x = nullptr;  // null: nothing reusable
    const void* quantize = nullptr;
    int32_t offset = 0;
    size_t tile_bytes = 0;
    int pairs = 0;
    bool operator==(const PackedActs&) const = default;
};

// The kernels one product over packed weights runs, chosen once per graph (mul_mat_group_size)
// rather than at every call: the lookups (packed_kernels through several files' tables and
// function-local statics), their code and tables evicted by the weights streamed since, took
// 0.6-1.5 us an op in generation, 0.07-0.17 us planned (1b Q4_0, AMX Xeon; ~90 us a token).
struct PackedProductPlan {
    const PackedKernels* kernels = nullptr;  // packed_kernels(weights' type, isa); null: not planned
    PackedPlan plan;                         // packed_plan of those for this node's rows and precision
};

struct ComputeContext {
    int ith = 0;
    int nth = 1;
    std::function<void()> barrier;  // synchronises all threads of the pool
    uint8_t* scratch = nullptr;     // shared scratch, scratch_bytes(node) bytes (set per node)
    size_t scratch_size = 0;
    // MulMat: two-pass (residual) activations; Attention: no BF16 products (see MatmulPrecision)
    bool precise = false;
    // Attention: F32 products even where FP16 ones exist (MatmulPrecision::Precise itself; Auto
    // allows them at every query count, see backend.h)
    bool attn_f32 = false;
    // MulMat: MatmulPrecision::Fast itself, not Auto's 8-bit batches: llama.cpp's coarser
    // activation formats allowed (PackedKernels::coarse)
    bool coarse = false;
    // Shared by all threads: ops that hand out work in chunks (MulMat) claim them from it.
    // Thread 0 resets it before the op's first internal barrier; null: static split.
    WorkRegions* work = nullptr;
    RopeTable* rope = nullptr;  // this thread's, kept across the nodes of one graph; null: none
    PackedActs* acts = nullptr;  // this thread's record of the scratch; null: never reuse it
    // MulMat over packed weights: the plans of the op's products (one per node of its group), as
    // mul_mat_group_size made them; null: the op looks them up itself
    const PackedProductPlan* products = nullptr;
    // MulMat over packed weights: the nodes before it whose work it does in its activation
    // quantizing (fused_acts.h); null: none, its activations are its input as it is
    const FusedActs* fused = nullptr;
    // The kernels' instruction set (CpuBackend: its own, chosen when it was made)
    Isa isa = selected_isa();
};

// Rows [begin, end) of n that thread ith of nth handles.
inline void split_rows(int64_t n, int ith, int nth, int64_t& begin, int64_t& end) {
    const int64_t per = (n + nth - 1) / nth;
    begin = per * ith < n ? per * ith : n;
    end = begin + per < n ? begin + per : n;
}

// Scratch memory a node needs, shared by all nth threads.
size_t scratch_bytes(const Tensor& node, int nth, bool precise, Isa isa);
// The Op::Attention case of scratch_bytes (ops_attention.cpp, which owns the tiling).
size_t attention_scratch_bytes(const Tensor& node, int nth);

void op_get_rows(const Tensor& t, ComputeContext& ctx);
void op_mul_mat(const Tensor& t, ComputeContext& ctx);
// Consecutive products of the same activations (q, k, v; gate, up) computed as one op: the
// activations quantized once, the weight groups of all of them handed out as one set of work
// regions, one barrier at the end. How many of nodes, from the first, make such a group (1:
// none; at most kMaxMulMatGroup): packed weights taking at most kMaxActFormats activation formats
// under this precision. op_mul_mat_group computes them (all with ctx.precise as for the first).
// plans (optional, room for kMaxMulMatGroup): each product's plan, for ComputeContext::products.
inline constexpr size_t kMaxMulMatGroup = 4;
inline constexpr size_t kMaxActFormats = 2;  // each in its own tile (Q4_K and Q6_K products: two)
static_assert(IdlePrefetch::kMaxRanges >= kMaxMulMatGroup, "IdlePrefetch: one range per product of a group");
// Plans what thread ith asks for while it waits before the products `nodes` (a group as
// op_mul_mat_group runs it, or one product): the first `bytes` of the packed weights it computes
// first, when they stream from memory (generation); nothing otherwise. Kept as it is when idle
// already holds this plan.
void plan_idle_prefetch(std::span<const Tensor* const> nodes, int ith, int nth, size_t bytes, IdlePrefetch& idle);
size_t mul_mat_group_size(std::span<Tensor* const> nodes, bool precise, bool coarse, Isa isa, PackedProductPlan* plans = nullptr);
// Scratch of such a group (scratch_bytes for a product alone), from its products' plans; fused:
// with room for its activation rows computed by FusedActs (a row of floats per thread).
size_t mul_mat_group_scratch_bytes(std::span<Tensor* const> nodes, std::span<const PackedProductPlan> plans, int nth, bool precise,
                                   bool fused = false);
void op_mul_mat_group(std::span<const Tensor* const> nodes, ComputeContext& ctx);
void op_add(const Tensor& t, ComputeContext& ctx);
void op_mul(const Tensor& t, ComputeContext& ctx);
void op_scale(const Tensor& t, ComputeContext& ctx);
void op_unary(const Tensor& t, ComputeContext& ctx);  // silu, gelu_tanh
void op_glu(const Tensor& t, ComputeContext& ctx);    // swiglu, geglu
void op_rms_norm(const Tensor& t, ComputeContext& ctx);
void op_rope(const Tensor& t, ComputeContext& ctx);
void op_soft_max(const Tensor& t, ComputeContext& ctx);
void op_store_rows(const Tensor& t, ComputeContext& ctx);
void op_attention(const Tensor& t, ComputeContext& ctx);

}  // namespace kiln::cpu
