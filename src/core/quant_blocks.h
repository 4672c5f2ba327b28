// Quantized block layouts, bit-compatible with GGUF files written by the GGML
// ecosystem. This is the ONE place these layouts are defined: the reference
// quantizers, every CPU SIMD kernel and every GPU backend include this header.
// Sizes are static_asserted so a layout change cannot go unnoticed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

using fp16_t = uint16_t;  // IEEE 754 binary16 bits
using bf16_t = uint16_t;  // bfloat16 bits (upper half of a float32)

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_K = 256;            // super-block size of the K-quants
constexpr int K_SCALE_SIZE = 12;     // packed 6-bit scales/mins of Q4_K, Q5_K

// x = d * (q - 8), q in [0, 15]; element j in low nibble of qs[j], j+16 in high nibble.
struct block_q4_0 {
    fp16_t d;
    uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

// x = d * q + m, q in [0, 15]; nibble order as q4_0.
struct block_q4_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

// x = d * (q - 16), q in [0, 31]; low 4 bits as q4_0, bit 4 of element j in bit j of qh.
struct block_q5_0 {
    fp16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

// x = d * q + m, q in [0, 31]; bits as q5_0.
struct block_q5_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

// x = d * q, q in [-127, 127].
struct block_q8_0 {
    fp16_t d;
    int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

// Activation format for the *_1 dot products: s = d * sum(qs).
// (gguf-py's size table says 40 bytes, the historic float layout; the GGML C
// library, which defines the format, has used 2 x fp16 = 36 bytes since 2023.
// Q8_1 never occurs in model files.)
struct block_q8_1 {
    fp16_t d;
    fp16_t s;
    int8_t qs[QK8_1];
};
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

// x = d * kvalues_iq4nl[q], q in [0, 15]; nibble order as q4_0.
struct block_iq4_nl {
    fp16_t d;
    uint8_t qs[QK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

// The non-linear 4-bit grid of IQ4_NL.
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

// 16 sub-blocks of 16; scales[i]: low nibble 4-bit scale, high nibble 4-bit min.
// x = d * sc * q - dmin * m, q in [0, 3] (2 bits, 4 per byte in qs).
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    fp16_t d;
    fp16_t dmin;
};
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

// 16 sub-blocks of 16, 6-bit signed scales (offset 32) packed in 12 bytes;
// q = low 2 bits from qs, high bit from hmask (set means +0, clear means -4).
// x = d * (sc - 32) * (q - 4 * !hbit).
struct block_q3_K;
// The signed scale of sub-block j (0..15) of Q3_K: low nibble in byte j (j < 8) or the high
// nibble of byte j - 8, top two bits at bits 2*(j/4) of byte 8 + j%4, stored offset by 32.
inline int q3_K_scale(const uint8_t* scales, int j) {
    const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    fp16_t d;
};
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

// 8 sub-blocks of 32; 6-bit scale and min per sub-block packed in scales[12].
// Scale and min of sub-block j (0..7) of Q4_K / Q5_K: sub-blocks 0-3 in the low 6 bits of
// bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 as a nibble in bytes 8-11 plus the top
// two bits of bytes 0-7.
inline void k4_scale_min(const uint8_t* scales, int j, int& sc, int& m) {
    if (j < 4) {
        sc = scales[j] & 63;
        m = scales[j + 4] & 63;
    } else {
        sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
        m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

// x = d * sc * q - dmin * m, q in [0, 15].
struct block_q4_K {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

// As q4_K with a fifth bit per element in qh.
struct block_q5_K {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

// 16 sub-blocks of 16, int8 scales; q = 4 low bits (ql) + 2 high bits (qh), x = d * sc * (q - 32).
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    fp16_t d;
};
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

// Activation format for the K-quant dot products; bsums[i] = sum of qs[16 i .. 16 i + 15].
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

// ---- Interleaved ("packed") weight layouts for the CPU GEMM kernels ----
// Weights are repacked at load into groups of kPackRows consecutive rows; for each
// block column b the group stores the 16 rows' block b together, arranged so one 64-byte
// load feeds 16 rows x 4 consecutive elements to a 32-bit-lane dot product (AVX-512 VNNI
// vpdpbusd: each lane = one row). Quants are stored unsigned (q + offset) so they can be
// the unsigned operand; the kernels remove the offset with the activation block sums.
// The values are exactly those of the source blocks (a lossless reshuffle).
constexpr int kPackRows = 16;

// 16 rows of block_q4_0. chunk c (0..3) of qs holds, for row r, bytes 4c..4c+3 of that
// row's qs at qs[64 c + 4 r ..]: low nibbles are elements 4c..4c+3, high nibbles 16+4c..
// 16+4c+3. Offset 8 (x = d * (q - 8)), as in block_q4_0.
struct block_q4_0x16 {
    fp16_t d[kPackRows];
    uint8_t qs[kPackRows * QK4_0 / 2];
};
static_assert(sizeof(block_q4_0x16) == kPackRows * sizeof(block_q4_0), "block_q4_0x16 size");

// 16 rows of block_q8_0. chunk c (0..7) holds, for row r, elements 4c..4c+3 of that row
// at qs[64 c + 4 r ..], stored as q + 128 (unsigned).
struct block_q8_0x16 {
    fp16_t d[kPackRows];
    uint8_t qs[kPackRows * QK8_0];
};
static_assert(sizeof(block_q8_0x16) == kPackRows * sizeof(block_q8_0), "block_q8_0x16 size");

// The K-quant layouts interleave every per-row byte array the same way: byte j of row r
// goes to 64 * (j / 4) + 4 * r + j % 4, so one 64-byte load is dword j / 4 of all 16 rows
// (one 32-bit lane per row). Quants stay unsigned as in the source (the kernels handle the
// offsets); scales stay in their packed integer form, so sizes equal the source's.
constexpr size_t interleaved_offset(int j, int r) { return static_cast<size_t>(64 * (j / 4) + 4 * r + j % 4); }

// 16 rows of block_q4_K: d, dmin per row; scales = the rows' 12 scale bytes interleaved
// (dword k of row r at 64 k + 4 r); qs = the rows' 128 quant bytes interleaved. Dword c of
// sub-block pair i (qs bytes 32 i + 4 c ..) holds elements 64 i + 4 c .. + 3 in its low
// nibbles and 64 i + 32 + 4 c .. + 3 in its high nibbles.
struct block_q4_Kx16 {
    fp16_t d[kPackRows];
    fp16_t dmin[kPackRows];
    uint8_t scales[kPackRows * K_SCALE_SIZE];
    uint8_t qs[kPackRows * QK_K / 2];
};
static_assert(sizeof(block_q4_Kx16) == kPackRows * sizeof(block_q4_K), "block_q4_Kx16 size");

// 16 rows of block_q6_K, each byte array interleaved as above; the quants first so that
// the big loads of every other group are 64-byte aligned.
struct block_q6_Kx16 {
    uint8_t ql[kPackRows * QK_K / 2];
    uint8_t qh[kPackRows * QK_K / 4];
    int8_t scales[kPackRows * QK_K / 16];
    fp16_t d[kPackRows];
};
static_assert(sizeof(block_q6_Kx16) == kPackRows * sizeof(block_q6_K), "block_q6_Kx16 size");

// 16 rows x 32 columns of F16 (or BF16: same arrangement, bf16_t values). Chunk c (0..15)
// holds elements 2c and 2c+1 of row r at v[32 c + 2 r], v[32 c + 2 r + 1]: one 64-byte
// load is 16 rows x 2 consecutive elements, the operand of a BF16 pair dot product
// (AVX-512 vdpbf16ps: one 32-bit lane per row). A group of 16 rows is K / 32 such blocks;
// their chunks follow each other, so a group is simply K / 2 chunks of 64 bytes. The
// values are the source's exactly (F16 stays F16; kernels convert in registers).
constexpr int kPackCols16 = 32;  // columns per block of the 16-bit float layouts
struct block_f16x16 {
    uint16_t v[kPackRows * kPackCols16];
};
static_assert(sizeof(block_f16x16) == kPackRows * kPackCols16 * sizeof(fp16_t), "block_f16x16 size");

}  // namespace kiln
