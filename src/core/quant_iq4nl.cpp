// Scalar reference quantizer and dequantizer for IQ4_NL: blocks of 32 values,
// one fp16 scale d, and 4-bit indices into the fixed non-linear grid
// kvalues_iq4nl (x = d * kvalues_iq4nl[q]). Element j sits in the low nibble
// of qs[j], element j + 16 in the high nibble.
//
// Dequantization is bit-exact with the GGML C library and gguf-py (one float
// product per element). Quantization is a weighted search over the scale:
// for a set of candidate scales each element takes its nearest grid value,
// the scale is refitted by least squares, and the best is polished with a
// few re-assign/refit rounds; finally the scale is rounded to fp16, the
// indices re-picked for the stored scale, and the neighbouring fp16 values
// are tried as well. Without importance weights element j is weighted by
// rms(block) + |x[j]|, which leans towards the large values that dominate a
// dot product (GGML uses x[j]^2 here; rms + |x| gives both a lower RMSE and a
// lower importance-weighted error on the reference data, and matches the
// K-quants); with an importance row w by w[j] * sqrt(sigma2 + x[j]^2).

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "core/quant_ref.h"

namespace kiln::ref {
namespace {

constexpr float kGroupEps = 1e-15f;
constexpr int kGrid = 16;

// Midpoints between consecutive grid values: the index nearest to v is the
// number of midpoints below v.
constexpr float kMid[kGrid - 1] = {
    (kvalues_iq4nl[0] + kvalues_iq4nl[1]) * 0.5f,   (kvalues_iq4nl[1] + kvalues_iq4nl[2]) * 0.5f,
    (kvalues_iq4nl[2] + kvalues_iq4nl[3]) * 0.5f,   (kvalues_iq4nl[3] + kvalues_iq4nl[4]) * 0.5f,
    (kvalues_iq4nl[4] + kvalues_iq4nl[5]) * 0.5f,   (kvalues_iq4nl[5] + kvalues_iq4nl[6]) * 0.5f,
    (kvalues_iq4nl[6] + kvalues_iq4nl[7]) * 0.5f,   (kvalues_iq4nl[7] + kvalues_iq4nl[8]) * 0.5f,
    (kvalues_iq4nl[8] + kvalues_iq4nl[9]) * 0.5f,   (kvalues_iq4nl[9] + kvalues_iq4nl[10]) * 0.5f,
    (kvalues_iq4nl[10] + kvalues_iq4nl[11]) * 0.5f, (kvalues_iq4nl[11] + kvalues_iq4nl[12]) * 0.5f,
    (kvalues_iq4nl[12] + kvalues_iq4nl[13]) * 0.5f, (kvalues_iq4nl[13] + kvalues_iq4nl[14]) * 0.5f,
    (kvalues_iq4nl[14] + kvalues_iq4nl[15]) * 0.5f,
};

// Index of the grid value nearest to v. All midpoints are multiples of 1/2,
// so no half-unit interval [h/2, (h+1)/2) straddles one: a table indexed by
// floor(2v) over [-128, 128) answers exactly (a value on a midpoint goes to
// the upper neighbour; both are equally near). Far cheaper than searching.
constexpr int kHalfUnits = 512;  // floor(2v) in [-256, 255]
struct IndexTable {
    uint8_t idx[kHalfUnits] = {};
    constexpr IndexTable() {
        for (int h = 0; h < kHalfUnits; ++h) {
            const float lo = (h - kHalfUnits / 2) * 0.5f;  // the interval's lower end
            int n = 0;
            for (float m : kMid) n += lo >= m ? 1 : 0;
            idx[h] = static_cast<uint8_t>(n);
        }
    }
};
constexpr IndexTable kIndexTable{};

inline int nearest_index(float v) {
    // Clamping first keeps the conversion defined for huge ratios (NaN lands
    // on the clamp's lower end through the comparison order below).
    const float t = std::fmin(std::fmax(2.0f * v, -256.0f), 255.0f);
    return kIndexTable.idx[static_cast<int>(std::floor(t)) + kHalfUnits / 2];
}

// Weighted error of the block for a given (float) scale, with the indices
// chosen as the nearest grid values; writes the indices.
float block_error(const float* x, const float* w, float d, uint8_t* L) {
    const float id = d != 0 ? 1.0f / d : 0.0f;
    float err = 0;
    for (int j = 0; j < QK4_NL; ++j) {
        const int l = nearest_index(id * x[j]);
        L[j] = static_cast<uint8_t>(l);
        const float diff = x[j] - d * static_cast<float>(kvalues_iq4nl[l]);
        err += w[j] * diff * diff;
    }
    return err;
}

void quantize_block(const float* x, const float* imp, block_iq4_nl& out) {
    float w[QK4_NL];
    float amax = 0, vmax = 0, sum_x2 = 0;
    for (int j = 0; j < QK4_NL; ++j) {
        const float ax = std::fabs(x[j]);
        sum_x2 += x[j] * x[j];
        if (ax > amax) {
            amax = ax;
            vmax = x[j];
        }
    }
    if (amax < kGroupEps) {
        out.d = 0;
        std::memset(out.qs, 0, sizeof(out.qs));
        return;
    }
    const float sigma2 = 2 * sum_x2 / QK4_NL;
    float sum_w = 0;
    if (imp) {
        for (int j = 0; j < QK4_NL; ++j) {
            w[j] = imp[j] * std::sqrt(sigma2 + x[j] * x[j]);
            sum_w += w[j];
        }
    }
    if (!(sum_w > 0) || !std::isfinite(sum_w)) {  // no (usable) importance: default weights
        const float rms = std::sqrt(sum_x2 / QK4_NL);
        for (int j = 0; j < QK4_NL; ++j) w[j] = rms + std::fabs(x[j]);
    }

    // For fixed indices the best scale is sum(w x v)/sum(w v^2) and the error
    // falls by sum(w x v)^2/sum(w v^2): maximise that over candidate scales.
    float best_score = -1, best_d = 0;
    auto consider = [&](float id) {
        float sxv = 0, sv2 = 0;
        for (int j = 0; j < QK4_NL; ++j) {
            const float v = kvalues_iq4nl[nearest_index(id * x[j])];
            sxv += w[j] * x[j] * v;
            sv2 += w[j] * v * v;
        }
        if (sv2 > 0 && sxv * sxv > best_score * sv2) {
            best_score = sxv * sxv / sv2;
            best_d = sxv / sv2;
        }
    };
    // The largest magnitude goes near one end of the grid: -127 (the longer
    // side) or +113, each with a spread of inverse scales around it.
    // Both ends matter: with importance weights, dropping the +113 side makes
    // the error ~25% worse on the reference data. The spread (+-20 grid units)
    // was tuned there too.
    constexpr int kTry = 8;
    constexpr float kStep = 2.5f;
    for (int k = -kTry; k <= kTry; ++k) {
        consider((kvalues_iq4nl[0] + kStep * k) / vmax);
        consider((kvalues_iq4nl[kGrid - 1] + kStep * k) / vmax);
    }
    if (!(best_score > 0)) {
        best_d = vmax / kvalues_iq4nl[0];
    }
    for (int it = 0; it < 4; ++it) {  // re-assign to the refitted scale, refit again
        const float before = best_score;
        consider(1.0f / best_d);
        if (!(best_score > before)) break;
    }

    // Store: round the scale to fp16 and try its neighbours, each with indices
    // re-picked for exactly the scale the decoder will use.
    uint8_t L[QK4_NL], Lbest[QK4_NL];
    constexpr float kHalfMax = 65504.0f;
    const fp16_t h0 = fp32_to_fp16(std::clamp(best_d, -kHalfMax, kHalfMax));
    fp16_t best_h = h0;
    float best_err = block_error(x, w, fp16_to_fp32(h0), Lbest);
    for (int delta : {-1, 1}) {
        const fp16_t h = static_cast<fp16_t>(h0 + delta);
        // Stay within the finite values of h0's sign (no wrap into inf/NaN or the other sign).
        if ((h & 0x7fff) >= 0x7c00 || (h & 0x8000) != (h0 & 0x8000)) continue;
        const float err = block_error(x, w, fp16_to_fp32(h), L);
        if (err < best_err) {
            best_err = err;
            best_h = h;
            std::memcpy(Lbest, L, sizeof(L));
        }
    }
    out.d = best_h;
    for (int j = 0; j < QK4_NL / 2; ++j) {
        out.qs[j] = static_cast<uint8_t>(Lbest[j] | (Lbest[j + QK4_NL / 2] << 4));
    }
}

}  // namespace

void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n, const float* w) {
    for (int64_t b = 0; b < n / QK4_NL; ++b) {
        quantize_block(x + b * QK4_NL, w ? w + b * QK4_NL : nullptr, y[b]);
    }
}

void dequantize_row_iq4_nl(const block_iq4_nl* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK4_NL; ++b) {
        const float d = fp16_to_fp32(x[b].d);
        for (int j = 0; j < QK4_NL / 2; ++j) {
            y[j] = d * static_cast<float>(kvalues_iq4nl[x[b].qs[j] & 0xF]);
            y[j + QK4_NL / 2] = d * static_cast<float>(kvalues_iq4nl[x[b].qs[j] >> 4]);
        }
        y += QK4_NL;
    }
}

}  // namespace kiln::ref
