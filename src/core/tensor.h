// Tensors and the operations of a compute graph.
//
// A Tensor describes up to 4 dimensions of one element type: ne[0] is the
// contiguous dimension (a row), nb[i] the stride of dimension i in bytes, as
// in GGUF. A tensor is either a leaf (weights, inputs, KV cache: its data is
// set by whoever creates it) or the result of an op over src tensors, computed
// by a backend. Views alias another tensor's data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/types.h"

namespace kiln {

enum class Op : uint8_t {
    None,        // leaf: data provided from outside
    View,        // alias of src[0] with its own shape/strides and a byte offset (no compute)
    GetRows,     // out[:, i] = src0[:, src1[i]]  (src1: I32 row ids) -> F32
    MulMat,      // out[n, m] = sum_k src0[k, n] * src1[k, m]; src0 any weight type, src1 F32
    Add,         // out = src0 + src1, src1 broadcast over dims where it is 1
    Mul,         // out = src0 * src1, broadcast like Add
    Scale,       // out = src0 * f[0]
    RmsNorm,     // out = src0 / sqrt(mean(src0^2 over ne0) + f[0])
    Rope,        // rotary embedding of src0 [head_dim, n_head, n_tokens] at positions src1 (I32)
    Silu,        // out = x * sigmoid(x)
    GeluTanh,    // tanh approximation of GELU
    SwiGlu,      // out = silu(src0) * src1
    GeGlu,       // out = gelu_tanh(src0) * src1
    SoftMax,     // softmax over ne0 of src0 * f[0] (+ src1 mask if given)
    Attention,   // causal attention of q over a KV cache with a mask (see AttentionParams)
    StoreRows,   // writes src1 (F32 rows) into rows src2 (I32) of src0 (the cache), converting the type
    Count
};
std::string_view op_name(Op op);

// Rotary embedding variants.
enum class RopeMode : int32_t {
    Normal = 0,  // rotate adjacent pairs (2i, 2i+1)
    Neox = 2,    // rotate pairs (i, i + n_dims/2)
};

// How a weight's rows are stored: one after the other as in GGUF, or repacked at load into
// interleaved groups of kPackRows rows for the CPU GEMM kernels (core/quant_repack.h).
enum class Layout : uint8_t {
    Rows,
    Packed16,  // row() is meaningless; read rows with unpack_row()
};

struct Tensor {
    Type type = Type::F32;
    Layout layout = Layout::Rows;
    std::array<int64_t, 4> ne{1, 1, 1, 1};  // elements per dimension
    std::array<size_t, 4> nb{0, 0, 0, 0};   // stride per dimension, bytes
    Op op = Op::None;
    std::array<Tensor*, 4> src{nullptr, nullptr, nullptr, nullptr};
    std::array<int32_t, 8> iparams{};  // op parameters (see the graph builders)
    std::array<float, 8> fparams{};
    void* data = nullptr;              // set by the allocator (results) or the owner (leaves)
    size_t view_offset = 0;            // for Op::View: byte offset into src[0]
    int layer = -1;                    // model layer this node belongs to (-1: none); the scheduler splits by it
    bool is_output = false;            // result is read after compute: keep its memory
    // Nodes of its graph that take it as a source (Scheduler::allocate counts them; 0: not
    // counted). A backend may leave a result nobody else reads unwritten by fusing its op into
    // its one reader's (the CPU backend's fused product activations, backends/cpu/fused_acts.h).
    int32_t readers = 0;
    std::string name;

    int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
    size_t row_bytes() const { return row_size(type, ne[0]); }
    size_t nbytes() const;          // bytes spanned by the data (contiguous: rows * row_bytes)
    bool is_contiguous() const;     // rows densely packed in dimension order
    // Pointer to row (i1, i2, i3).
    uint8_t* row(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const {
        return static_cast<uint8_t*>(data) + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
    }
};

// Sets contiguous strides for t's type and shape.
void set_contiguous_strides(Tensor& t);

}  // namespace kiln
