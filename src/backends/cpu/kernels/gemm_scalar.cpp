// Scalar reference of the packed GEMM kernels (gemm.h): the ground truth the SIMD
// versions are tested against, and the fallback for instruction sets without their own.
// Also the run-time choice between them.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/gemm_bf16_matrix.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

// The stored (unsigned, offset) quant of element i of row r in one x16 block.
struct Q4_0x16 {
    using Block = block_q4_0x16;
    static constexpr int kBlock = QK4_0;
    static int quant(const Block& g, int r, int i) {
        const uint8_t byte = g.qs[64 * ((i % 16) / 4) + 4 * r + i % 4];
        return i < 16 ? (byte & 0x0F) : (byte >> 4);
    }
};
struct Q8_0x16 {
    using Block = block_q8_0x16;
    static constexpr int kBlock = QK8_0;
    static int quant(const Block& g, int r, int i) { return g.qs[64 * (i / 4) + 4 * r + i % 4]; }
};

template <class L>
void gemm_ref(const GemmTask& t) {
    const int64_t nb = t.K / L::kBlock;
    const size_t tile_bytes = act_tile_bytes(t.K);
    for (int64_t g = 0; g < t.n_groups; ++g) {
        const auto* wg = reinterpret_cast<const typename L::Block*>(t.w + g * t.w_group_bytes);
        for (int64_t m = 0; m < t.M; ++m) {
            for (int r = 0; r < kPackRows; ++r) {
                float acc = 0;
                for (int p = 0; p < t.pairs; ++p) {
                    const int64_t a = m * t.pairs + p;  // activation row
                    const uint8_t* tile = t.x + (a / kActTile) * tile_bytes;
                    const int col = static_cast<int>(a % kActTile);
                    for (int64_t b = 0; b < nb; ++b) {
                        const uint8_t* blk = tile + b * kActBlockBytes;
                        const auto* xq = reinterpret_cast<const int8_t*>(blk + 32 * col);
                        int32_t s = reinterpret_cast<const int32_t*>(blk + 36 * kActTile)[col];
                        for (int i = 0; i < L::kBlock; ++i) s += L::quant(wg[b], r, i) * xq[i];
                        const float f = static_cast<float>(s) * reinterpret_cast<const float*>(blk + 32 * kActTile)[col];
                        acc += f * fp16_to_fp32(wg[b].d[r]);
                    }
                }
                t.y[m * t.y_stride + g * kPackRows + r] = acc;
            }
        }
    }
}

constexpr PackedKernels kQ4_0{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_scalar, ActAux::Corr>, .gemm = gemm_ref<Q4_0x16>};
constexpr PackedKernels kQ8_0{.offset = 128, .quantize_act = detail::quantize_act_as<detail::quantize_act_scalar, ActAux::Corr>, .gemm = gemm_ref<Q8_0x16>};

}  // namespace

namespace detail {

void quantize_act_scalar(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid) {
    // nb 32-element blocks (one group sharing d) into column c: int8 quants, d, third field.
    auto group = [&](const float* v, int nb, uint8_t* blk0, int c) {
        float amax = 0;
        for (int i = 0; i < 32 * nb; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float d = amax / 127.0f;
        const float id = d > 0 ? 1.0f / d : 0.0f;
        for (int b = 0; b < nb; ++b) {
            uint8_t* blk = blk0 + b * kActBlockBytes;
            auto* q = reinterpret_cast<int8_t*>(blk + 32 * c);
            int32_t sum[2] = {0, 0};
            for (int i = 0; i < 32; ++i) {
                q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(v[32 * b + i] * id), -127.0f, 127.0f));
                sum[i / 16] += q[i];
            }
            reinterpret_cast<float*>(blk + 32 * kActTile)[c] = d;
            write_act_aux(blk, c, kind, offset, d, sum[0], sum[1]);
        }
        return d;
    };
    const int nb = scale == ActScale::SuperBlock ? QK_K / 32 : 1;
    for (int64_t b = 0; b < K / 32; b += nb) {
        uint8_t* blk = tile + b * kActBlockBytes;
        const float d = group(x + 32 * b, nb, blk, col);
        if (with_resid) {
            float r[QK_K];
            for (int i = 0; i < 32 * nb; ++i) {
                const auto q = reinterpret_cast<const int8_t*>(blk + (i / 32) * kActBlockBytes + 32 * col)[i % 32];
                r[i] = x[32 * b + i] - d * static_cast<float>(q);
            }
            group(r, nb, blk, col + 1);
        }
    }
}

const PackedKernels* packed_scalar(Type t) {
    switch (t) {
        case Type::Q4_0: return &kQ4_0;
        case Type::Q8_0: return &kQ8_0;
        case Type::F16:
        case Type::BF16: return packed_float_scalar(t);
        case Type::Q4_K:
        case Type::Q6_K: return packed_kquants_scalar(t);
        default: return nullptr;
    }
}
}  // namespace detail

WeightsPrefetch weights_prefetch() {
    static const WeightsPrefetch p = [] {  // gemm.h
        const CpuFeatures& f = cpu_features();
        const bool q8_0_gen = !(f.zen4 && f.avx512f), float_weights = !f.amd;
        if (f.zen5) return WeightsPrefetch{.near_l1 = false, .far_all_levels = true, .far_bytes = 8192, .q8_0_gen = q8_0_gen, .float_weights = float_weights};
        const bool zen3 = f.zen4 && !f.avx512f;  // family 19h: Zen 4 has AVX-512, Zen 3 does not
        const size_t far = zen3 ? size_t{2048} : f.amd ? size_t{16384} : size_t{6144};
        return WeightsPrefetch{.near_l1 = !f.amd, .far_all_levels = false, .far_bytes = far, .q8_0_gen = q8_0_gen, .float_weights = float_weights,
                               .part_far_bytes = zen3 ? size_t{4096} : 0, .kv_far_bytes = zen3 ? size_t{2048} : 0};
    }();
    return p;
}

const PackedKernels* packed_kernels(Type t, Isa isa) {
#if defined(KILN_ARCH_X86)
    if (isa == Isa::Avx512) {
        const PackedKernels* k = detail::packed_avx512(t, cpu_features());
        if (!k) k = detail::packed_float_avx512(t, cpu_features());
        if (!k) k = detail::packed_kquants_avx512(t, cpu_features());
        if (k) return bf16_matrix::detail::with_batches(t, k, false);  // AMX-BF16 tiles for batches
    }
    // AVX-512 CPUs without VNNI (Skylake-SP) run the AVX2 kernels for the int8 types.
    if (isa == Isa::Avx2 || isa == Isa::Avx512) {
        if (const PackedKernels* k = detail::packed_avx2(t, cpu_features())) return k;
        if (const PackedKernels* k = detail::packed_kquants_avx2(t, cpu_features())) return k;
        if (const PackedKernels* k = detail::packed_float_avx2(t, cpu_features())) return k;
    }
#endif
    // The reference takes what the AVX-512 kernels take for batches, so it mirrors them.
    (void)isa;
    return bf16_matrix::detail::with_batches(t, detail::packed_scalar(t), true);
}

bool packed_accelerated(Type t, Isa isa) {
#if defined(KILN_ARCH_X86)
    if (isa == Isa::Avx512) {
        return detail::packed_avx512(t, cpu_features()) != nullptr || detail::packed_float_avx512(t, cpu_features()) != nullptr ||
               detail::packed_kquants_avx512(t, cpu_features()) != nullptr || detail::packed_avx2(t, cpu_features()) != nullptr ||
               detail::packed_kquants_avx2(t, cpu_features()) != nullptr || detail::packed_float_avx2(t, cpu_features()) != nullptr;
    }
    if (isa == Isa::Avx2) {
        return detail::packed_avx2(t, cpu_features()) != nullptr || detail::packed_kquants_avx2(t, cpu_features()) != nullptr ||
               detail::packed_float_avx2(t, cpu_features()) != nullptr;
    }
#endif
    (void)t;
    (void)isa;
    return false;
}

}  // namespace kiln::cpu
