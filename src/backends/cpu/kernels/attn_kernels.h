// CPU attention kernels, one table per instruction set (scalar reference,
// AVX2, AVX-512, NEON), chosen at run time like the
// matmul kernels. op_attention (ops_attention.cpp) tiles the work flash-
// attention style and calls these for the arithmetic:
//
//   for each (query block, KV head):       Q [M = tokens x n_rep, hd]
//     for each visible key block of nk:    K^T [hd, nk], V [nk, hdv] as float
//       S = Q K^T                          gemm
//       S = softcap(S) + mask; row max     score_row
//       P = exp(S - m); row sum            exp_row
//       O = O * corr + P V                 gemm with per-row beta, V read
//                                          as stored (or as a float tile)
//
// In fast precision, on CPUs whose BF16 products outrun their F32 FMAs, the two products of
// query blocks with more than 8 rows run in BF16 instead (gemm_bf16: Q and K, P and V rounded).
// On CPUs with AVX512-FP16, such blocks over an F16 cache with K panels run in FP16 instead
// (gemm_f16: Q and P rounded, K and V read as stored, sums in fp16 runs).
//
// Every float matrix is row-major, with the leading dimension in floats.
// Column counts given to gemm are multiples of kAttnLanes and the tiles are
// padded to that, so the vector code needs no column tails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/kernels.h"
#include "core/float_convert.h"
#include "core/quant_blocks.h"
#include "core/types.h"

namespace kiln::cpu {

// Column padding of every attention tile (one AVX-512 register of floats).
inline constexpr int64_t kAttnLanes = 16;
inline constexpr int64_t attn_pad(int64_t n) { return (n + kAttnLanes - 1) / kAttnLanes * kAttnLanes; }

// Rows of the cache a gemm asks to be brought into L2 while it computes: the next key block's K tile
// or V rows, or (on Intel) its own B rows further ahead. Row k goes out at step k of the gemm's loop
// over K, so the requests are spread over the block's arithmetic; one burst of them (2 x 256 lines
// per block) stalled on the fill buffers instead of computing, and generation at depth 4096 read the
// cache at a quarter of the memory's rate.
struct AttnPrefetch {
    const uint8_t* first = nullptr;  // row 0
    size_t stride = 0;               // bytes from a row to the next
    int64_t rows = 0;
    size_t row_bytes = 0;
    size_t l1_back = 0;  // > 0: each row also into L1 from this many bytes before it (a nearer request)
};

// Walks an AttnPrefetch one row per step() (a kernel calls it once per step of its loop over K).
class PrefetchRows {
public:
    // The fields are copied: read through pf they were reloaded at every step of the kernels'
    // loops (the FMAs' inline asm operands keep GCC from proving them unchanged).
    explicit PrefetchRows(const AttnPrefetch* pf)
        : row_(pf ? pf->first : nullptr),
          stride_(pf ? pf->stride : 0),
          row_bytes_(pf ? pf->row_bytes : 0),
          l1_back_(pf ? pf->l1_back : 0),
          left_(pf ? pf->rows : 0) {}
    void step() {
        if (left_ <= 0) return;
        for (size_t off = 0; off < row_bytes_; off += 64) {
            if (l1_back_ > 0) prefetch_l1(row_ + off - l1_back_);
            prefetch_l2(row_ + off);
        }
        row_ += stride_;
        --left_;
    }

private:
    const uint8_t* row_;
    size_t stride_, row_bytes_, l1_back_;
    int64_t left_;
};

// C [M, N] = (beta ? C * beta[r] : 0) + A [M, K] * B [K, N], N a multiple of kAttnLanes. B's row k
// is b_cols elements of type bt (a native type) at B + k * b_stride, read as zeros from b_cols to N:
// an F32 tile, or V rows straight from the cache. pf (may be null): rows to prefetch meanwhile (a
// hint; kernels without prefetch ignore it).
using AttnGemmFn = void (*)(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, Type bt, const uint8_t* B,
                            size_t b_stride, int64_t b_cols, float* C, int64_t ldc, const float* beta,
                            const AttnPrefetch* pf);
// n K rows of hd elements (row i at attn_row(src, stride, idx, i), of type t) as float, transposed:
// dst[d * ld + i]. Columns n .. attn_pad(n) are written as zeros; ld >= attn_pad(n). idx: the rows'
// indices (gathered keys), or null for rows 0 .. n - 1.
using AttnKTransposeFn = void (*)(Type t, const uint8_t* src, size_t stride, const int32_t* idx, int64_t n, int64_t hd,
                                  float* dst, int64_t ld);
inline const uint8_t* attn_row(const uint8_t* src, size_t stride, const int32_t* idx, int64_t i) {
    return src + static_cast<size_t>(idx ? idx[i] : i) * stride;
}
// n V rows of hdv elements as float: dst[i * ld + c]; columns hdv .. attn_pad(hdv) are zeros.
using AttnVRowsFn = void (*)(Type t, const uint8_t* src, size_t stride, int64_t n, int64_t hdv, float* dst, int64_t ld);
// One row of scores: s[j] = (softcap > 0 ? softcap * tanh(s[j] / softcap) : s[j]) + mask[j], j < n;
// returns the row's maximum (-inf when every key is masked).
using AttnScoreRowFn = float (*)(float* s, const float* mask, int64_t n, float softcap);
// s[j] = exp(s[j] - m) for j < n (exp(-inf) = 0); returns the sum. m is finite.
using AttnExpRowFn = float (*)(float* s, int64_t n, float m);

// The visible keys (mask value not -inf) of mask[lo, hi): the first, one past the last (both
// hi when none is visible) and how many there are.
struct MaskSpan {
    int64_t first = 0, last = 0, count = 0;
};
using AttnMaskSpanFn = MaskSpan (*)(const float* mask, int64_t lo, int64_t hi);

// The reference (tables of instruction sets without a vector version use it).
inline MaskSpan mask_span_scalar(const float* mask, int64_t lo, int64_t hi) {
    MaskSpan r{.first = hi, .last = hi, .count = 0};
    for (int64_t c = lo; c < hi; ++c) {
        if (mask[c] == -std::numeric_limits<float>::infinity()) continue;
        if (r.count++ == 0) r.first = c;
        r.last = c + 1;
    }
    return r;
}

// The visible keys of mask[lo, hi) in order, as cell indices: idx[0 .. returned count). idx has
// room for hi - lo + kAttnLanes entries (a vector version stores whole registers).
using AttnMaskVisibleFn = int64_t (*)(const float* mask, int64_t lo, int64_t hi, int32_t* idx);

// The reference, without branches on the mask (batched decoding's keys interleave with the other
// sequences' in a pattern the branch predictor missed once per visible key).
inline int64_t mask_visible_scalar(const float* mask, int64_t lo, int64_t hi, int32_t* idx) {
    int64_t n = 0;
    for (int64_t c = lo; c < hi; ++c) {
        idx[n] = static_cast<int32_t>(c);
        n += mask[c] != -std::numeric_limits<float>::infinity();
    }
    return n;
}

// BF16 products (fast precision, op_attention): both operands rounded to BF16, products summed in
// float. Operands are in BF16 pairs: one 32-bit word holds elements 2p (low half) and 2p + 1
// (high half) along the product's inner dimension, which is what vdpbf16ps multiplies per lane.
// C [M, N] = (beta ? C * beta[r] : 0) + A [M, 2 Kp] * B [2 Kp, N], N a multiple of kAttnLanes;
// A's row r: Kp pairs from A + r * lda; B's pair row p: N pairs (column j's elements 2p and
// 2p + 1) from B + p * ldb.
using AttnGemmBf16Fn = void (*)(int64_t M, int64_t N, int64_t Kp, const uint32_t* A, int64_t lda, const uint32_t* B,
                                int64_t ldb, float* C, int64_t ldc, const float* beta);
// rows rows of cols elements of type t (row i at src + i * stride, a native type) as pair rows
// for AttnGemmBf16Fn's B: dst[(i / 2) * ld + c] holds rows i and i + 1 of column c (rounded to
// nearest even). An odd last row is paired with zeros; columns cols .. attn_pad(cols) are zeros.
using AttnBf16PairsFn = void (*)(Type t, const uint8_t* src, size_t stride, int64_t rows, int64_t cols, uint32_t* dst,
                                 int64_t ld);
// exp_row for the BF16 path: p[j] = exp(s[j] - m) rounded to BF16 for j < n, and p[n] = 0 when
// n is odd (the last pair's partner); returns the sum of the unrounded values. s is not written.
// The exp need only be accurate to well below BF16's 2^-9. pf (may be null): one cache line per 16
// values, pf, pf + 64, ..., asked for into L2 meanwhile (generation's softmax, ops_attention.cpp).
using AttnExpRowBf16Fn = float (*)(const float* s, int64_t n, float m, uint16_t* p, const uint8_t* pf);

// FP16 products (fast precision, CPUs with AVX512-FP16, whose vfmadd231ph does 32 multiply-adds at
// the F32 FMA's rate), for F16 K panels and V rows read as stored:
// C [M, N] = (beta ? C * beta[r] : 0) + a_scale[r] * A [M, K] * B [K, N] (a_scale null: 1), N a
// multiple of kAttnLanes. A's row r: K fp16 values from A + r * lda. B's row k: b_cols fp16 values
// at B + k * b_stride, read as zeros from b_cols to N. Products are summed per lane in fp16 runs of
// kAttnF16Run steps (one rounding per step), the runs in float; a run that overflows fp16 is
// summed again in float from the same operands, so large values cost speed, never infinities.
// A's rows should be scaled by powers of two to a largest |a| in [1, 2) (float_gemm::half_row_scale): the
// run sums then stay clear of fp16's underflow and, for |b| < 65504 / (2 kAttnF16Run), overflow.
inline constexpr int64_t kAttnF16Run = 32;
// pf (may be null): rows to prefetch meanwhile, as for AttnGemmFn.
using AttnGemmF16Fn = void (*)(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint8_t* B,
                               size_t b_stride, int64_t b_cols, float* C, int64_t ldc, const float* beta,
                               const float* a_scale, const AttnPrefetch* pf);
// exp_row for the FP16 path: p[j] = exp(s[j] - m) rounded to fp16 for j < n; returns the sum of
// the unrounded values. s is not written; pf as for AttnExpRowBf16Fn (the same signature).
using AttnExpRowF16Fn = float (*)(const float* s, int64_t n, float m, uint16_t* p, const uint8_t* pf);

struct AttnKernels {
    AttnGemmFn gemm = nullptr;
    AttnKTransposeFn k_transpose = nullptr;
    AttnVRowsFn v_rows = nullptr;
    AttnScoreRowFn score_row = nullptr;
    AttnExpRowFn exp_row = nullptr;
    AttnMaskSpanFn mask_span = mask_span_scalar;
    AttnMaskVisibleFn mask_visible = mask_visible_scalar;
    // Null where the CPU has no BF16 products faster than its F32 FMAs: attention then stays F32.
    AttnGemmBf16Fn gemm_bf16 = nullptr;
    AttnBf16PairsFn bf16_pairs = nullptr;
    AttnExpRowBf16Fn exp_row_bf16 = nullptr;
    // Null where the CPU lacks AVX512-FP16: prompt attention over an F16 cache then stays F32 (or BF16).
    AttnGemmF16Fn gemm_f16 = nullptr;
    AttnExpRowF16Fn exp_row_f16 = nullptr;
};

// The table of an instruction set (the scalar one where the set has none).
// The set must be supported (isa_supported); op_attention passes selected_isa().
const AttnKernels& attn_kernels(Isa isa);

// KV cache types the converters read directly; op_attention dequantizes any
// other type to F32 rows first.
inline bool attn_native_type(Type t) { return t == Type::F32 || t == Type::F16 || t == Type::BF16 || t == Type::Q8_0; }

// Element d of a row of a native type (tails and the scalar table).
inline float attn_elem(Type t, const uint8_t* row, int64_t d) {
    switch (t) {
        case Type::F32: return reinterpret_cast<const float*>(row)[d];
        case Type::F16: return fp16_to_fp32(reinterpret_cast<const fp16_t*>(row)[d]);
        case Type::BF16: return bf16_to_fp32(reinterpret_cast<const bf16_t*>(row)[d]);
        default: {  // Q8_0
            const auto* b = reinterpret_cast<const block_q8_0*>(row) + d / QK8_0;
            return fp16_to_fp32(b->d) * static_cast<float>(b->qs[d % QK8_0]);
        }
    }
}

namespace detail {
const AttnKernels& attn_scalar();
#if defined(KILN_ARCH_X86)
const AttnKernels& attn_avx2();
const AttnKernels& attn_avx512();
#endif
#if defined(KILN_ARCH_ARM64)
const AttnKernels& attn_neon();
#endif
}  // namespace detail

}  // namespace kiln::cpu
