// Scalar reference of the packed F16/BF16 GEMM kernels (gemm_float.h): the ground truth
// the SIMD versions are tested against, and the fallback for instruction sets without
// their own (the model loader only repacks where a SIMD version exists).
#include <bit>
#include <cstring>

#include "backends/cpu/kernels/gemm_float.h"
#include "core/float_convert.h"

namespace kiln::cpu {
namespace {

using namespace float_gemm;

// float -> bf16 as vcvtneps2bf16 does it: round to nearest even, subnormal inputs to
// (signed) zero, so the scalar and SIMD tiles are identical bit for bit.
bf16_t to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7f800000u) == 0) return static_cast<bf16_t>((x >> 16) & 0x8000u);
    return fp32_to_bf16(f);
}

// Fast mode: column col of a BF16 tile. Nothing to add for a residual (precise mode uses
// the F32 format instead), so with_resid is never set.
void act_bf16_ref(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    for (int64_t b = 0; b < K / kPackCols16; ++b) {
        auto* out = reinterpret_cast<bf16_t*>(tile + b * kBf16BlockBytes + col * kBf16RowBytes);
        for (int i = 0; i < kPackCols16; ++i) out[i] = to_bf16(x[b * kPackCols16 + i]);
    }
}

// Precise mode: column col of an F32 tile (a copy).
void act_f32_ref(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    for (int64_t b = 0; b < K / kPackCols16; ++b) {
        std::memcpy(tile + b * kF32BlockBytes + col * kF32RowBytes, x + b * kPackCols16, kF32RowBytes);
    }
}

// Element i (0..31) of row r in one packed block, as float.
template <Type T>
float weight(const block_f16x16& blk, int r, int i) {
    const uint16_t v = blk.v[32 * (i / 2) + 2 * r + i % 2];
    if constexpr (T == Type::F16) {
        return fp16_to_fp32(v);
    } else {
        return bf16_to_fp32(v);
    }
}

// Fast: weights rounded to BF16, BF16 activations, products exact, float sums.
// Precise: exact weights, F32 activations.
template <Type T, bool kPrecise>
void gemm_ref(const GemmTask& t) {
    const int64_t nb = t.K / kPackCols16;
    const size_t tile_bytes = kPrecise ? f32_tile_bytes(t.K) : bf16_tile_bytes(t.K);
    for (int64_t g = 0; g < t.n_groups; ++g) {
        const auto* wg = reinterpret_cast<const block_f16x16*>(t.w + g * t.w_group_bytes);
        for (int64_t m = 0; m < t.M; ++m) {
            const uint8_t* tile = t.x + (m / kActTile) * tile_bytes;
            const int col = static_cast<int>(m % kActTile);
            for (int r = 0; r < kPackRows; ++r) {
                float acc = 0;
                for (int64_t b = 0; b < nb; ++b) {
                    for (int i = 0; i < kPackCols16; ++i) {
                        float w = weight<T>(wg[b], r, i), x;
                        if constexpr (kPrecise) {
                            x = reinterpret_cast<const float*>(tile + b * kF32BlockBytes + col * kF32RowBytes)[i];
                        } else {
                            w = bf16_to_fp32(to_bf16(w));
                            x = bf16_to_fp32(reinterpret_cast<const bf16_t*>(tile + b * kBf16BlockBytes + col * kBf16RowBytes)[i]);
                        }
                        acc += w * x;
                    }
                }
                t.y[m * t.y_stride + g * kPackRows + r] = acc;
            }
        }
    }
}

constexpr PackedKernels kF16Precise{.offset = 0, .quantize_act = act_f32_ref, .gemm = gemm_ref<Type::F16, true>, .tile_bytes = f32_tile_bytes};
constexpr PackedKernels kF16{.offset = 0, .quantize_act = act_bf16_ref, .gemm = gemm_ref<Type::F16, false>, .tile_bytes = bf16_tile_bytes,
                             .precise = &kF16Precise};
constexpr PackedKernels kBF16Precise{.offset = 0, .quantize_act = act_f32_ref, .gemm = gemm_ref<Type::BF16, true>, .tile_bytes = f32_tile_bytes};
constexpr PackedKernels kBF16{.offset = 0, .quantize_act = act_bf16_ref, .gemm = gemm_ref<Type::BF16, false>, .tile_bytes = bf16_tile_bytes,
                              .precise = &kBF16Precise};

}  // namespace

namespace detail {
const PackedKernels* packed_float_scalar(Type t) {
    switch (t) {
        case Type::F16: return &kF16;
        case Type::BF16: return &kBF16;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu
