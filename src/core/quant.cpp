#include "core/quant.h"

#include <stdexcept>
#include <string>

#include "core/quant_ref.h"

namespace kiln {
namespace {

using QuantizeFn = void (*)(const float*, void*, int64_t, const float*);
using DequantizeFn = void (*)(const void*, float*, int64_t);

struct RefKernels {
    Type type;
    QuantizeFn quantize;
    DequantizeFn dequantize;
};

// Adapts the typed per-format kernels of quant_ref.h to untyped pointers.
template <typename Block, void (*Q)(const float*, Block*, int64_t, const float*)>
void quantize_adapter(const float* x, void* y, int64_t n, const float* w) {
    Q(x, static_cast<Block*>(y), n, w);
}
template <typename Block, void (*D)(const Block*, float*, int64_t)>
void dequantize_adapter(const void* x, float* y, int64_t n) {
    D(static_cast<const Block*>(x), y, n);
}

#define KILN_REF(TYPE, BLOCK, SUFFIX)                                                    \
    RefKernels {                                                                         \
        Type::TYPE, &quantize_adapter<BLOCK, &ref::quantize_row_##SUFFIX>,               \
            &dequantize_adapter<BLOCK, &ref::dequantize_row_##SUFFIX>                    \
    }

void quantize_row_f32(const float* x, float* y, int64_t n, const float*) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}
void dequantize_row_f32(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}

const RefKernels kKernels[] = {
    RefKernels{Type::F32, &quantize_adapter<float, &quantize_row_f32>, &dequantize_adapter<float, &dequantize_row_f32>},
    KILN_REF(F16, fp16_t, f16),
    KILN_REF(BF16, bf16_t, bf16),
    KILN_REF(Q4_0, block_q4_0, q4_0),
    KILN_REF(Q4_1, block_q4_1, q4_1),
    KILN_REF(Q5_0, block_q5_0, q5_0),
    KILN_REF(Q5_1, block_q5_1, q5_1),
    KILN_REF(Q8_0, block_q8_0, q8_0),
    KILN_REF(Q8_1, block_q8_1, q8_1),
    KILN_REF(Q2_K, block_q2_K, q2_K),
    KILN_REF(Q3_K, block_q3_K, q3_K),
    KILN_REF(Q4_K, block_q4_K, q4_K),
    KILN_REF(Q5_K, block_q5_K, q5_K),
    KILN_REF(Q6_K, block_q6_K, q6_K),
    KILN_REF(Q8_K, block_q8_K, q8_K),
    KILN_REF(IQ4_NL, block_iq4_nl, iq4_nl),
};
#undef KILN_REF

const RefKernels& kernels_for(Type type, int64_t n, const char* what) {
    const auto& tr = traits(type);
    for (const auto& k : kKernels) {
        if (k.type != type) continue;
        if (n < 0 || n % tr.block_size != 0) {
            throw std::invalid_argument(std::string(what) + ": " + std::to_string(n) + " elements of type " +
                                        std::string(tr.name) + " is not a multiple of its block size " +
                                        std::to_string(tr.block_size));
        }
        return k;
    }
    throw std::invalid_argument(std::string(what) + ": type " + std::string(tr.name) +
                                " has no reference quantizer in kiln");
}

}  // namespace

bool has_reference(Type type) {
    for (const auto& k : kKernels) {
        if (k.type == type) return true;
    }
    return false;
}

size_t quantize(Type type, const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float* importance) {
    const auto& k = kernels_for(type, n_per_row, "quantize");
    const size_t row_bytes = row_size(type, n_per_row);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < nrows; ++r) {
        k.quantize(src + r * n_per_row, out + static_cast<size_t>(r) * row_bytes, n_per_row, importance);
    }
    return static_cast<size_t>(nrows) * row_bytes;
}

void dequantize_row(Type type, const void* src, float* dst, int64_t n) {
    kernels_for(type, n, "dequantize").dequantize(src, dst, n);
}

}  // namespace kiln
