#include "core/tensor.h"

namespace kiln {

std::string_view op_name(Op op) {
    switch (op) {
        case Op::None: return "none";
        case Op::View: return "view";
        case Op::GetRows: return "get_rows";
        case Op::MulMat: return "mul_mat";
        case Op::Add: return "add";
        case Op::Mul: return "mul";
        case Op::Scale: return "scale";
        case Op::RmsNorm: return "rms_norm";
        case Op::Rope: return "rope";
        case Op::Silu: return "silu";
        case Op::GeluTanh: return "gelu_tanh";
        case Op::SwiGlu: return "swiglu";
        case Op::GeGlu: return "geglu";
        case Op::SoftMax: return "soft_max";
        case Op::Attention: return "attention";
        case Op::StoreRows: return "store_rows";
        case Op::Count: break;
    }
    return "?";
}

void set_contiguous_strides(Tensor& t) {
    const auto& tr = traits(t.type);
    t.nb[0] = tr.type_size;
    t.nb[1] = row_size(t.type, t.ne[0]);
    t.nb[2] = t.nb[1] * static_cast<size_t>(t.ne[1]);
    t.nb[3] = t.nb[2] * static_cast<size_t>(t.ne[2]);
}

size_t Tensor::nbytes() const {
    if (nelements() == 0) return 0;
    size_t bytes = row_bytes();
    for (int i = 1; i < 4; ++i) bytes += static_cast<size_t>(ne[i] - 1) * nb[i];
    return bytes;
}

bool Tensor::is_contiguous() const {
    return nb[1] == row_bytes() && nb[2] == nb[1] * static_cast<size_t>(ne[1]) &&
           nb[3] == nb[2] * static_cast<size_t>(ne[2]);
}

}  // namespace kiln
