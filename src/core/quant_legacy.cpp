// Legacy 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//
// Without importance weights the quantizers reproduce the GGML reference
// formulas bit for bit (float32 arithmetic in the same order, truncation after
// adding the offset + 0.5), so files match those written by llama.cpp and
// gguf-py. With weights they search for the scale (and offset) that minimises
// the weighted squared error, as llama.cpp does when given an imatrix.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "core/quant_ref.h"

namespace kiln::ref {
namespace {

constexpr int kBlock = 32;

int nearest_int(float v) { return static_cast<int>(std::lround(v)); }

// Element weights for a block: the imatrix weight times the magnitude scale
// sqrt(sigma2 + x^2), which keeps large weights accurate in absolute terms.
void block_weights(const float* x, const float* w, float sigma2, float* out) {
    for (int j = 0; j < kBlock; ++j) out[j] = w[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

float row_sigma2(const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return static_cast<float>(2.0 * s / static_cast<double>(n));
}

// Weighted symmetric search: q in [-nmax, nmax - 1], x ~ d * q.
// Returns d; fills q (unsigned, offset by nmax).
float search_symmetric(const float* x, const float* wt, int nmax, uint8_t* q) {
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    if (amax < 1e-30f) {
        std::fill(q, q + kBlock, static_cast<uint8_t>(nmax));
        return 0.0f;
    }
    float best_d = 0, best_score = -1;
    for (int step = -9; step <= 9; ++step) {
        const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
        double sumlx = 0, suml2 = 0;
        for (int j = 0; j < kBlock; ++j) {
            const int l = std::clamp(nearest_int(iscale * x[j]), -nmax, nmax - 1);
            sumlx += static_cast<double>(wt[j]) * x[j] * l;
            suml2 += static_cast<double>(wt[j]) * l * l;
        }
        if (suml2 <= 0) continue;
        // For fixed q the best scale is sumlx / suml2 and the error drops by sumlx^2 / suml2.
        const double score = sumlx * sumlx / suml2;
        if (score > best_score) {
            best_score = static_cast<float>(score);
            best_d = static_cast<float>(sumlx / suml2);
        }
    }
    // Requantize with the fp16-rounded scale actually stored.
    const float d = fp16_to_fp32(fp32_to_fp16(best_d));
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < kBlock; ++j) {
        q[j] = static_cast<uint8_t>(std::clamp(nearest_int(x[j] * id), -nmax, nmax - 1) + nmax);
    }
    return best_d;
}

// Weighted asymmetric search: q in [0, nmax], x ~ d * q + m. Returns {d, m}; fills q.
void search_affine(const float* x, const float* wt, int nmax, uint8_t* q, float* d_out, float* m_out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kBlock; ++j) {
        min = std::min(min, x[j]);
        max = std::max(max, x[j]);
    }
    if (max - min < 1e-30f) {
        std::fill(q, q + kBlock, uint8_t{0});
        *d_out = 0;
        *m_out = min;
        return;
    }
    double best_err = -1;
    float best_d = (max - min) / static_cast<float>(nmax), best_m = min;
    for (int step = -10; step <= 10; ++step) {
        const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / (max - min);
        // Weighted least squares for (d, m) given the levels l.
        double sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
        for (int j = 0; j < kBlock; ++j) {
            const int l = std::clamp(nearest_int(iscale * (x[j] - min)), 0, nmax);
            sw += wt[j];
            sl += wt[j] * l;
            sll += static_cast<double>(wt[j]) * l * l;
            sx += wt[j] * x[j];
            slx += static_cast<double>(wt[j]) * l * x[j];
        }
        const double det = sw * sll - sl * sl;
        if (det <= 0) continue;
        const float d = static_cast<float>((sw * slx - sl * sx) / det);
        const float m = static_cast<float>((sll * sx - sl * slx) / det);
        if (d <= 0) continue;
        double err = 0;
        for (int j = 0; j < kBlock; ++j) {
            const int l = std::clamp(nearest_int((x[j] - m) / d), 0, nmax);
            const double diff = static_cast<double>(d) * l + m - x[j];
            err += wt[j] * diff * diff;
        }
        if (best_err < 0 || err < best_err) {
            best_err = err;
            best_d = d;
            best_m = m;
        }
    }
    const float d = fp16_to_fp32(fp32_to_fp16(best_d));
    const float m = fp16_to_fp32(fp32_to_fp16(best_m));
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < kBlock; ++j) q[j] = static_cast<uint8_t>(std::clamp(nearest_int((x[j] - m) * id), 0, nmax));
    *d_out = best_d;
    *m_out = best_m;
}

void pack_nibbles(const uint8_t* q, uint8_t* qs) {
    for (int j = 0; j < kBlock / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + kBlock / 2] & 0x0f) << 4));
}

void pack_high_bits(const uint8_t* q, uint8_t* qh) {
    uint32_t h = 0;
    for (int j = 0; j < kBlock; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1u) << j;
    for (int b = 0; b < 4; ++b) qh[b] = static_cast<uint8_t>(h >> (8 * b));  // little-endian
}

uint32_t load_high_bits(const uint8_t* qh) {
    return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 | static_cast<uint32_t>(qh[2]) << 16 |
           static_cast<uint32_t>(qh[3]) << 24;
}

// GGML reference for the symmetric formats: d = (value of largest magnitude) / -half,
// q = min(2 half - 1, trunc(x / d + half + 0.5)).
float reference_symmetric(const float* x, int half, uint8_t* q) {
    float amax = 0, max = 0;
    for (int j = 0; j < kBlock; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    const float d = max / static_cast<float>(-half);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const float offset = static_cast<float>(half) + 0.5f;
    for (int j = 0; j < kBlock; ++j) {
        const float v = x[j] * id + offset;
        q[j] = static_cast<uint8_t>(std::min(2 * half - 1, static_cast<int>(v)));
    }
    return d;
}

// GGML reference for the affine formats: d = (max - min) / levels, m = min,
// q = min(levels, trunc((x - min) / d + 0.5)).
float reference_affine(const float* x, int levels, uint8_t* q, float* m_out) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kBlock; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / static_cast<float>(levels);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < kBlock; ++j) {
        const float v = (x[j] - min) * id + 0.5f;
        q[j] = static_cast<uint8_t>(std::min(levels, static_cast<int>(v)));
    }
    *m_out = min;
    return d;
}

}  // namespace

void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n, const float* w) {
    const float sigma2 = w ? row_sigma2(x, n) : 0.0f;
    for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
        uint8_t q[kBlock];
        float d;
        if (w) {
            float wt[kBlock];
            block_weights(x, w + b * kBlock, sigma2, wt);
            d = search_symmetric(x, wt, 8, q);
        } else {
            d = reference_symmetric(x, 8, q);
        }
        y[b].d = fp32_to_fp16(d);
        pack_nibbles(q, y[b].qs);
    }
}

void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < kBlock / 2; ++j) {
            y[j] = static_cast<float>((x[b].qs[j] & 0x0f) - 8) * d;
            y[j + kBlock / 2] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n, const float* w) {
    const float sigma2 = w ? row_sigma2(x, n) : 0.0f;
    for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
        uint8_t q[kBlock];
        float d, m;
        if (w) {
            float wt[kBlock];
            block_weights(x, w + b * kBlock, sigma2, wt);
            search_affine(x, wt, 15, q, &d, &m);
        } else {
            d = reference_affine(x, 15, q, &m);
        }
        y[b].d = fp32_to_fp16(d);
        y[b].m = fp32_to_fp16(m);
        pack_nibbles(q, y[b].qs);
    }
}

void dequantize_row_q4_1(const block_q4_1* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
        const float d = fp16_to_fp32(x[b].d);
        const float m = fp16_to_fp32(x[b].m);
        for (int j = 0; j < kBlock / 2; ++j) {
            y[j] = d * static_cast<float>(x[b].qs[j] & 0x0f) + m;
            y[j + kBlock / 2] = d * static_cast<float>(x[b].qs[j] >> 4) + m;
        }
    }
}

void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n, const float* w) {
    const float sigma2 = w ? row_sigma2(x, n) : 0.0f;
    for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
        uint8_t q[kBlock];
        float d;
        if (w) {
            float wt[kBlock];
            block_weights(x, w + b * kBlock, sigma2, wt);
            d = search_symmetric(x, wt, 16, q);
        } else {
            d = reference_symmetric(x, 16, q);
        }
        y[b].d = fp32_to_fp16(d);
        pack_high_bits(q, y[b].qh);
        pack_nibbles(q, y[b].qs);
    }
}

void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
        const float d = fp16_to_fp32(x[b].d);
        const uint32_t qh = load_high_bits(x[b].qh);
        for (int j = 0; j < kBlock / 2; ++j) {
            const int lo = (x[b].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int hi = (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            y[j] = static_cast<float>(lo - 16) * d;
            y[j + kBlock / 2] = static_cast<float>(hi - 16) * d;
        }
    }
}

void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n, const float* w) {
    const float sigma2 = w ? row_sigma2(x, n) : 0.0f;
    for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
        uint8_t q[kBlock];
        float d, m;
        if (w) {
            float wt[kBlock];
            block_weights(x, w + b * kBlock, sigma2, wt);
            search_affine(x, wt, 31, q, &d, &m);
        } else {
            d = reference_affine(x, 31, q, &m);
        }
        y[b].d = fp32_to_fp16(d);
        y[b].m = fp32_to_fp16(m);
        pack_high_bits(q, y[b].qh);
        pack_nibbles(q, y[b].qs);
    }
}

void dequantize_row_q5_1(const block_q5_1* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
        const float d = fp16_to_fp32(x[b].d);
        const float m = fp16_to_fp32(x[b].m);
        const uint32_t qh = load_high_bits(x[b].qh);
        for (int j = 0; j < kBlock / 2; ++j) {
            const int lo = (x[b].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int hi = (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            y[j] = d * static_cast<float>(lo) + m;
            y[j + kBlock / 2] = d * static_cast<float>(hi) + m;
        }
    }
}

// Q8_0 keeps 8 bits; importance weights cannot improve round-to-nearest with
// one scale per block noticeably, and llama.cpp ignores them too.
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n, const float*) {
    for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
        float amax = 0;
        for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < kBlock; ++j) y[b].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
    }
}

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < kBlock; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
    }
}

void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n, const float*) {
    for (int64_t b = 0; b < n / kBlock; ++b, x += kBlock) {
        float amax = 0;
        for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < kBlock; ++j) {
            y[b].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
            sum += y[b].qs[j];
        }
        y[b].d = fp32_to_fp16(d);
        y[b].s = fp32_to_fp16(static_cast<float>(sum) * d);
    }
}

void dequantize_row_q8_1(const block_q8_1* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, y += kBlock) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < kBlock; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
    }
}

}  // namespace kiln::ref
