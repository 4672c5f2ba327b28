// Scalar reference of the packed GEMM kernels for Q4_K and Q6_K weights (gemm.h): the
// ground truth the SIMD versions are tested against, and the fallback for instruction sets
// without their own.
//
// The K-quant kernels use the q8 activation tiles of gemm.h (32-element blocks: int8
// quants, float d per row) but give the tile's third field (the q8 kernels' int32 corr)
// a meaning of their own, because their weights carry per-sub-block offsets:
//   Q4_K (sub-blocks of 32, x = d sc q - dmin m): the float d * sum(q), so the min term of
//        a sub-block is one FMA with the weights' dmin * m.
//   Q6_K (sub-blocks of 16, x = d sc (q - 32)): two int16, the sums of the block's first
//        and last 16 quants (low, high half), which remove the offset 32 of each sub-block.
// `offset` is therefore unused (PackedKernels::offset is 0 for these types).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/gemm.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

// Byte j of row r's interleaved array.
inline uint8_t byte_of(const uint8_t* a, int j, int r) { return a[interleaved_offset(j, r)]; }

// One output: row r of a group against activation row `col` of a tile, accumulated into acc.
void dot_q4_K(const block_q4_Kx16* w, int64_t nsb, int r, const uint8_t* tile, int col, float& acc) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const block_q4_Kx16& g = w[sb];
        uint8_t scales[K_SCALE_SIZE];
        for (int j = 0; j < K_SCALE_SIZE; ++j) scales[j] = byte_of(g.scales, j, r);
        const float d = fp16_to_fp32(g.d[r]), dmin = fp16_to_fp32(g.dmin[r]);
        for (int j = 0; j < 8; ++j) {
            int sc, m;
            k4_scale_min(scales, j, sc, m);
            const uint8_t* blk = tile + (sb * 8 + j) * kActBlockBytes;
            const auto* xq = reinterpret_cast<const int8_t*>(blk + 32 * col);
            int32_t s = 0;
            for (int i = 0; i < 32; ++i) {
                const uint8_t byte = byte_of(g.qs, 32 * (j / 2) + i, r);
                s += ((byte >> (4 * (j % 2))) & 0xF) * xq[i];
            }
            const float xd = reinterpret_cast<const float*>(blk + 32 * kActTile)[col];
            float xsum;
            std::memcpy(&xsum, blk + 36 * kActTile + 4 * col, 4);
            acc += static_cast<float>(s) * xd * (static_cast<float>(sc) * d);
            acc -= static_cast<float>(m) * dmin * xsum;
        }
    }
}

void dot_q6_K(const block_q6_Kx16* w, int64_t nsb, int r, const uint8_t* tile, int col, float& acc) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const block_q6_Kx16& g = w[sb];
        const float d = fp16_to_fp32(g.d[r]);
        for (int b = 0; b < 8; ++b) {  // activation block = sub-blocks 2b, 2b+1
            const uint8_t* blk = tile + (sb * 8 + b) * kActBlockBytes;
            const auto* xq = reinterpret_cast<const int8_t*>(blk + 32 * col);
            const float xd = reinterpret_cast<const float*>(blk + 32 * kActTile)[col];
            uint32_t pair;
            std::memcpy(&pair, blk + 36 * kActTile + 4 * col, 4);
            for (int h = 0; h < 2; ++h) {
                int32_t s = -32 * static_cast<int16_t>(pair >> (16 * h));
                for (int i = 16 * h; i < 16 * h + 16; ++i) {
                    const int e = 32 * b + i;  // element of the super-block
                    const int half = e / 128, k = (e / 32) % 4, l = e % 32;
                    const int low = (byte_of(g.ql, 64 * half + 32 * (k % 2) + l, r) >> (4 * (k / 2))) & 0xF;
                    const int high = (byte_of(g.qh, 32 * half + l, r) >> (2 * k)) & 3;
                    s += (low | (high << 4)) * xq[i];
                }
                const auto sc = static_cast<int8_t>(byte_of(reinterpret_cast<const uint8_t*>(g.scales), 2 * b + h, r));
                acc += static_cast<float>(s) * xd * (static_cast<float>(sc) * d);
            }
        }
    }
}

template <class Block, void (*kDot)(const Block*, int64_t, int, const uint8_t*, int, float&)>
void gemm_ref(const GemmTask& t) {
    const int64_t nsb = t.K / QK_K;
    const size_t tile_bytes = act_tile_bytes(t.K);
    for (int64_t g = 0; g < t.n_groups; ++g) {
        const auto* wg = reinterpret_cast<const Block*>(t.w + g * t.w_group_bytes);
        for (int64_t m = 0; m < t.M; ++m) {
            for (int r = 0; r < kPackRows; ++r) {
                float acc = 0;
                for (int p = 0; p < t.pairs; ++p) {
                    const int64_t a = m * t.pairs + p;  // activation row
                    kDot(wg, nsb, r, t.x + (a / kActTile) * tile_bytes, static_cast<int>(a % kActTile), acc);
                }
                t.y[m * t.y_stride + g * kPackRows + r] = acc;
            }
        }
    }
}

// Fast precision's prompts and batches: activations scaled per super-block, as the AVX-512
// kernels take them there (PackedKernels::coarse); the same dot products read them per block.
constexpr PackedKernels kQ4_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_scalar, ActAux::Q4K, ActScale::SuperBlock>, .gemm = gemm_ref<block_q4_Kx16, dot_q4_K>};
constexpr PackedKernels kQ6_KCoarse{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_scalar, ActAux::Q6K, ActScale::SuperBlock>, .gemm = gemm_ref<block_q6_Kx16, dot_q6_K>};
constexpr PackedKernels kQ4_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_scalar, ActAux::Q4K>, .gemm = gemm_ref<block_q4_Kx16, dot_q4_K>, .coarse = &kQ4_KCoarse};
constexpr PackedKernels kQ6_K{.offset = 0, .quantize_act = detail::quantize_act_as<detail::quantize_act_scalar, ActAux::Q6K>, .gemm = gemm_ref<block_q6_Kx16, dot_q6_K>, .coarse = &kQ6_KCoarse};

}  // namespace

namespace detail {
const PackedKernels* packed_kquants_scalar(Type t) {
    switch (t) {
        case Type::Q4_K: return &kQ4_K;
        case Type::Q6_K: return &kQ6_K;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu
