// AVX-512 VNNI packed GEMM kernels (gemm.h) for q4_0 and q8_0 weights: the tiles of
// gemm_avx512_tiles.h with q4_0's high nibbles unpacked by a shift and a mask, and the
// activation quantizer every AVX-512 packed kernel uses. CPUs with GFNI, except Zen 4, get the
// q4_0 tiles of gemm_avx512gfni.cpp instead.
#include <immintrin.h>

#include "backends/cpu/kernels/gemm_avx512_tiles.h"
#include "backends/cpu/kernels/reduce_avx512.h"
#include "core/quant_blocks.h"

namespace kiln::cpu {
namespace {

// q4_0 high nibbles: (v >> 4) & 0x0F in every byte.
struct ShiftUnpack {
    static __m512i high_nibbles(__m512i v, __m512i m4) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), m4); }
};

constexpr PackedKernels kQ4_0{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm<true, ShiftUnpack>};
constexpr PackedKernels kQ8_0{.offset = 128, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm<false, ShiftUnpack>};
// The same with two weight groups per tile in prompts (gemm_wide; CPUs where CpuFeatures::zen5).
constexpr PackedKernels kQ4_0Wide{.offset = 8, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm_wide<true, ShiftUnpack>};
constexpr PackedKernels kQ8_0Wide{.offset = 128, .quantize_act = detail::quantize_act_as<detail::quantize_act_avx512, ActAux::Corr>, .gemm = gemm_wide<false, ShiftUnpack>};


// Lane b of the result: the reduction (Op: max or add, of float or int32 lanes as floats' bits) of
// the 16 lanes of v[b], for 16 vectors at once: a transposing tree of 45 shuffles and ops, where 16
// separate reductions (hmax) take 8 ops each in a chain of 4 dependent steps.
template <class Op>
inline __m512 lanes_reduce16(const __m512 (&v)[16], Op op) {
    __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) t[i] = op(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    // t[i], each 128-bit lane: [v[2i], v[2i + 1], v[2i], v[2i + 1]] (partial)
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) u[i] = op(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44), _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
    // u[i], each 128-bit lane: [v[4i], v[4i + 1], v[4i + 2], v[4i + 3]] over that lane's 4 elements
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) w[i] = op(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x44), _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xEE));
    return op(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
}

// quantize_act_avx512 for groups of NB 32-element blocks sharing one d, into tiles of kRows
// rows (kActTile, or kMatrixTileRows for the AMX int8 kernels). Rounding as the scalar
// reference (x * (1/d), round to nearest even), so both produce identical quants.
template <int NB, int kRows = kActTile>
void quantize_act_groups(ActAux kind, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid) {
    constexpr size_t kBlockBytes = kRows * (32 + sizeof(float) + sizeof(int32_t));
    // A block's 32 values (v0, v1) times id, rounded and clamped to +-127, into column c of blk with
    // its d; the quants in i0, i1 (the caller writes the block sums).
    auto quantize_block = [](__m512 v0, __m512 v1, __m512 id, float d, uint8_t* blk, int c, __m512i& i0, __m512i& i1) {
        const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
        i0 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id)), lim), nlim);
        i1 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id)), lim), nlim);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 32 * c), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 32 * c + 16), _mm512_cvtepi32_epi8(i1));
        reinterpret_cast<float*>(blk + 32 * kRows)[c] = d;
    };
    // v[2b], v[2b+1]: block b's 32 floats, into column c of the group's blocks; q: the quants.
    auto group = [&](const __m512 (&v)[2 * NB], uint8_t* blk0, int c, __m512i (&q)[2 * NB]) {
        __m512 m = _mm512_abs_ps(v[0]);
#pragma GCC unroll 16
        for (int i = 1; i < 2 * NB; ++i) m = _mm512_max_ps(m, _mm512_abs_ps(v[i]));
        const float d = hmax(m) / 127.0f;
        const __m512 id = _mm512_set1_ps(d > 0 ? 1.0f / d : 0.0f);
#pragma GCC unroll 8
        for (int b = 0; b < NB; ++b) {
            uint8_t* blk = blk0 + b * kBlockBytes;
            __m512i i0, i1;
            quantize_block(v[2 * b], v[2 * b + 1], id, d, blk, c, i0, i1);
            q[2 * b] = i0;
            q[2 * b + 1] = i1;
            if (kind == ActAux::Q6K) write_act_aux(blk, c, kind, offset, d, hsum(i0), hsum(i1), kRows);
            else write_act_aux(blk, c, kind, offset, d, hsum(_mm512_add_epi32(i0, i1)), 0, kRows);
        }
        return d;
    };
    int64_t b = 0;
    if constexpr (NB == 1) {
        // 16 blocks at a time: their scales from one tree of maxima (lanes_reduce16) and one
        // vector division each for d and 1 / d, the same values as the block-by-block code below
        // (max is exact, vdivps rounds as divss). Block by block, each block's chain (the 4-step
        // reduction, two dependent divisions, then the residual's the same again) left 24 ns a
        // block for the precise pair (bench_gemm QuantizeAct, AMX Xeon).
        alignas(64) float resid[16 * 32];
        alignas(64) float dv[16], idv[16];
        // Blocks src[32 i ..] (i < 16) into column c of the 16 blocks from blk0; the residuals into resid.
        auto sixteen = [&](const float* src, uint8_t* blk0, int c, bool keep_resid) {
            __m512 m[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) m[i] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + 32 * i)), _mm512_abs_ps(_mm512_loadu_ps(src + 32 * i + 16)));
            const __m512 d = _mm512_div_ps(lanes_reduce16(m, [](__m512 a, __m512 c2) { return _mm512_max_ps(a, c2); }), _mm512_set1_ps(127.0f));
            _mm512_store_ps(dv, d);
            _mm512_store_ps(idv, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_set1_ps(1.0f), d));
            __m512 sums[16];  // int32 lanes: the quants' sums (write_act_aux)
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) {
                const __m512 v0 = _mm512_loadu_ps(src + 32 * i), v1 = _mm512_loadu_ps(src + 32 * i + 16);
                __m512i i0, i1;
                quantize_block(v0, v1, _mm512_set1_ps(idv[i]), dv[i], blk0 + i * kBlockBytes, c, i0, i1);
                if (kind == ActAux::Q6K) {  // the two halves' sums in the low and high 16 bits
                    sums[i] = _mm512_castsi512_ps(_mm512_add_epi32(i0, _mm512_slli_epi32(i1, 16)));
                } else {
                    sums[i] = _mm512_castsi512_ps(_mm512_add_epi32(i0, i1));
                }
                if (keep_resid) {
                    const __m512 vd = _mm512_set1_ps(dv[i]);
                    _mm512_store_ps(resid + 32 * i, _mm512_sub_ps(v0, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(i0))));
                    _mm512_store_ps(resid + 32 * i + 16, _mm512_sub_ps(v1, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(i1))));
                }
            }
            alignas(64) int32_t sv[16];
            _mm512_store_ps(reinterpret_cast<float*>(sv), lanes_reduce16(sums, [](__m512 a, __m512 c2) {
                                return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(c2)));
                            }));
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) {
                // Q6K: lo + 2^16 hi, each half's sum at most 16 x 127 in magnitude
                const int32_t lo = kind == ActAux::Q6K ? static_cast<int16_t>(sv[i] & 0xFFFF) : sv[i];
                write_act_aux(blk0 + i * kBlockBytes, c, kind, offset, dv[i], lo, kind == ActAux::Q6K ? (sv[i] - lo) >> 16 : 0, kRows);
            }
        };
        for (; b + 16 <= K / 32; b += 16) {
            uint8_t* blk = tile + b * kBlockBytes;
            sixteen(x + 32 * b, blk, col, with_resid);
            if (with_resid) sixteen(resid, blk, col + 1, false);
        }
    }
    for (; b < K / 32; b += NB) {
        uint8_t* blk = tile + b * kBlockBytes;
        __m512 v[2 * NB];
        __m512i q[2 * NB];
#pragma GCC unroll 16
        for (int i = 0; i < 2 * NB; ++i) v[i] = _mm512_loadu_ps(x + 32 * b + 16 * i);
        const float d = group(v, blk, col, q);
        if (with_resid) {
            const __m512 vd = _mm512_set1_ps(d);
#pragma GCC unroll 16
            for (int i = 0; i < 2 * NB; ++i) v[i] = _mm512_sub_ps(v[i], _mm512_mul_ps(vd, _mm512_cvtepi32_ps(q[i])));
            group(v, blk, col + 1, q);
        }
    }
}

}  // namespace

namespace detail {

void quantize_act_avx512(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid) {
    if (scale == ActScale::SuperBlock) quantize_act_groups<QK_K / 32>(kind, x, K, offset, tile, col, with_resid);
    else quantize_act_groups<1>(kind, x, K, offset, tile, col, with_resid);
}

void quantize_act_avx512_matrix(ActAux kind, ActScale scale, const float* x, int64_t K, int32_t offset, uint8_t* tile, int col, bool with_resid) {
    if (scale == ActScale::SuperBlock) quantize_act_groups<QK_K / 32, kMatrixTileRows>(kind, x, K, offset, tile, col, with_resid);
    else quantize_act_groups<1, kMatrixTileRows>(kind, x, K, offset, tile, col, with_resid);
}

namespace {
// The VNNI kernels k of type t with the AMX int8 kernels as their batch kernels (where the
// build has them): one copy per type, made from the first k asked for (the same on every
// call: the choice depends on the CPU only).
const PackedKernels* with_amx_batch(Type t, const PackedKernels* k) {
    const PackedKernels* amx = packed_amx(t);
    if (!amx || !k) return k;
    if (t == Type::Q4_0) {
        static const PackedKernels kQ4_0With = with_batch(*k, amx, amx);
        return &kQ4_0With;
    }
    static const PackedKernels kQ8_0With = with_batch(*k, amx, amx);
    return &kQ8_0With;
}
}  // namespace

const PackedKernels* packed_avx512(Type t, const CpuFeatures& f) {
    if (!f.avx512vnni) return nullptr;
    if (f.amx_int8 && (t == Type::Q4_0 || t == Type::Q8_0)) {
        CpuFeatures vnni = f;
        vnni.amx_int8 = false;
        return with_amx_batch(t, packed_avx512(t, vnni));
    }
    switch (t) {
        // Zen 4 keeps the shift and mask: its vgf2p8affineqb issues on the two pipes that also
        // run vpdpbusd, the shift and the mask beside them. bench_gemm q4_0 one thread, GFNI ->
        // shift: M:1 +15-35%, M:1 precise +10-25% (weights in cache), M:8 and M:128 equal or
        // +2%; in the model (1b Q4_0, alternated token by token) generation +1%, pp128 +2-4%.
        case Type::Q4_0: return f.gfni && !f.zen4 ? packed_q4_0_avx512gfni(f.zen5) : f.zen5 ? &kQ4_0Wide : &kQ4_0;
        case Type::Q8_0: return f.zen5 ? &kQ8_0Wide : &kQ8_0;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu
