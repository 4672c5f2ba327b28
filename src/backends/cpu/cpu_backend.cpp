#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "backends/cpu/kernels/activations.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/ops.h"
#include "core/quant.h"

namespace kiln::cpu {
namespace {

// Host memory aligned for the widest SIMD loads. Buffers of 2 MiB and more (the KV cache's layers,
// the compute arena) are backed by transparent huge pages where Linux has them: generation reads
// the whole KV cache once per token, and in 4 KiB pages every page of it was a TLB miss and a stop
// for the hardware prefetchers. Without the madvise the KV cache stayed in 4 KiB pages (smaps:
// the process's AnonHugePages were the packed weights' alone). 1b Q4_0 tg32 at depth 4096
// (kiln-bench --profile, AMX Xeon, 2026-12-05, alternated runs): attention 3650-4510 -> 3360-3580
// us a token (0.79-0.93 x the time over 8 pairs), t/s 0.98-1.10 x (median 1.03, 12 pairs);
// prompts (pp128 / pp512, Q4_0 / Q8_0 / F16) unchanged.
class HostBuffer final : public Buffer {
public:
    explicit HostBuffer(size_t bytes) : size_(bytes) {
        if (bytes == 0) return;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (bytes >= kHugePage) {
            data_ = map_huge(bytes);
            if (data_) return;
        }
#endif
        const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
        data_ = ::operator new(rounded, std::align_val_t{kAlign});
    }
    ~HostBuffer() override {
        if (!data_) return;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (mapped_) {
            ::munmap(data_, mapped_);
            return;
        }
#endif
        ::operator delete(data_, std::align_val_t{kAlign});
    }
    void* base() override { return data_; }
    size_t size() const override { return size_; }
    void write(size_t off, const void* src, size_t n) override { std::memcpy(static_cast<uint8_t*>(data_) + off, src, n); }
    void read(size_t off, void* dst, size_t n) const override { std::memcpy(dst, static_cast<const uint8_t*>(data_) + off, n); }

private:
    static constexpr size_t kAlign = 64;
    static constexpr size_t kHugePage = size_t{2} << 20;

#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // An anonymous mapping starting on a huge page; its whole huge pages are asked for as such and the
    // part past the last one is not (a huge page there would be resident beyond the buffer's size).
    // Null where the mapping fails (the caller falls back to operator new).
    void* map_huge(size_t bytes) {
        const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
        const size_t len = (bytes + page - 1) / page * page, span = len + kHugePage;
        void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        auto* raw = static_cast<uint8_t*>(p);
        const auto a = reinterpret_cast<uintptr_t>(raw);
        uint8_t* start = raw + ((kHugePage - a % kHugePage) % kHugePage);
        if (start > raw) ::munmap(raw, static_cast<size_t>(start - raw));
        if (raw + span > start + len) ::munmap(start + len, static_cast<size_t>(raw + span - (start + len)));
        const size_t whole = bytes / kHugePage * kHugePage;
        ::madvise(start, whole, MADV_HUGEPAGE);
        if (whole < len) ::madvise(start + whole, len - whole, MADV_NOHUGEPAGE);
        mapped_ = len;
        return start;
    }
    size_t mapped_ = 0;  // bytes mapped by map_huge (0: operator new)
#endif
    void* data_ = nullptr;
    size_t size_;
};

using OpFn = void (*)(const Tensor&, ComputeContext&);

OpFn op_fn(Op op) {
    switch (op) {
        case Op::GetRows: return op_get_rows;
        case Op::MulMat: return op_mul_mat;
        case Op::Add: return op_add;
        case Op::Mul: return op_mul;
        case Op::Scale: return op_scale;
        case Op::RmsNorm: return op_rms_norm;
        case Op::Rope: return op_rope;
        case Op::Silu:
        case Op::GeluTanh: return op_unary;
        case Op::SwiGlu:
        case Op::GeGlu: return op_glu;
        case Op::SoftMax: return op_soft_max;
        case Op::Attention: return op_attention;
        case Op::StoreRows: return op_store_rows;
        default: return nullptr;
    }
}

bool rows_f32(const Tensor* t) { return t && t->type == Type::F32 && t->nb[0] == sizeof(float); }

}  // namespace

bool CpuBackend::precise(const Tensor& n) const {
    // the rows of a product's activations, the query tokens of an attention
    int64_t rows = 0;
    if (n.op == Op::MulMat) rows = n.src[1]->nrows();
    else if (n.op == Op::Attention) rows = n.src[0]->ne[2];
    else return false;
    switch (precision_) {
        case MatmulPrecision::Fast: return false;
        case MatmulPrecision::Precise: return true;
        case MatmulPrecision::Auto: return rows <= kAutoPreciseRows;
    }
    return false;
}

namespace {
// What a thread waiting at a barrier asks for of the next product's weights (IdlePrefetch): 1 MiB,
// at most half of the L2 cache where the system says how big it is. kiln-bench tg32 on the 1b
// Q4_0 model, 2 threads, AMX Xeon (2 MiB L2 per core), alternated: 0 / 256 / 512 / 1024 KiB
// 52.8-53.0 / 52.9-53.6 / 52.7-53.7 / 53.5-54.3 t/s; Q4_K_M 1024 KiB: +2%.
size_t idle_prefetch_bytes() {
    size_t bytes = size_t{1} << 20;
#if defined(__linux__) && defined(_SC_LEVEL2_CACHE_SIZE)
    if (const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE); l2 > 0) bytes = std::min(bytes, static_cast<size_t>(l2) / 2);
#endif
    return bytes;
}
}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions opts)
    : precision_(opts.matmul_precision), isa_(selected_isa()), pool_(opts.n_threads > 0 ? opts.n_threads : physical_cores(), std::move(opts.placement)), active_threads_(pool_.size()), work_(pool_.size()),
      idle_prefetch_bytes_(idle_prefetch_bytes()), fuse_(opts.fuse_ops) {}

bool CpuBackend::supports_op(const Tensor& t) const {
    switch (t.op) {
        case Op::None:
        case Op::View:
            return true;
        case Op::MulMat: {
            if (t.src[0]->layout == Layout::Packed16) {
                return packed_kernels(t.src[0]->type, isa_) && rows_f32(t.src[1]) && t.is_contiguous();
            }
            try {
                const auto& k = kernels(t.src[0]->type, isa_);
                return k.vec_dot && rows_f32(t.src[1]) && t.src[0]->ne[0] % traits(k.vec_dot_type).block_size == 0;
            } catch (const std::exception&) {
                return false;
            }
        }
        case Op::GetRows:
            if (t.src[0]->layout == Layout::Packed16) return has_reference(t.src[0]->type);
            return has_reference(t.src[0]->type) || t.src[0]->type == Type::F32;
        case Op::StoreRows:
            return has_reference(t.type) && rows_f32(t.src[1]);
        case Op::Attention:
            return has_reference(t.src[1]->type) && has_reference(t.src[2]->type) && rows_f32(t.src[0]);
        default:
            return op_fn(t.op) != nullptr;
    }
}

void CpuBackend::set_profiling(bool on) {
    if (on) profile_.clear();
    profiling_ = on;
}

std::unique_ptr<Buffer> CpuBackend::alloc_buffer(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

// What compute() works out from a node list before running it (CpuBackend::make_plan).
struct CpuBackend::Plan final : BackendPlan {
    const Tensor* const* nodes = nullptr;  // the list it was made for
    size_t n_nodes = 0;
    int nth = 0;         // threads it was made for (scratch sizes depend on them)
    size_t scratch = 0;  // bytes of scratch the nodes need
    // Products of the same activations that run as one op (op_mul_mat_group): group[i] nodes
    // from node i (0 inside a group, 1 for a node on its own).
    std::vector<uint8_t> group;
    // products[i ..]: the plans of the group's products (kernels null for other nodes).
    std::vector<PackedProductPlan> products;
    // fused[i]: the nodes before product (group) i that it computes its activations from
    // (fused_acts.h); those nodes' group is 0 too: not run.
    std::vector<FusedActs> fused;
    // next_product[i]: the first packed product (a group's first node) at i or after; n_nodes: none.
    std::vector<size_t> next_product;
    std::vector<uint8_t> precise;  // ComputeContext::precise of each node
};

CpuBackend::Plan CpuBackend::plan_nodes(std::span<Tensor* const> nodes, int nth) const {
    Plan p;
    p.nodes = nodes.data();
    p.n_nodes = nodes.size();
    p.nth = nth;
    p.precise.resize(nodes.size());
    size_t need = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
        const Tensor* n = nodes[i];
        p.precise[i] = precise(*n);
        if (n->op == Op::View || n->op == Op::None) continue;
        if (!op_fn(n->op)) throw std::runtime_error("CPU backend: op " + std::string(op_name(n->op)) + " of '" + n->name + "' is not supported");
        need = std::max(need, scratch_bytes(*n, nth, p.precise[i], isa_));
    }
    const bool coarse = precision_ == MatmulPrecision::Fast;  // the same for every node
    std::vector<uint8_t>& group = p.group;
    std::vector<PackedProductPlan>& products = p.products;
    std::vector<FusedActs>& fused = p.fused;
    group.assign(nodes.size(), 1);
    products.resize(nodes.size() + kMaxMulMatGroup);
    fused.resize(nodes.size());
    const ActivationKernels& act = activation_kernels(isa_);
    for (size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i]->op != Op::MulMat) continue;
        const size_t g = mul_mat_group_size(nodes.subspan(i), p.precise[i], coarse, isa_, products.data() + i);
        group[i] = static_cast<uint8_t>(g);
        for (size_t j = 1; j < g; ++j) group[i + j] = 0;
        if (products[i].kernels && fuse_) {
            const FusedActs f = match_fused_acts(nodes, i, g, act);
            const size_t first = i - static_cast<size_t>(f.n_nodes);
            if (f.fused() && std::all_of(group.begin() + static_cast<std::ptrdiff_t>(first), group.begin() + static_cast<std::ptrdiff_t>(i),
                                         [](uint8_t v) { return v == 1; })) {
                fused[i] = f;
                std::fill(group.begin() + static_cast<std::ptrdiff_t>(first), group.begin() + static_cast<std::ptrdiff_t>(i), uint8_t{0});
            }
        }
        // A group's products may take two activation formats, each in its own tile.
        if (g > 1 || fused[i].fused()) {
            need = std::max(need, mul_mat_group_scratch_bytes(nodes.subspan(i, g), std::span(products).subspan(i, g), nth, p.precise[i],
                                                              fused[i].fused()));
        }
        i += g - 1;
    }
    p.scratch = need;
    p.next_product.assign(nodes.size() + 1, nodes.size());
    for (size_t i = nodes.size(); i-- > 0;) {
        const bool product = group[i] > 0 && nodes[i]->op == Op::MulMat && nodes[i]->src[0]->layout == Layout::Packed16;
        p.next_product[i] = product ? i : p.next_product[i + 1];
    }
    return p;
}

std::unique_ptr<BackendPlan> CpuBackend::make_plan(std::span<Tensor* const> nodes) {
    return std::make_unique<Plan>(plan_nodes(nodes, active_threads_));
}

void CpuBackend::compute(std::span<Tensor* const> nodes) { compute_planned(nodes, nullptr); }

// Planning a 1b llama's generation graph took ~64 us a token (AMX Xeon, 2 threads), which the
// other thread spent waiting: the scheduler keeps the plan while it runs the same graph again.
void CpuBackend::compute_planned(std::span<Tensor* const> nodes, const BackendPlan* given) {
    const int nth = active_threads_;
    const auto* kept = dynamic_cast<const Plan*>(given);
    std::optional<Plan> made;
    if (!kept || kept->nodes != nodes.data() || kept->n_nodes != nodes.size() || kept->nth != nth) kept = &made.emplace(plan_nodes(nodes, nth));
    const Plan& plan = *kept;
    const std::vector<uint8_t>& group = plan.group;
    const std::vector<PackedProductPlan>& products = plan.products;
    const std::vector<FusedActs>& fused = plan.fused;
    const std::vector<size_t>& next_product = plan.next_product;
    const bool coarse = precision_ == MatmulPrecision::Fast;  // the same for every node
    if (scratch_.size() < plan.scratch) scratch_.resize(plan.scratch);
    const bool profiling = profiling_;
    if (profiling) profile_.begin_graph(nodes, group, fused, nth);
    pool_.run([&](int ith, int n_threads) {  // n_threads: nth, or fewer where OpenMP grants fewer
        RopeTable rope;
        PackedActs acts;
        ComputeContext ctx;
        ctx.rope = &rope;
        ctx.acts = &acts;
        ctx.ith = ith;
        ctx.nth = n_threads;
        IdlePrefetch idle;
        auto plan_idle = [&](size_t from) {
            const size_t j = next_product[from];
            if (j == nodes.size() || idle_prefetch_bytes_ == 0) {
                idle.clear();
                return;
            }
            plan_idle_prefetch(std::span<const Tensor* const>(nodes.data() + j, group[j]), ith, n_threads, idle_prefetch_bytes_, idle);
        };
        ctx.barrier = [this, &idle] { pool_.barrier(&idle); };
        ctx.scratch = scratch_.data();
        ctx.scratch_size = scratch_.size();
        ctx.work = &work_;
        ctx.coarse = coarse;
        ctx.attn_f32 = precision_ == MatmulPrecision::Precise;
        ctx.isa = isa_;
        for (size_t i = 0; i < nodes.size(); ++i) {
            const Tensor* n = nodes[i];
            const OpFn fn = op_fn(n->op);
            if (!fn || group[i] == 0) continue;  // views: nothing to compute; grouped: done with the first
            if (n->op != Op::MulMat || n->src[0]->layout != Layout::Packed16) acts.x = nullptr;
            ctx.precise = plan.precise[i] != 0;
            ctx.products = products[i].kernels ? products.data() + i : nullptr;
            ctx.fused = fused[i].fused() ? &fused[i] : nullptr;
            plan_idle(i);
            const auto t0 = profiling ? OpProfile::Clock::now() : OpProfile::Clock::time_point{};
            if (group[i] > 1) {
                op_mul_mat_group(std::span<const Tensor* const>(nodes.data() + i, group[i]), ctx);
            } else {
                fn(*n, ctx);
            }
            plan_idle(i + 1);
            if (!profiling) {
                pool_.barrier(&idle);
                continue;
            }
            const auto t1 = OpProfile::Clock::now();
            pool_.barrier(&idle);
            profile_.record(ith, i, t0, t1, OpProfile::Clock::now());
        }
    }, nth);
}

DeviceMemory CpuBackend::memory() const {
    DeviceMemory m;
#if defined(__linux__)
    std::ifstream f("/proc/meminfo");
    std::string key;
    size_t kb = 0;
    std::string unit;
    while (f >> key >> kb >> unit) {
        if (key == "MemTotal:") m.total = kb * 1024;
        if (key == "MemAvailable:") m.free = kb * 1024;
    }
#endif
    return m;
}

}  // namespace kiln::cpu
