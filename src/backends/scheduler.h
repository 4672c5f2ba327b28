// Runs a graph over several backends: assigns each node to a backend (by its
// layer, falling back to the last backend — the CPU — for ops a backend does
// not support), cuts the node list into splits of one backend each, copies
// tensors between backends where a split reads memory its backend cannot
// address, and allocates intermediate results with reuse by liveness.
//
// Model code only tags nodes with their layer (Graph::set_layer); which layers
// run where is the scheduler's placement function, so offloading N layers to a
// GPU needs no change in model code.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/ptr_map.h"
#include "core/graph.h"

namespace kiln {

class Scheduler {
public:
    // backends: the last one must be a host backend that supports every op (the CPU).
    // layer_backend: backend index for the nodes of a layer (-1 for nodes outside layers).
    Scheduler(std::vector<Backend*> backends, std::function<int(int layer)> layer_backend);

    // Declares that a leaf's data lives in a backend's memory (default: host memory).
    void place_leaf(const Tensor* leaf, int backend);

    // Assigns, allocates (graph inputs too, in host memory) and sets Tensor::data of every node.
    // After this, fill the graph's inputs, then call compute().
    void allocate(Graph& g);
    // Runs the splits; outputs (Graph::mark_output) computed on a device are copied to host memory
    // and their Tensor::data points there afterwards (until the next compute(), which points them
    // back at their device memory first).
    void compute(Graph& g);
    // Changes with every allocate(). The graph of the last allocate() may run again, inputs refilled,
    // as long as this still returns what it returned after that allocate() (the arenas and splits
    // are that graph's).
    uint64_t plan_id() const { return plan_id_; }

    // Bytes of intermediate-result memory each backend holds (after allocate()).
    std::vector<size_t> buffer_sizes() const;
    // Number of splits of the last planned graph.
    size_t n_splits() const { return splits_.size(); }
    int backend_of(const Tensor* node) const;

    // Optional observer of chosen nodes (the imatrix tool watches matmul inputs): compute() stops
    // before each node `wants` accepts and calls `observe` with it once its sources are computed.
    // Only nodes of host backends are observed (their sources are then host memory). Empty
    // functions (the default) observe nothing and cost nothing.
    struct Observer {
        std::function<bool(const Tensor& node)> wants;
        std::function<void(const Tensor& node)> observe;
    };
    void set_observer(Observer obs) { observer_ = std::move(obs); }

private:
    struct Copy {
        Tensor* from;      // tensor as computed elsewhere
        Tensor* shadow;    // its copy in the split's backend memory
    };
    struct Split {
        int backend;
        std::vector<Tensor*> nodes;
        std::vector<Copy> copies;                                  // done before the split runs
        std::vector<std::pair<Tensor**, Tensor*>> src_rewrites;    // (slot, shadow) swapped in while it runs
        // The backend's plan of `nodes`, made at the first compute() (with the rewrites swapped in,
        // as every run sees them) and kept until the next allocate() replaces the splits.
        std::unique_ptr<BackendPlan> plan;
        bool planned = false;
    };

    int home_backend(const Tensor* t) const;  // where t's data lives
    std::vector<Backend*> backends_;
    std::function<int(int)> layer_backend_;
    PtrMap<const Tensor*, int> leaf_backend_;
    PtrMap<const Tensor*, int> node_backend_;
    std::vector<Split> splits_;
    std::vector<std::unique_ptr<Tensor>> shadows_;
    std::vector<std::unique_ptr<Buffer>> arenas_;  // one per backend, grown as needed
    std::vector<std::vector<uint8_t>> host_outputs_;  // outputs computed on devices, copied back
    std::vector<std::pair<Tensor*, void*>> device_outputs_;  // those outputs and their device memory
    uint64_t plan_id_ = 0;
    Observer observer_;
};

}  // namespace kiln
