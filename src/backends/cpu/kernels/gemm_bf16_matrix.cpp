// Reference kernels of the BF16 matrix tiles (gemm_bf16_matrix.h): what the AMX-BF16 kernels
// compute, row by row. Each group's 16 rows are unpacked, dequantized by the core's
// dequantize_row and rounded to BF16; each output sums the exact float products of BF16 pairs
// in element order (as tdpbf16ps adds them, up to the rounding of its steps).
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/gemm_bf16_matrix.h"
#include "backends/cpu/kernels/gemm_float.h"
#include "core/float_convert.h"
#include "core/quant.h"
#include "core/quant_repack.h"
#include "core/types.h"

namespace kiln::cpu::bf16_matrix {
namespace detail {
namespace {
const PackedKernels* kernels_amx_or_null(Type t) {
#if defined(KILN_ARCH_X86)
    return kernels_amx(t);
#else
    (void)t;
    return nullptr;
#endif
}
}  // namespace
}  // namespace detail

namespace {

using float_gemm::to_bf16;

template <Type T>
void gemm_ref(const GemmTask& t) {
    const int64_t K = t.K;
    const size_t tb = tile_bytes(K);
    std::vector<uint8_t> row(row_size(T, K));
    std::vector<float> deq(static_cast<size_t>(K));
    std::vector<float> w(static_cast<size_t>(kPackRows * K));  // the group's rows, BF16 values
    for (int64_t g = 0; g < t.n_groups; ++g) {
        for (int r = 0; r < kPackRows; ++r) {
            unpack_row(T, t.w + g * t.w_group_bytes, K, r, row.data());
            dequantize_row(T, row.data(), deq.data(), K);
            for (int64_t k = 0; k < K; ++k) w[r * K + k] = bf16_to_fp32(to_bf16(deq[k]));
        }
        for (int64_t m = 0; m < t.M; ++m) {
            const uint8_t* xt = t.x + (m / kMatrixTileRows) * tb + (m % kMatrixTileRows) * kRowBytes;
            for (int r = 0; r < kPackRows; ++r) {
                float acc = 0;
                for (int64_t k = 0; k < K; ++k) {
                    bf16_t xb;
                    std::memcpy(&xb, xt + (k / 32) * kActBlockBytes + 2 * (k % 32), 2);
                    acc += bf16_to_fp32(xb) * w[r * K + k];
                }
                t.y[m * t.y_stride + g * kPackRows + r] = acc;
            }
        }
    }
}

constexpr PackedKernels kernels(GemmFn gemm) {
    return {.offset = 0, .quantize_act = detail::act_scalar, .gemm = gemm, .tile_bytes = tile_bytes, .tile_rows = kMatrixTileRows};
}
constexpr PackedKernels kQ4_0 = kernels(gemm_ref<Type::Q4_0>);
constexpr PackedKernels kQ8_0 = kernels(gemm_ref<Type::Q8_0>);
constexpr PackedKernels kF16 = kernels(gemm_ref<Type::F16>);
constexpr PackedKernels kBF16 = kernels(gemm_ref<Type::BF16>);
constexpr PackedKernels kQ4_K = kernels(gemm_ref<Type::Q4_K>);
constexpr PackedKernels kQ6_K = kernels(gemm_ref<Type::Q6_K>);

// Kernels k with the BF16 matrix kernels as their batch kernels (and their coarse kernels'),
// precise mode's residual pairs keeping k's own (batch_pairs). One copy per type and side, made
// from the first k asked for: the same on every call (the choice depends on the CPU only).
struct WithBatches {
    PackedKernels main, coarse;
};
template <Type T, bool kScalar>
const PackedKernels* wrapped(const PackedKernels& k) {
    static WithBatches w{k, k};
    static const bool done = [&k] {
        const PackedKernels* batch = kScalar ? detail::kernels_scalar(T) : detail::kernels_amx_or_null(T);
        w.main = with_batch(k, batch, kScalar ? nullptr : k.batch_pairs);
        if (k.coarse) {
            w.coarse = with_batch(*k.coarse, batch, nullptr);
            w.main.coarse = &w.coarse;
        }
        return true;
    }();
    (void)done;
    return &w.main;
}

}  // namespace

namespace detail {
void act_scalar(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    for (int64_t k = 0; k < K; ++k) {
        const bf16_t v = to_bf16(x[k]);
        std::memcpy(tile + (k / 32) * kActBlockBytes + col * kRowBytes + 2 * (k % 32), &v, 2);
    }
}

bool amx_batches(Type t) {
#if defined(KILN_ARCH_X86)
    return cpu_features().amx_bf16 && kernels_amx(t) != nullptr;
#else
    (void)t;
    return false;
#endif
}

const PackedKernels* with_batches(Type t, const PackedKernels* k, bool scalar) {
    if (!k || !amx_batches(t)) return k;
    switch (t) {
        case Type::Q4_0: return scalar ? wrapped<Type::Q4_0, true>(*k) : wrapped<Type::Q4_0, false>(*k);
        case Type::Q8_0: return scalar ? wrapped<Type::Q8_0, true>(*k) : wrapped<Type::Q8_0, false>(*k);
        case Type::F16: return scalar ? wrapped<Type::F16, true>(*k) : wrapped<Type::F16, false>(*k);
        case Type::BF16: return scalar ? wrapped<Type::BF16, true>(*k) : wrapped<Type::BF16, false>(*k);
        case Type::Q4_K: return scalar ? wrapped<Type::Q4_K, true>(*k) : wrapped<Type::Q4_K, false>(*k);
        case Type::Q6_K: return scalar ? wrapped<Type::Q6_K, true>(*k) : wrapped<Type::Q6_K, false>(*k);
        default: return k;
    }
}

const PackedKernels* kernels_scalar(Type t) {
    switch (t) {
        case Type::Q4_0: return &kQ4_0;
        case Type::Q8_0: return &kQ8_0;
        case Type::F16: return &kF16;
        case Type::BF16: return &kBF16;
        case Type::Q4_K: return &kQ4_K;
        case Type::Q6_K: return &kQ6_K;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu::bf16_matrix
