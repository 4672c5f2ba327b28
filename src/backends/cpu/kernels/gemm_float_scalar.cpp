// Scalar reference of the packed F16/BF16 GEMM kernels (gemm_float.h): the ground truth
// the SIMD versions are tested against, and the fallback for instruction sets without
// their own (the model loader only repacks where a SIMD version exists).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(KILN_ARCH_X86) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include "backends/cpu/kernels/gemm_float.h"
#include "core/float_convert.h"

namespace kiln::cpu {
namespace {

using namespace float_gemm;

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

// Fast, Half path: column col of a Half tile (row scaled by a power of two, rounded to fp16).
void act_half_ref(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float s = float_gemm::half_row_scale(amax);
    for (int64_t b = 0; b < K / kPackCols16; ++b) {
        auto* out = reinterpret_cast<fp16_t*>(tile + b * kBf16BlockBytes + col * kBf16RowBytes);
        for (int i = 0; i < kPackCols16; ++i) out[i] = fp32_to_fp16(x[b * kPackCols16 + i] * s);
    }
    reinterpret_cast<float*>(tile + bf16_tile_bytes(K))[col] = 1.0f / s;
}

// v rounded once to the nearest fp16 value (ties to even), as a float; the exact result
// of an fp16 FMA when v = w * x + acc is exact in double (it is unless the terms are ~2^50
// apart, where at most the last bit of a run could differ).
float round_half(double v) {
    if (v == 0 || !std::isfinite(v)) return static_cast<float>(v);
    const int q = std::max(std::ilogb(v), -14) - 10;  // exponent of the fp16 ulp at v
    const double h = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);
    if (std::fabs(h) > 65504.0) return std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(v));
    return static_cast<float>(h);
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

// Half path: per lane (row, element parity), runs of kHalfRun fp16 FMAs, widened into a
// float sum per parity; the parities added and the activation scale undone at the end.
void gemm_half_ref(const GemmTask& t) {
    const int64_t nb = t.K / kPackCols16;
    constexpr int64_t kRunBlocks = kHalfRun / (kPackCols16 / 2);
    const size_t tile_bytes = half_tile_bytes(t.K);
    for (int64_t g = 0; g < t.n_groups; ++g) {
        const auto* wg = reinterpret_cast<const block_f16x16*>(t.w + g * t.w_group_bytes);
        for (int64_t m = 0; m < t.M; ++m) {
            const uint8_t* tile = t.x + (m / kActTile) * tile_bytes;
            const int col = static_cast<int>(m % kActTile);
            const float inv = reinterpret_cast<const float*>(tile + bf16_tile_bytes(t.K))[col];
            for (int r = 0; r < kPackRows; ++r) {
                float sum[2] = {0, 0};
                for (int64_t b0 = 0; b0 < nb; b0 += kRunBlocks) {
                    float run[2] = {0, 0};
                    for (int64_t b = b0; b < std::min(nb, b0 + kRunBlocks); ++b) {
                        const auto* xh = reinterpret_cast<const fp16_t*>(tile + b * kBf16BlockBytes + col * kBf16RowBytes);
                        for (int i = 0; i < kPackCols16; ++i) {
                            const double w = weight<Type::F16>(wg[b], r, i), x = fp16_to_fp32(xh[i]);
                            run[i % 2] = round_half(std::fma(w, x, static_cast<double>(run[i % 2])));
                        }
                    }
                    sum[0] += run[0];
                    sum[1] += run[1];
                }
                t.y[m * t.y_stride + g * kPackRows + r] = (sum[0] + sum[1]) * inv;
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

// Fast mode through F32 (the precise kernels), and F16 through Half.
constexpr PackedKernels kF16F32{.offset = 0, .quantize_act = act_f32_ref, .gemm = gemm_ref<Type::F16, true>, .tile_bytes = f32_tile_bytes,
                                .precise = &kF16Precise};
constexpr PackedKernels kBF16F32{.offset = 0, .quantize_act = act_f32_ref, .gemm = gemm_ref<Type::BF16, true>, .tile_bytes = f32_tile_bytes,
                                 .precise = &kBF16Precise};
constexpr PackedKernels kF16Half{.offset = 0, .quantize_act = act_half_ref, .gemm = gemm_half_ref, .tile_bytes = half_tile_bytes,
                                 .precise = &kF16Precise};

bool cpu_has_avx512fp16() {
#if defined(KILN_ARCH_X86) && (defined(__GNUC__) || defined(__clang__))
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 23) & 1u) != 0 && cpu_features().avx512f;
#else
    return false;
#endif
}

}  // namespace

float float_gemm::half_row_scale_slow(float amax) {
    if (!(amax > 0) || !std::isfinite(amax)) return 1.0f;
    int e = 0;
    std::frexp(amax, &e);  // amax = m 2^e, m in [0.5, 1)
    return std::ldexp(1.0f, std::clamp(1 - e, -100, 100));
}

float_gemm::FastPath float_gemm::fast_path(Type t) {
    static const bool fp16 = cpu_has_avx512fp16();  // constant for the process
    if (fp16) return t == Type::F16 ? FastPath::Half : FastPath::F32;
    return cpu_features().avx512bf16 ? FastPath::Bf16 : FastPath::F32;
}

const PackedKernels* float_gemm::detail::float_scalar(Type t, FastPath p) {
    if (t == Type::F16) return p == FastPath::Half ? &kF16Half : p == FastPath::Bf16 ? &kF16 : &kF16F32;
    if (t == Type::BF16 && p != FastPath::Half) return p == FastPath::Bf16 ? &kBF16 : &kBF16F32;
    return nullptr;
}

namespace detail {
const PackedKernels* packed_float_scalar(Type t) { return float_gemm::detail::float_scalar(t, float_gemm::fast_path(t)); }
}  // namespace detail

}  // namespace kiln::cpu
