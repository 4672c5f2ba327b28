#include "core/graph.h"

#include <cstdint>
#include <stdexcept>

#include "core/kv_layout.h"

namespace kiln {
namespace {

std::string shape_str(const Tensor* t) {
    std::string s = "'" + t->name + "' [";
    for (int i = 0; i < 4; ++i) s += std::to_string(t->ne[i]) + (i < 3 ? "," : "]");
    return s;
}

[[noreturn]] void shape_error(std::string_view op, const std::string& what) {
    throw std::invalid_argument("graph: " + std::string(op) + ": " + what);
}

// The message is built only on failure: graphs are rebuilt for every token, and formatting
// every node's shapes up front showed in generation profiles.
template <class Message>
void require(bool ok, std::string_view op, Message&& what) {
    if (!ok) shape_error(op, std::string(what()));
}

// b can be broadcast onto a: each dim of b divides a's.
bool broadcastable(const Tensor* a, const Tensor* b) {
    for (int i = 0; i < 4; ++i) {
        if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) return false;
    }
    return true;
}

}  // namespace

Tensor* Graph::make(Op op, Type type, std::array<int64_t, 4> ne, std::string name) {
    const int64_t block = traits(type).block_size;
    if (ne[0] % block != 0) {
        shape_error(op_name(op), "'" + name + "': rows of " + std::to_string(ne[0]) + " " + std::string(type_name(type)) +
                                     " values are not whole blocks of " + std::to_string(block));
    }
    Tensor& t = storage_.emplace_back();
    t.op = op;
    t.type = type;
    t.ne = ne;
    t.layer = layer_;
    t.name = std::move(name);
    set_contiguous_strides(t);
    return &t;
}

Tensor* Graph::leaf(Type type, std::array<int64_t, 4> ne, std::string name, void* data) {
    Tensor* t = make(Op::None, type, ne, std::move(name));
    t->layer = -1;
    t->data = data;
    return t;
}

Tensor* Graph::input(Type type, std::array<int64_t, 4> ne, std::string name) {
    Tensor* t = leaf(type, ne, std::move(name));
    inputs_.push_back(t);
    return t;
}

Tensor* Graph::view(Tensor* t, std::array<int64_t, 4> ne, std::array<size_t, 4> nb, size_t offset, std::string name) {
    Tensor* v = make(Op::View, t->type, ne, name.empty() ? t->name + " (view)" : std::move(name));
    v->nb = nb;
    v->src[0] = t;
    v->view_offset = offset;
    require(offset + v->nbytes() <= t->nbytes() || t->nbytes() == 0, "view", [&] { return "view of " + shape_str(t) + " at offset " + std::to_string(offset) + " runs past its data"; });
    nodes_.push_back(v);
    return v;
}

Tensor* Graph::reshape(Tensor* t, std::array<int64_t, 4> ne, std::string name) {
    require(t->is_contiguous(), "reshape", [&] { return shape_str(t) + " is not contiguous"; });
    require(ne[0] * ne[1] * ne[2] * ne[3] == t->nelements(), "reshape", [&] { return shape_str(t) + ": element count differs"; });
    Tensor tmp;
    tmp.type = t->type;
    tmp.ne = ne;
    set_contiguous_strides(tmp);
    return view(t, ne, tmp.nb, 0, name.empty() ? t->name : std::move(name));
}

Tensor* Graph::get_rows(Tensor* table, Tensor* ids, std::string name) {
    require(ids->type == Type::I32 && ids->ne[1] == 1, "get_rows", [&] { return "ids " + shape_str(ids) + " must be I32 [n]"; });
    require(table->ne[2] == 1 && table->ne[3] == 1, "get_rows", [&] { return "table " + shape_str(table) + " must be 2-D"; });
    Tensor* t = make(Op::GetRows, Type::F32, {table->ne[0], ids->ne[0], 1, 1}, std::move(name));
    t->src = {table, ids};
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::mul_mat(Tensor* w, Tensor* x, std::string name) {
    require(w->ne[0] == x->ne[0], "mul_mat", [&] { return shape_str(w) + " x " + shape_str(x) + ": inner dimensions differ"; });
    require(w->ne[2] == 1 && w->ne[3] == 1, "mul_mat", [&] { return "weights " + shape_str(w) + " must be 2-D"; });
    require(x->type == Type::F32, "mul_mat", [&] { return "activations " + shape_str(x) + " must be F32"; });
    Tensor* t = make(Op::MulMat, Type::F32, {w->ne[1], x->ne[1], x->ne[2], x->ne[3]}, std::move(name));
    t->src = {w, x};
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::add(Tensor* a, Tensor* b, std::string name) {
    require(a->type == Type::F32 && b->type == Type::F32, "add", [&] { return "operands must be F32"; });
    require(broadcastable(a, b), "add", [&] { return shape_str(b) + " does not broadcast onto " + shape_str(a); });
    Tensor* t = make(Op::Add, Type::F32, a->ne, std::move(name));
    t->src = {a, b};
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::mul(Tensor* a, Tensor* b, std::string name) {
    require(a->type == Type::F32 && b->type == Type::F32, "mul", [&] { return "operands must be F32"; });
    require(broadcastable(a, b), "mul", [&] { return shape_str(b) + " does not broadcast onto " + shape_str(a); });
    Tensor* t = make(Op::Mul, Type::F32, a->ne, std::move(name));
    t->src = {a, b};
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::scale(Tensor* a, float s, std::string name) {
    require(a->type == Type::F32, "scale", [&] { return shape_str(a) + " must be F32"; });
    Tensor* t = make(Op::Scale, Type::F32, a->ne, std::move(name));
    t->src[0] = a;
    t->fparams[0] = s;
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::rms_norm(Tensor* a, float eps, std::string name) {
    require(a->type == Type::F32, "rms_norm", [&] { return shape_str(a) + " must be F32"; });
    Tensor* t = make(Op::RmsNorm, Type::F32, a->ne, std::move(name));
    t->src[0] = a;
    t->fparams[0] = eps;
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::rope(Tensor* x, Tensor* pos, int n_dims, RopeMode mode, float freq_base, float freq_scale,
                    std::string name) {
    require(x->type == Type::F32, "rope", [&] { return shape_str(x) + " must be F32"; });
    require(pos->type == Type::I32 && pos->ne[0] == x->ne[2], "rope", [&] { return "positions " + shape_str(pos) + " must be I32 with one entry per token of " + shape_str(x); });
    require(n_dims > 0 && n_dims % 2 == 0 && n_dims <= x->ne[0], "rope", [&] { return "n_dims " + std::to_string(n_dims) + " must be even and at most the head size of " + shape_str(x); });
    Tensor* t = make(Op::Rope, Type::F32, x->ne, std::move(name));
    t->src = {x, pos};
    t->iparams[0] = n_dims;
    t->iparams[1] = static_cast<int32_t>(mode);
    t->fparams[0] = freq_base;
    t->fparams[1] = freq_scale;
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::silu(Tensor* a, std::string name) {
    require(a->type == Type::F32, "silu", [&] { return shape_str(a) + " must be F32"; });
    Tensor* t = make(Op::Silu, Type::F32, a->ne, std::move(name));
    t->src[0] = a;
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::gelu_tanh(Tensor* a, std::string name) {
    require(a->type == Type::F32, "gelu_tanh", [&] { return shape_str(a) + " must be F32"; });
    Tensor* t = make(Op::GeluTanh, Type::F32, a->ne, std::move(name));
    t->src[0] = a;
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::swiglu(Tensor* gate, Tensor* up, std::string name) {
    require(gate->type == Type::F32 && up->type == Type::F32, "swiglu", [&] { return "operands must be F32"; });
    require(gate->ne == up->ne, "swiglu", [&] { return shape_str(gate) + " and " + shape_str(up) + " differ"; });
    Tensor* t = make(Op::SwiGlu, Type::F32, gate->ne, std::move(name));
    t->src = {gate, up};
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::geglu(Tensor* gate, Tensor* up, std::string name) {
    require(gate->type == Type::F32 && up->type == Type::F32, "geglu", [&] { return "operands must be F32"; });
    require(gate->ne == up->ne, "geglu", [&] { return shape_str(gate) + " and " + shape_str(up) + " differ"; });
    Tensor* t = make(Op::GeGlu, Type::F32, gate->ne, std::move(name));
    t->src = {gate, up};
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::soft_max(Tensor* a, Tensor* mask, float s, std::string name) {
    require(a->type == Type::F32, "soft_max", [&] { return shape_str(a) + " must be F32"; });
    if (mask) {
        require(mask->type == Type::F32 && mask->ne[0] == a->ne[0] && mask->ne[1] == a->ne[1], "soft_max", [&] { return "mask " + shape_str(mask) + " must be F32 [ne0, ne1] of " + shape_str(a); });
    }
    Tensor* t = make(Op::SoftMax, Type::F32, a->ne, std::move(name));
    t->src = {a, mask};
    t->fparams[0] = s;
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::store_rows(Tensor* dst, Tensor* x, Tensor* ids, std::string name, StoreRowsLayout layout) {
    const int64_t panel_head_dim = layout.panel_head_dim, head_major_dim = layout.head_major_dim;
    require(panel_head_dim == 0 || head_major_dim == 0, "store_rows", [&] { return "K panels and head-major rows are exclusive"; });
    require(x->type == Type::F32 && x->ne[0] == dst->ne[0], "store_rows", [&] { return shape_str(x) + " rows must be F32 of the length of " + shape_str(dst); });
    require(ids->type == Type::I32 && ids->ne[0] == x->ne[1], "store_rows", [&] { return "ids " + shape_str(ids) + " must be I32 with one entry per row of " + shape_str(x); });
    if (panel_head_dim > 0) {
        require(k_panels_supported(dst->type) && dst->ne[0] % panel_head_dim == 0 && dst->ne[1] % kKPanelCells == 0 &&
                    dst->is_contiguous() && panel_head_dim <= INT32_MAX,
                "store_rows", [&] { return shape_str(dst) + " cannot hold K panels of head size " + std::to_string(panel_head_dim); });
    }
    if (head_major_dim > 0) {
        require(dst->ne[0] % head_major_dim == 0 && head_major_dim % traits(dst->type).block_size == 0 && dst->is_contiguous() &&
                    head_major_dim <= INT32_MAX,
                "store_rows", [&] { return shape_str(dst) + " cannot hold head-major rows of head size " + std::to_string(head_major_dim); });
    }
    Tensor* t = make(Op::StoreRows, dst->type, dst->ne, name.empty() ? dst->name : std::move(name));
    t->nb = dst->nb;
    t->src = {dst, x, ids};
    t->iparams[0] = static_cast<int32_t>(panel_head_dim);
    t->iparams[1] = static_cast<int32_t>(head_major_dim);
    nodes_.push_back(t);
    return t;
}

Tensor* Graph::attention(Tensor* q, Tensor* k, Tensor* v, Tensor* mask, AttentionParams p, std::string name) {
    require(q->type == Type::F32, "attention", [&] { return "q " + shape_str(q) + " must be F32"; });
    require(k->ne[0] == q->ne[0], "attention", [&] { return "q " + shape_str(q) + " and k " + shape_str(k) + ": head sizes differ"; });
    require(k->ne[1] > 0 && q->ne[1] % k->ne[1] == 0, "attention", [&] { return "query heads of " + shape_str(q) + " are not a multiple of the KV heads of " + shape_str(k); });
    require(v->ne[1] == k->ne[1] && v->ne[2] == k->ne[2], "attention", [&] { return "k " + shape_str(k) + " and v " + shape_str(v) + " differ"; });
    require(mask && mask->type == Type::F32 && mask->ne[0] == k->ne[2] && mask->ne[1] == q->ne[2], "attention", [&] { return "mask must be F32 [n_kv, n_tokens]"; });
    require(!p.k_panels || (k_panels_supported(k->type) && k->op == Op::View && k->view_offset == 0 &&
                            k->src[0]->ne[0] == k->ne[0] * k->ne[1] && k->src[0]->ne[1] % kKPanelCells == 0 &&
                            k->src[0]->ne[1] >= k->ne[2]),
            "attention", [&] { return "k " + shape_str(k) + " cannot be read as K panels (a view from the start of an F32/F16/BF16 cache)"; });
    Tensor* t = make(Op::Attention, Type::F32, {v->ne[0] * q->ne[1], q->ne[2], 1, 1}, std::move(name));
    t->src = {q, k, v, mask};
    t->fparams[0] = p.scale;
    t->fparams[1] = p.softcap;
    t->iparams[0] = p.k_panels ? 1 : 0;
    t->iparams[1] = p.mixed_sequences ? 1 : 0;
    nodes_.push_back(t);
    return t;
}

}  // namespace kiln
