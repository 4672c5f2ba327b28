// The CPU backend: host memory, the engine's thread pool, and the kernels of
// the instruction set chosen at run time.
#pragma once

#include <atomic>

#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/op_profile.h"
#include "backends/cpu/thread_placement.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/work_regions.h"

namespace kiln::cpu {

struct CpuBackendOptions {
    int n_threads = 0;  // threads of the pool; 0: physical cores
    MatmulPrecision matmul_precision = MatmulPrecision::Auto;
    ThreadPlacement placement = {};  // CPUs the threads run on, and how long idle ones spin
    // Products over packed weights compute their activations from the norm / residual add / gated
    // activation nodes before them instead of running those (fused_acts.h); the same results.
    bool fuse_ops = true;
};

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(CpuBackendOptions opts = {});
    std::string_view name() const override { return "CPU"; }
    bool is_host() const override { return true; }
    bool supports_op(const Tensor& node) const override;
    std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override;
    void compute(std::span<Tensor* const> nodes) override;
    std::unique_ptr<BackendPlan> make_plan(std::span<Tensor* const> nodes) override;
    void compute_planned(std::span<Tensor* const> nodes, const BackendPlan* plan) override;
    DeviceMemory memory() const override;

    int n_threads() const { return pool_.size(); }
    // Graphs computed from now on run on the pool's first n threads (0 or more than the pool: all),
    // as llama.cpp's n_threads (one token) and n_threads_batch (prompts) share one pool.
    void set_active_threads(int n) { active_threads_ = n > 0 && n < pool_.size() ? n : pool_.size(); }
    int active_threads() const { return active_threads_; }

    // Per-op timing of the graphs computed while on (op_profile.h); turning it on clears it.
    void set_profiling(bool on);
    std::vector<OpTime> op_times() const { return profile_.rows(); }

private:
    struct Plan;  // what compute works out from the nodes (cpu_backend.cpp)
    // The plan of nodes for nth threads; throws for an op this backend does not run.
    Plan plan_nodes(std::span<Tensor* const> nodes, int nth) const;
    // ComputeContext::precise for a node (MulMat, Attention) under precision_
    bool precise(const Tensor& node) const;
    MatmulPrecision precision_;
    // The kernels' instruction set, chosen once when the backend is made (selected_isa: KILN_CPU or
    // the best supported). Asked per call it read the environment (a scan and a string) several
    // hundred times a token: supports_op and scratch_bytes for every node, every op's kernels.
    Isa isa_;
    ThreadPool pool_;
    int active_threads_;  // set_active_threads
    std::vector<uint8_t> scratch_;  // grows to the largest need seen
    WorkRegions work_;  // ComputeContext::work (after pool_: sized by it)
    size_t idle_prefetch_bytes_;  // per thread and product (idle_prefetch.h); 0: none
    bool fuse_;  // CpuBackendOptions::fuse_ops
    bool profiling_ = false;
    OpProfile profile_;
};

}  // namespace kiln::cpu
