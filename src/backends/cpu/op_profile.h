// Where a CPU graph evaluation spends its time, op by op (kiln-bench --profile).
//
// Each thread times every node it runs and the barrier wait after it; nodes are grouped by what
// they are: the op's name ("rms_norm", "attention", ...) or, for matrix products, the node's name
// without its layer suffix ("q", "ffn_down", "logits"), so one row covers a role in every layer;
// products computed together (q, k and v) share a row ("q+k+v").
// A matrix product's row also counts the weight bytes it read, which relates its time to the
// memory's rate. Off unless enabled; when on, three clock reads per node and thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/fused_acts.h"
#include "core/tensor.h"

namespace kiln::cpu {

struct OpTime {
    std::string name;
    int64_t calls = 0;           // evaluations (per thread)
    double op_ms = 0;            // inside the op, mean over threads
    double op_max_ms = 0;        // the thread that spent the most inside it
    double wait_ms = 0;          // at the barrier after it, mean over threads
    uint64_t weight_bytes = 0;   // matrix products: weight bytes read, summed over calls
};

class OpProfile {
public:
    using Clock = std::chrono::steady_clock;

    // Before a graph runs (one thread): the row of each node, and the per-thread slots. group[i]:
    // nodes computed as one op from node i (products of the same input: one row, "q+k+v"), 0
    // for the others of such a group and for nodes fused into a product; fused[i]: the nodes
    // product i computes its activations from (named in its row: "mul_mat q+k+v (+rms_norm,mul)").
    void begin_graph(std::span<Tensor* const> nodes, std::span<const uint8_t> group, std::span<const FusedActs> fused, int nth);
    // Thread ith ran node i from t0 to t1 and waited at the barrier until t2.
    void record(int ith, size_t i, Clock::time_point t0, Clock::time_point t1, Clock::time_point t2) {
        Slot& s = per_thread_[static_cast<size_t>(ith)][static_cast<size_t>(row_of_node_[i])];
        s.op_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
        s.wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t1).count();
        s.calls += 1;
        if (ith == 0) s.weight_bytes += bytes_of_node_[i];
    }
    // The rows so far, most time first.
    std::vector<OpTime> rows() const;
    void clear();

private:
    struct Slot {
        int64_t op_ns = 0, wait_ns = 0, calls = 0;
        uint64_t weight_bytes = 0;
    };
    std::vector<std::string> names_;                 // row -> name
    std::unordered_map<std::string, int> row_of_name_;
    std::vector<int> row_of_node_;                   // of the current graph
    std::vector<uint64_t> bytes_of_node_;            // of the current graph
    std::vector<std::vector<Slot>> per_thread_;      // [thread][row]
};

}  // namespace kiln::cpu
