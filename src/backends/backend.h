// The interface every compute backend implements (cpu now; cuda, vulkan later).
//
// A backend owns memory (buffers) and runs graph nodes whose tensors live in
// memory it can address. The Scheduler (scheduler.h) assigns nodes to
// backends, allocates their memory and moves data between them.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace kiln {

// How matrix products treat their activations.
//  Fast:    quantize activations once to the weight type's 8-bit format (as llama.cpp does);
//           on CPUs with AMX-BF16, products of 32+ rows round them to BF16 instead (the
//           matrix tiles, closer to Precise than the 8-bit format: docs/engine.md).
//  Precise: add a second 8-bit pass over the quantization residual, so activations carry about
//           16 bits: models with large activation outliers (Gemma) then match a float64
//           reference closely; costs twice the integer work, nothing extra in memory traffic.
//  Auto:    Precise for batches of up to kAutoPreciseRows rows (generation, which is bound by
//           memory bandwidth, so the second pass is free), Fast for larger batches (prompts).
// Attention follows the same setting on the CPU: Fast computes its two products in BF16 where
// the CPU's BF16 products outrun its F32 FMAs (kernels/attn_kernels.h); Precise stays F32, and
// Auto is Precise for up to kAutoPreciseRows query tokens. Except: over an F16 cache on CPUs with
// AVX512-FP16, Fast and Auto compute them in FP16 at every query count (K and V as the cache
// holds them, Q and P rounded to fp16: a KL divergence two orders below the 8-bit activations';
// docs/engine.md); Precise stays F32.
enum class MatmulPrecision : uint8_t { Auto, Fast, Precise };
constexpr int64_t kAutoPreciseRows = 16;

struct DeviceMemory {
    size_t free = 0;
    size_t total = 0;
};

// A block of backend memory.
class Buffer {
public:
    virtual ~Buffer() = default;
    // Address of the memory as tensors store it in Tensor::data (a host pointer for host buffers,
    // a device address otherwise).
    virtual void* base() = 0;
    virtual size_t size() const = 0;
    // Host <-> buffer copies (offsets relative to base()).
    virtual void write(size_t offset, const void* src, size_t bytes) = 0;
    virtual void read(size_t offset, void* dst, size_t bytes) const = 0;
};

// What a backend derives from a node list before it can run it (which nodes run as one op, how
// much scratch they take, ...): made once by make_plan and handed back to compute_planned each
// time the same nodes run again, so that generation does not work it out anew for every token.
class BackendPlan {
public:
    virtual ~BackendPlan() = default;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string_view name() const = 0;
    // True if the CPU can address this backend's buffers directly (no copies needed).
    virtual bool is_host() const = 0;
    // True if the backend can compute this node (its op, types and shapes).
    virtual bool supports_op(const Tensor& node) const = 0;
    virtual std::unique_ptr<Buffer> alloc_buffer(size_t bytes) = 0;
    // Runs the nodes in order; every tensor they touch is in memory this backend addresses.
    virtual void compute(std::span<Tensor* const> nodes) = 0;
    // The plan of a node list whose tensors (ops, shapes, sources, memory) stay as they are while
    // the caller keeps it; null where the backend keeps none (the default).
    virtual std::unique_ptr<BackendPlan> make_plan(std::span<Tensor* const> nodes) {
        (void)nodes;
        return nullptr;
    }
    // compute(nodes) with the plan make_plan returned for these nodes (null: none).
    virtual void compute_planned(std::span<Tensor* const> nodes, const BackendPlan* plan) {
        (void)plan;
        compute(nodes);
    }
    virtual DeviceMemory memory() const = 0;
};

}  // namespace kiln
