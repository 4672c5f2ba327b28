// AMX-BF16 GEMM over BF16 matrix tiles (gemm_bf16_matrix.h) for F16, BF16, Q4_K and Q6_K
// weights, on CPUs where CpuFeatures::amx_bf16.
//
// One tdpbf16ps multiplies a 16 x 32 activation block (A, 1 KiB, read in place from its tile)
// with a 32 x 16 weight block (B, 1 KiB) into 16 x 16 float sums that stay in the tile register
// over all of K. Two activation tiles x two weight groups: four accumulators (tmm0..3), each
// operand loaded once per block for two products. Compared with 8-row A operands (the first
// F16 kernel), this halves the bytes loaded per multiply-add, which the tile loads from L2
// bound: bench_gemm f16 M 128 / 512, one thread, docs/engine.md.
//
// Weight groups are decoded to BF16 once per activation slice (about 3 MiB of activation tiles,
// kSliceBytes) into the thread's scratch: F16 rounded chunk by chunk; Q4_K and Q6_K
// through the VNNI kernels' decoder (decode_kquant_group_avx512: 8-bit quants and float scale
// vectors per super-block), then w = d * sc * q - dmin * m (Q4_K, one FMA) or d * sc * (q - 32)
// (Q6_K) in float, rounded to BF16. BF16 weights are read in place.
#include "backends/cpu/kernels/gemm_bf16_matrix.h"

#if defined(__AMX_BF16__) && defined(__AMX_TILE__) && defined(__linux__)
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/kernels/amx_tiles.h"  // TileConfig
#include "backends/cpu/kernels/dot_avx512.h"  // lane_byte, f16_chunk_to_bf16
#include "core/quant_blocks.h"

namespace kiln::cpu::bf16_matrix {
namespace {

// Every tile register 16 rows of 64 bytes:
//   tmm0..tmm3  float sums, [activation tile i][group g] = tmm(2i + g): 16 rows x 16 floats
//   tmm4, tmm5  activation tiles 0 and 1, one block: 16 rows x 32 BF16
//   tmm6, tmm7  groups 0 and 1, one block: 16 rows (element pairs) x 16 columns x 2 BF16
TileConfig tile_config() {
    TileConfig c;
    for (int i = 0; i < 8; ++i) {
        c.rows[i] = kMatrixTileRows;
        c.colsb[i] = 64;
    }
    return c;
}

// ---- activations ----

void act_avx512(const float* x, int64_t K, int32_t, uint8_t* tile, int col, bool) {
    for (int64_t b = 0; b < K / 32; ++b) {
        const __m512 lo = _mm512_loadu_ps(x + 32 * b), hi = _mm512_loadu_ps(x + 32 * b + 16);
        _mm512_storeu_si512(tile + b * kActBlockBytes + col * kRowBytes, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
}

// ---- weights to BF16 B operands ----

void prepare_f16(const uint8_t* wg, int64_t K, uint8_t* out) {
    for (int64_t c = 0; c < K / 2; ++c) _mm512_store_si512(out + 64 * c, reinterpret_cast<__m512i>(f16_chunk_to_bf16(wg + 64 * c)));
}

// The two B chunks of a decoded quant register (lane r: quants 4c..4c+3 of row r) whose
// values are e_i = lane_byte(v, i) * scale + bias: chunk 2c (elements 4c, 4c+1) and 2c + 1.
inline void store_chunk_pair(__m512i v, __m512 scale, __m512 bias, uint8_t* out) {
    // words [e0 of rows 0..15, e1 of rows 0..15] -> row r's pair at words 2r, 2r + 1
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3,
                                                18, 2, 17, 1, 16, 0);
    __m512 e[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) e[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane_byte(v, i)), scale, bias);
    const __m512i p0 = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e[1], e[0]));
    const __m512i p1 = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e[3], e[2]));
    _mm512_store_si512(out, _mm512_permutexvar_epi16(interleave, p0));
    _mm512_store_si512(out + 64, _mm512_permutexvar_epi16(interleave, p1));
}

// q4_0 / q8_0 (quant_blocks.h): w = d * (q - 8), d * (u - 128) for the stored u = q + 128.
template <Type T>
void prepare_q8(const uint8_t* wg, int64_t K, uint8_t* out) {
    constexpr bool kQ4 = T == Type::Q4_0;
    constexpr size_t kBlockBytes = kQ4 ? sizeof(block_q4_0x16) : sizeof(block_q8_0x16);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = wg + b * kBlockBytes;
        uint8_t* o = out + b * kWBlockBytes;
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
        const __m512 bias = _mm512_mul_ps(d, _mm512_set1_ps(kQ4 ? -8.0f : -128.0f));
        if constexpr (kQ4) {
            // Chunk s: low nibbles are register s (elements 4s..4s+3), high nibbles register s + 4.
#pragma GCC unroll 4
            for (int s = 0; s < 4; ++s) {
                const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * s);
                store_chunk_pair(_mm512_and_si512(v, m4), d, bias, o + 128 * s);
                store_chunk_pair(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), d, bias, o + 128 * (s + 4));
            }
        } else {
#pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) store_chunk_pair(_mm512_loadu_si512(blk + 32 + 64 * c), d, bias, o + 128 * c);
        }
    }
}

// Decoded super-block (detail::kKQuantDecodedBytes, gemm.h): quant register 8j + c, then the
// 16 float scale vectors.
template <Type T>
void prepare_kquant(const uint8_t* wg, int64_t K, uint8_t* out) {
    constexpr size_t kBlockBytes = T == Type::Q4_K ? sizeof(block_q4_Kx16) : sizeof(block_q6_Kx16);
    alignas(64) uint8_t dec[kiln::cpu::detail::kKQuantDecodedBytes];
    const auto* q = reinterpret_cast<const __m512i*>(dec);
    const auto* s = reinterpret_cast<const __m512*>(dec + 64 * 64);
    for (int64_t sb = 0; sb < K / QK_K; ++sb) {
        kiln::cpu::detail::decode_kquant_group_avx512(T, wg + sb * kBlockBytes, 1, dec);
        for (int j = 0; j < 8; ++j) {
            uint8_t* blk = out + (sb * 8 + j) * kWBlockBytes;
            if constexpr (T == Type::Q4_K) {
                // w = (d * sc) * q - dmin * m (odd sub-blocks: quants in the high nibble, d * sc / 16)
                const __m512 dsc = s[j], dmn = _mm512_sub_ps(_mm512_setzero_ps(), s[8 + j]);
#pragma GCC unroll 8
                for (int c = 0; c < 8; ++c) store_chunk_pair(_mm512_load_si512(q + 8 * j + c), dsc, dmn, blk + 128 * c);
            } else {
                // w = (d * sc) * (q - 32), sub-block 2j for elements 0..15 of block j, 2j + 1 after
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m512 dsc = s[2 * j + h], bias = _mm512_mul_ps(dsc, _mm512_set1_ps(-32.0f));
#pragma GCC unroll 4
                    for (int c = 4 * h; c < 4 * h + 4; ++c) store_chunk_pair(_mm512_load_si512(q + 8 * j + c), dsc, bias, blk + 128 * c);
                }
            }
        }
    }
}

// ---- the gemm ----

// Activation tiles x0 (and x1: NT = 2) x B operands w0 (and w1: NG = 2), nb blocks: the sums
// of all of K into tmm(2i + g).
template <int NT, int NG>
void tile_products(const uint8_t* x0, const uint8_t* x1, const uint8_t* w0, const uint8_t* w1, int64_t nb) {
    _tile_zero(0);
    if constexpr (NG == 2) _tile_zero(1);
    if constexpr (NT == 2) _tile_zero(2);
    if constexpr (NT == 2 && NG == 2) _tile_zero(3);
    for (int64_t b = 0; b < nb; ++b) {
        _tile_loadd(6, w0 + b * kWBlockBytes, 64);
        _tile_loadd(4, x0 + b * kActBlockBytes, kRowBytes);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (NG == 2) {
            _tile_loadd(7, w1 + b * kWBlockBytes, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if constexpr (NT == 2) {
            _tile_loadd(5, x1 + b * kActBlockBytes, kRowBytes);
            _tile_dpbf16ps(2, 5, 6);
            if constexpr (NG == 2) _tile_dpbf16ps(3, 5, 7);
        }
    }
}

// Writes tile register tmm (16 x 16 floats) to y (rows y_stride floats apart), nc rows of it.
// The register number is a literal in the instruction, hence one case per register.
inline void store_sums(int tmm, float* y, int64_t y_stride, int nc) {
    alignas(64) float part[kMatrixTileRows * 16];
    const bool whole = nc == kMatrixTileRows;
    float* dst = whole ? y : part;
    const int64_t stride = whole ? y_stride * static_cast<int64_t>(sizeof(float)) : 64;
    // GCC's _tile_stored declares no memory operand; this one clobbers memory, so the copy
    // below reads what it wrote (once per tile and K: no cost that shows).
#define KILN_TILE_STORED(n) asm volatile("tilestored %%tmm" #n ", (%0,%1,1)" : : "r"(dst), "r"(stride) : "memory")
    switch (tmm) {
        case 0: KILN_TILE_STORED(0); break;
        case 1: KILN_TILE_STORED(1); break;
        case 2: KILN_TILE_STORED(2); break;
        default: KILN_TILE_STORED(3); break;
    }
#undef KILN_TILE_STORED
    if (!whole) {
        for (int j = 0; j < nc; ++j) _mm512_storeu_ps(y + j * y_stride, _mm512_load_ps(part + 16 * j));
    }
}

using PrepareFn = void (*)(const uint8_t* wg, int64_t K, uint8_t* out);

// Activation bytes per slice: each group is decoded once per slice, so larger slices decode less
// often, while their tiles come from L3 rather than L2 (2 MiB a core here); the tile loads
// tolerate that. kiln-bench pp128 / pp512 on the 1b models, 2 threads, alternated, 1.25 MiB (all
// of a slice in L2) -> 3 MiB: Q4_0 667-690 / 617-618 -> 708-723 / 653-665, Q8_0 606-607 / 605-616
// -> 636-650 / 672-677, F16 490-493 / 537-545 -> 536-538 / 637-642, Q4_K_M pp512 617-645 ->
// 676-726; 6 and 16 MiB measured as 3 (the ffn_down product, K = 5632, had slices of 96 rows).
constexpr size_t kSliceBytes = size_t{3} << 20;

// kPrepare null: BF16 weights, read in place.
template <PrepareFn kPrepare>
void gemm_amx(const GemmTask& t) {
    const int64_t nb = t.K / 32;
    const size_t tb = tile_bytes(t.K);
    const int64_t n_tiles = (t.M + kMatrixTileRows - 1) / kMatrixTileRows;
    // Activation tiles in slices of about kSliceBytes, in pairs.
    const int64_t slice = std::max<int64_t>(2, static_cast<int64_t>(kSliceBytes / tb) & ~int64_t{1});
    const TileConfig cfg = tile_config();
    _tile_loadconfig(&cfg);
    for (int64_t s0 = 0; s0 < n_tiles; s0 += slice) {
        const int64_t s1 = std::min(n_tiles, s0 + slice);
        for (int64_t g = 0; g < t.n_groups; g += 2) {
            const int ng = static_cast<int>(std::min<int64_t>(2, t.n_groups - g));
            const uint8_t* w0 = t.w + g * t.w_group_bytes;
            const uint8_t* w1 = w0 + (ng == 2 ? t.w_group_bytes : 0);
            if constexpr (kPrepare != nullptr) {
                kPrepare(w0, t.K, t.scratch);
                if (ng == 2) kPrepare(w1, t.K, t.scratch + nb * kWBlockBytes);
                compiler_fence();  // tileloadd declares no memory operand: the stores go first
                w0 = t.scratch;
                w1 = t.scratch + (ng == 2 ? nb * kWBlockBytes : 0);
            }
            for (int64_t ti = s0; ti < s1; ti += 2) {
                const int nt = static_cast<int>(std::min<int64_t>(2, s1 - ti));
                const uint8_t* x0 = t.x + ti * tb;
                const uint8_t* x1 = x0 + (nt == 2 ? tb : 0);
                if (nt == 2) {
                    if (ng == 2) tile_products<2, 2>(x0, x1, w0, w1, nb);
                    else tile_products<2, 1>(x0, x1, w0, w1, nb);
                } else {
                    if (ng == 2) tile_products<1, 2>(x0, x1, w0, w1, nb);
                    else tile_products<1, 1>(x0, x1, w0, w1, nb);
                }
                for (int i = 0; i < nt; ++i) {
                    const int64_t m0 = (ti + i) * kMatrixTileRows;
                    const int nc = static_cast<int>(std::min<int64_t>(kMatrixTileRows, t.M - m0));
                    for (int gi = 0; gi < ng; ++gi) store_sums(2 * i + gi, t.y + m0 * t.y_stride + (g + gi) * kPackRows, t.y_stride, nc);
                }
            }
            compiler_fence();  // the next pair's decoding overwrites what these tiles read
        }
    }
    _tile_release();
}

constexpr PackedKernels kernels(GemmFn gemm, bool decoded) {
    return {.offset = 0, .quantize_act = act_avx512, .gemm = gemm, .tile_bytes = tile_bytes, .tile_rows = kMatrixTileRows,
            .gemm_scratch_bytes = decoded ? scratch_bytes : nullptr};
}
constexpr PackedKernels kF16 = kernels(gemm_amx<prepare_f16>, true);
constexpr PackedKernels kBF16 = kernels(gemm_amx<nullptr>, false);
constexpr PackedKernels kQ4_0 = kernels(gemm_amx<prepare_q8<Type::Q4_0>>, true);
constexpr PackedKernels kQ8_0 = kernels(gemm_amx<prepare_q8<Type::Q8_0>>, true);
constexpr PackedKernels kQ4_K = kernels(gemm_amx<prepare_kquant<Type::Q4_K>>, true);
constexpr PackedKernels kQ6_K = kernels(gemm_amx<prepare_kquant<Type::Q6_K>>, true);

}  // namespace

namespace detail {
const PackedKernels* kernels_amx(Type t) {
    switch (t) {
        case Type::F16: return &kF16;
        case Type::BF16: return &kBF16;
        case Type::Q4_0: return &kQ4_0;
        case Type::Q8_0: return &kQ8_0;
        case Type::Q4_K: return &kQ4_K;
        case Type::Q6_K: return &kQ6_K;
        default: return nullptr;
    }
}
}  // namespace detail

}  // namespace kiln::cpu::bf16_matrix

#elif defined(KILN_ARCH_X86)

namespace kiln::cpu::bf16_matrix::detail {
const PackedKernels* kernels_amx(Type) { return nullptr; }
}  // namespace kiln::cpu::bf16_matrix::detail

#endif
