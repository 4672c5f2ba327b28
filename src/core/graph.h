// A compute graph, built per batch by the model code and run by a backend.
//
// Nodes are recorded in creation order, which is a valid execution order
// since every op's inputs exist before it. Builders check shapes and throw
// std::invalid_argument naming the op and the tensors on a mismatch.
#pragma once

#include <deque>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// How store_rows lays the rows out in the cache (core/kv_layout.h); all zero: one row per cell.
struct StoreRowsLayout {
    int64_t panel_head_dim = 0;  // > 0: K panels of this head size
    int64_t head_major_dim = 0;  // > 0: head-major rows of this head size
};

struct AttentionParams {
    float scale = 1.0f;     // applied to q.k
    float softcap = 0.0f;   // > 0: logits = softcap * tanh(logits / softcap)
    bool k_panels = false;  // k's cache holds K in panels (core/kv_layout.h); k is then a view at offset 0 whose
                            // strides are not used
    // The batch's tokens belong to different sequences (batched decoding), whose cells interleave in
    // the cache: attention may gather each token's keys, and with K panels it first converts the
    // attended cells' K to rows (a cell's key is otherwise spread over head_dim lines of its panel).
    bool mixed_sequences = false;
};

class Graph {
public:
    Graph() = default;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    // A leaf whose data the caller sets (input or weight). Shape ne[0] first.
    Tensor* leaf(Type type, std::array<int64_t, 4> ne, std::string name, void* data = nullptr);
    // An input filled on the host before compute (its memory is allocated with the graph).
    Tensor* input(Type type, std::array<int64_t, 4> ne, std::string name);

    // A view of t with a new shape and strides, starting offset bytes into t's data.
    Tensor* view(Tensor* t, std::array<int64_t, 4> ne, std::array<size_t, 4> nb, size_t offset, std::string name = {});
    // A contiguous tensor seen with another shape of the same element count.
    Tensor* reshape(Tensor* t, std::array<int64_t, 4> ne, std::string name = {});

    Tensor* get_rows(Tensor* table, Tensor* ids, std::string name = {});
    // weights [K, N] x activations [K, M] -> [N, M] (F32)
    Tensor* mul_mat(Tensor* weights, Tensor* x, std::string name = {});
    Tensor* add(Tensor* a, Tensor* b, std::string name = {});
    Tensor* mul(Tensor* a, Tensor* b, std::string name = {});
    Tensor* scale(Tensor* a, float s, std::string name = {});
    Tensor* rms_norm(Tensor* a, float eps, std::string name = {});
    // x [head_dim, n_head, n_tokens], positions I32 [n_tokens]; rotates the first n_dims of each head.
    Tensor* rope(Tensor* x, Tensor* positions, int n_dims, RopeMode mode, float freq_base, float freq_scale,
                 std::string name = {});
    Tensor* silu(Tensor* a, std::string name = {});
    Tensor* gelu_tanh(Tensor* a, std::string name = {});
    Tensor* swiglu(Tensor* gate, Tensor* up, std::string name = {});
    Tensor* geglu(Tensor* gate, Tensor* up, std::string name = {});
    // softmax over ne0 of a * scale (+ mask [ne0, ne1] broadcast over dims 2, 3 when given)
    Tensor* soft_max(Tensor* a, Tensor* mask, float scale, std::string name = {});
    // Writes rows of x (F32 [row_len, n]) into rows ids (I32 [n]) of dst (the KV cache), converting to
    // dst's type. The result aliases dst: later readers of the cache depend on it. layout: K panels or
    // head-major rows (core/kv_layout.h) instead of one row per cell.
    Tensor* store_rows(Tensor* dst, Tensor* x, Tensor* ids, std::string name = {}, StoreRowsLayout layout = {});
    // q F32 [head_dim, n_head, n_tokens]; k [head_dim, n_head_kv, n_kv], v [head_dim_v, n_head_kv, n_kv]
    // (any cache type, rows = cells); mask F32 [n_kv, n_tokens] (0 or -inf). -> F32 [head_dim_v * n_head, n_tokens]
    Tensor* attention(Tensor* q, Tensor* k, Tensor* v, Tensor* mask, AttentionParams p, std::string name = {});

    // Marks t as a result the caller reads after compute.
    void mark_output(Tensor* t) { t->is_output = true; }
    // Tags every node created from now on with a layer index (for backend splits).
    void set_layer(int layer) { layer_ = layer; }

    std::span<Tensor* const> nodes() const { return nodes_; }
    std::span<Tensor* const> inputs() const { return inputs_; }
    size_t n_tensors() const { return storage_.size(); }

private:
    Tensor* make(Op op, Type type, std::array<int64_t, 4> ne, std::string name);
    std::deque<Tensor> storage_;  // deque: stable addresses as the graph grows
    std::vector<Tensor*> nodes_;  // compute nodes in execution order (views included, leaves excluded)
    std::vector<Tensor*> inputs_;
    int layer_ = -1;
};

// True if ops alias their first source instead of producing new memory.
inline bool op_aliases_src0(Op op) { return op == Op::View || op == Op::StoreRows; }

}  // namespace kiln
