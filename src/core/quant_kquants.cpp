// Scalar reference quantizers and dequantizers for the K-quants (Q2_K .. Q6_K,
// Q8_K): 256-element super-blocks split into 16- or 32-element sub-blocks whose
// scales (and mins) are themselves quantized against one fp16 super-block scale.
//
// Dequantization is the GGUF format definition and must be bit-exact with the
// GGML C library and gguf-py: every product is evaluated in float32 in the same
// order (e.g. Q4_K: d1 = d*sc, m1 = dmin*m, y = d1*q - m1); the build uses
// -ffp-contract=off so no FMA changes the rounding.
//
// Quantization is our own search. Its shape follows the well-known K-quant
// recipe (fit every sub-block in float, quantize the sub-block scales, then
// re-pick the quants with the scales actually stored), with two additions that
// make it at least as good as the GGML reference:
//   * after the sub-block scales are quantized, each sub-block tries the integer
//     scale (and min) on either side of the rounded value and keeps whichever
//     gives the smallest error with freshly rounded quants;
//   * the super-block scales are then refitted by least squares to the chosen
//     integers and the selection is repeated, keeping the better encoding.
// All errors are weighted squared errors. Without importance weights the
// default weights (see make_weights) mildly emphasise large elements, as the
// GGML reference does; with an importance row w the weight of element j is
// w[j] * sqrt(sigma2 + x[j]^2), also as in GGML.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/float_convert.h"
#include "core/quant_ref.h"

namespace kiln::ref {
namespace {

// A group whose largest magnitude is below this is stored as zeros (same
// threshold as GGML, so the two agree on what "empty" means).
constexpr float kGroupEps = 1e-15f;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kMaxSub = 16;  // most sub-blocks per super-block (Q2_K, Q3_K, Q6_K)
// Once the super-block steps are fixed, each sub-block tries the integer
// scales (and mins) within this distance of the rounded ideal. A radius of 2
// rather than 1 costs little and lowers the weighted error by 0.5-3%.
constexpr int kRadius = 2;

// Round to nearest, ties to even (what GGML's nearest_int does for the range
// used here). The argument is clamped first so that a huge ratio (a scale that
// underflowed, an outlier) cannot overflow the integer conversion; NaN (0/0
// from an all-zero weighting) becomes 0.
inline int nearest_int(float v) {
    if (std::isnan(v)) return 0;
    return static_cast<int>(std::lrintf(std::clamp(v, -1.0e8f, 1.0e8f)));
}

inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// fp16 encoding that saturates at the largest finite half instead of becoming
// infinity: a block with an enormous outlier then decodes to large-but-finite
// values rather than inf/NaN.
inline fp16_t to_fp16_sat(float v) {
    constexpr float kHalfMax = 65504.0f;
    return fp32_to_fp16(std::clamp(v, -kHalfMax, kHalfMax));
}
inline float round_fp16(float v) { return fp16_to_fp32(to_fp16_sat(v)); }

// A super-block step rounded to fp16. A nonzero step never becomes zero: for
// data around 1e-5 the ideal step of Q5_K/Q6_K lies below the smallest fp16
// subnormal (2^-24), and rounding it to zero would wipe the whole super-block;
// the smallest subnormal with proportionally larger integer scales still
// represents it (the integer search below picks those scales).
inline float round_step(float v) {
    const float r = round_fp16(v);
    return r == 0 && v != 0 ? std::copysign(0x1p-24f, v) : r;
}

// ---------------------------------------------------------------------------
// Element weights.

// Fills weights[0..QK_K) for one super-block. With importance weights the
// element weight is imp[j] * sqrt(sigma2 + x^2), sigma2 = 2 * mean(x^2) over
// the super-block. Without them it is rms(sub-block) + |x|: GGML's Q4_K/Q5_K
// heuristic, which leans towards the large elements that dominate dot
// products without starving the small ones. (GGML weights Q3_K/Q6_K by x^2 and
// Q2_K by |x|; on the reference data rms + |x| gives every type both a lower
// RMSE and a lower importance-weighted error than those.) A sub-block whose
// importance weights are all zero (columns no calibration token touched)
// falls back to the default weights so its fit stays well defined.
void make_weights(const float* x, const float* imp, int sub, float* weights) {
    float sum_x2 = 0;
    for (int i = 0; i < QK_K; ++i) sum_x2 += x[i] * x[i];
    const float sigma2 = 2 * sum_x2 / QK_K;
    for (int j = 0; j < QK_K; j += sub) {
        const float* xs = x + j;
        float* ws = weights + j;
        float sum_w = 0;
        if (imp) {
            for (int i = 0; i < sub; ++i) {
                ws[i] = imp[j + i] * std::sqrt(sigma2 + xs[i] * xs[i]);
                sum_w += ws[i];
            }
        }
        if (sum_w > 0 && std::isfinite(sum_w)) continue;
        float s2 = 0;
        for (int i = 0; i < sub; ++i) s2 += xs[i] * xs[i];
        const float rms = std::sqrt(s2 / sub);
        for (int i = 0; i < sub; ++i) ws[i] = rms + std::fabs(xs[i]);
        // An all-zero sub-block gets zero weights; uniform weights keep the
        // least-squares systems below non-singular.
        float s = 0;
        for (int i = 0; i < sub; ++i) s += ws[i];
        if (!(s > 0)) {
            for (int i = 0; i < sub; ++i) ws[i] = 1;
        }
    }
}

// ---------------------------------------------------------------------------
// Affine sub-block fit: x ~= scale * L - m with L in [0, nmax], scale >= 0 and
// m >= 0 (the stored min is unsigned, so the represented minimum -m is <= 0).

struct AffineFit {
    float scale = 0;
    float m = 0;
    float w_scale = 0;  // sum w L^2: error per unit^2 of scale error
    float w_min = 0;    // sum w:     error per unit^2 of min error
};

// Weighted squared error of x ~= scale * L + min (min <= 0 here).
float affine_error(const float* x, const float* w, const uint8_t* L, int n, float scale, float min) {
    float err = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = scale * L[i] + min - x[i];
        err += w[i] * diff * diff;
    }
    return err;
}

// Least-squares (scale, min) for given levels L, with min constrained <= 0.
// Returns false when the levels do not determine a scale.
bool affine_lsq(const float* x, const float* w, const uint8_t* L, int n, float sum_w, float sum_x,
                float& scale, float& min) {
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
        const float wl = w[i] * L[i];
        sum_l += wl;
        sum_l2 += wl * L[i];
        sum_xl += wl * x[i];
    }
    if (!(sum_l2 > 0)) return false;
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
        scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    } else {
        min = 0;
    }
    if (!(det > 0) || min > 0) {  // the offset may not be positive: refit the scale alone
        min = 0;
        scale = sum_xl / sum_l2;
    }
    return scale > 0 && std::isfinite(scale) && std::isfinite(min);
}

// Searches the scale by trying nstep+1 "inverse scales" around nmax/(max-min),
// each followed by a least-squares refit of (scale, min), then polishes the
// best with a few rounds of re-rounding + refitting (Lloyd iterations).
AffineFit fit_affine(const float* x, const float* w, int n, int nmax, int nstep, float rmin,
                     float rdelta) {
    AffineFit fit;
    float xmin = x[0], xmax = x[0], sum_w = 0, sum_x = 0;
    for (int i = 0; i < n; ++i) {
        xmin = std::min(xmin, x[i]);
        xmax = std::max(xmax, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    xmin = std::min(xmin, 0.0f);
    fit.w_min = sum_w;
    if (!(xmax - xmin > kGroupEps)) {  // constant (non-positive) block: the offset alone holds it
        fit.m = -xmin;
        return fit;
    }

    uint8_t L[32], Lbest[32];
    float best_err = kInf, best_scale = 0, best_min = 0;
    auto levels = [&](float iscale, float min, uint8_t* out) {
        for (int i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(clampi(nearest_int(iscale * (x[i] - min)), 0, nmax));
    };
    auto consider = [&](float scale, float min) {
        const float err = affine_error(x, w, L, n, scale, min);
        if (err < best_err) {
            best_err = err;
            best_scale = scale;
            best_min = min;
            std::memcpy(Lbest, L, n);
        }
    };

    // Plain min/max mapping first: it is always a valid answer.
    const float range = xmax - xmin;
    levels(nmax / range, xmin, L);
    consider(range / nmax, xmin);
    for (int k = 0; k <= nstep; ++k) {
        const float iscale = (rmin + rdelta * k + nmax) / range;
        levels(iscale, xmin, L);
        float scale, min;
        if (affine_lsq(x, w, L, n, sum_w, sum_x, scale, min)) consider(scale, min);
    }
    for (int it = 0; it < 4; ++it) {
        const float before = best_err;
        levels(1.0f / best_scale, best_min, L);
        float scale, min;
        if (affine_lsq(x, w, L, n, sum_w, sum_x, scale, min)) consider(scale, min);
        if (!(best_err < before)) break;
    }

    float w_scale = 0;
    for (int i = 0; i < n; ++i) w_scale += w[i] * Lbest[i] * Lbest[i];
    fit.scale = best_scale;
    fit.m = -best_min;
    fit.w_scale = w_scale;
    return fit;
}

// ---------------------------------------------------------------------------
// Symmetric sub-block fit: x ~= scale * L with L in [-nmax, nmax - 1]. The
// scale is signed so that the element of largest magnitude, whatever its
// sign, lands near the grid's longer end -nmax. (Also trying the +(nmax-1)
// end lowers the float error of some sub-blocks but inflates their scales,
// which coarsens the shared super-block step: measured worse overall.)

struct SymFit {
    float scale = 0;
    float w_scale = 0;  // sum w L^2
};

SymFit fit_symmetric(const float* x, const float* w, int n, int nmax, int ntry, float delta) {
    SymFit fit;
    float amax = 0, vmax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            vmax = x[i];
        }
    }
    if (amax < kGroupEps) return fit;

    // For levels L, the best scale is sum(wxL)/sum(wL^2) and the error drops by
    // sum(wxL)^2/sum(wL^2): maximise that.
    float best_num = 0, best_den = 1, best_score = -1;
    auto consider = [&](float iscale) {
        float sxl = 0, sl2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            sxl += w[i] * x[i] * l;
            sl2 += w[i] * l * l;
        }
        if (sl2 > 0) {
            const float score = sxl * sxl / sl2;
            if (score > best_score) {
                best_score = score;
                best_num = sxl;
                best_den = sl2;
            }
        }
    };
    // Inverse scales around the one mapping the largest element onto -nmax;
    // the larger ones clip it, which pays off when it carries little weight.
    for (int k = -ntry; k <= ntry; ++k) consider(-(nmax + delta * k) / vmax);
    if (!(best_score > 0)) return fit;  // no weighted element is nonzero: nothing to fit
    float scale = best_num / best_den;
    for (int it = 0; it < 4; ++it) {  // Lloyd polish: re-round to the scale, refit
        const float before = best_score;
        consider(1.0f / scale);
        scale = best_num / best_den;
        if (!(best_score > before)) break;
    }
    fit.scale = scale;
    fit.w_scale = best_den;
    return fit;
}

// ---------------------------------------------------------------------------
// Quantizing the sub-block scales: the step d for integers in [lo, hi] that
// minimises sum W_j (v_j - d * round(v_j / d))^2, searched around the step
// that maps the largest |v| onto the end of the range, then refitted.

float choose_step(const float* v, const float* W, int n, int lo, int hi) {
    float amax = 0, vmax = 0;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(v[j]) > amax) {
            amax = std::fabs(v[j]);
            vmax = v[j];
        }
    }
    if (!(amax > 0)) return 0;
    float best_d = 0, best_err = kInf;
    auto eval = [&](float d) {
        if (!(d != 0) || !std::isfinite(d)) return;
        const float id = 1.0f / d;
        float err = 0;
        for (int j = 0; j < n; ++j) {
            const float diff = v[j] - d * clampi(nearest_int(v[j] * id), lo, hi);
            err += W[j] * diff * diff;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
        }
    };
    // Map the largest magnitude onto whichever end of [lo, hi] has its sign
    // (and onto the other end too when the range is signed).
    for (int k = -6; k <= 6; ++k) {
        if (vmax > 0 ? hi > 0 : lo < 0) eval(vmax / ((vmax > 0 ? hi : lo) + 0.1f * k));
        if (lo < 0) eval(vmax / ((vmax > 0 ? lo : hi) + 0.1f * k));
    }
    // Least-squares refit of the step to the chosen integers.
    for (int it = 0; it < 2 && best_err < kInf; ++it) {
        const float id = 1.0f / best_d;
        double num = 0, den = 0;
        for (int j = 0; j < n; ++j) {
            const int l = clampi(nearest_int(v[j] * id), lo, hi);
            num += static_cast<double>(W[j]) * v[j] * l;
            den += static_cast<double>(W[j]) * l * l;
        }
        if (den > 0) eval(static_cast<float>(num / den));
    }
    return best_d;
}

// ---------------------------------------------------------------------------
// Affine super-blocks (Q2_K, Q4_K, Q5_K): x = (d*sc)*q - (dmin*m).

struct AffineSpec {
    int sub;     // elements per sub-block
    int nmax;    // largest quant
    int nscale;  // largest integer scale / min
    int nstep;   // sub-block search: candidates
    float rmin, rdelta;
};

struct AffineCode {
    float d = 0, dmin = 0;  // exactly representable in fp16
    uint8_t sc[kMaxSub] = {};
    uint8_t m[kMaxSub] = {};
    uint8_t q[QK_K] = {};
};

// Given fp16 steps d and dmin, picks for every sub-block the integer scale
// and min (the rounded ideal and its neighbours) and the quants that minimise
// the weighted error, evaluated with the decoder's exact arithmetic. Returns
// the total error.
float encode_affine(const float* x, const float* w, const AffineSpec& s, const AffineFit* fits, float d,
                    float dmin, AffineCode& out) {
    const int nsub = QK_K / s.sub;
    out.d = d;
    out.dmin = dmin;
    float total = 0;
    uint8_t q[32];
    for (int j = 0; j < nsub; ++j) {
        const float* xs = x + j * s.sub;
        const float* ws = w + j * s.sub;
        int sc0 = 0, m0 = 0, sc_n = 0, m_n = 0;
        if (d > 0) {
            sc0 = clampi(nearest_int(fits[j].scale / d) - kRadius, 0, s.nscale);
            sc_n = std::min(s.nscale, sc0 + 2 * kRadius) - sc0;
        }
        if (dmin > 0) {
            m0 = clampi(nearest_int(fits[j].m / dmin) - kRadius, 0, s.nscale);
            m_n = std::min(s.nscale, m0 + 2 * kRadius) - m0;
        }
        float best = kInf;
        for (int a = sc0; a <= sc0 + sc_n; ++a) {
            const float D = d * a;
            const float iD = D > 0 ? 1.0f / D : 0.0f;
            for (int b = m0; b <= m0 + m_n; ++b) {
                const float M = dmin * b;
                float err = 0;
                for (int i = 0; i < s.sub; ++i) {
                    const int l = clampi(nearest_int((xs[i] + M) * iD), 0, s.nmax);
                    q[i] = static_cast<uint8_t>(l);
                    const float diff = xs[i] - (D * l - M);
                    err += ws[i] * diff * diff;
                }
                // The first candidate is always taken, so an overflowing error
                // (absurd inputs) still leaves a complete encoding.
                if (err < best || (a == sc0 && b == m0)) {
                    best = err;
                    out.sc[j] = static_cast<uint8_t>(a);
                    out.m[j] = static_cast<uint8_t>(b);
                    std::memcpy(out.q + j * s.sub, q, s.sub);
                }
            }
        }
        total += best;
    }
    return total;
}

void quantize_affine(const float* x, const float* w, const AffineSpec& s, AffineCode& out) {
    const int nsub = QK_K / s.sub;
    AffineFit fits[kMaxSub];
    float scales[kMaxSub], mins[kMaxSub], w_scales[kMaxSub], w_mins[kMaxSub];
    for (int j = 0; j < nsub; ++j) {
        fits[j] = fit_affine(x + j * s.sub, w + j * s.sub, s.sub, s.nmax, s.nstep, s.rmin, s.rdelta);
        scales[j] = fits[j].scale;
        mins[j] = fits[j].m;
        w_scales[j] = fits[j].w_scale;
        w_mins[j] = fits[j].w_min;
    }
    const float d = round_step(choose_step(scales, w_scales, nsub, 0, s.nscale));
    const float dmin = round_step(choose_step(mins, w_mins, nsub, 0, s.nscale));
    float best = encode_affine(x, w, s, fits, d, dmin, out);

    // Refit (d, dmin) by least squares to the chosen integers:
    // minimise sum w (x - d*A + dmin*B)^2 with A = sc*q, B = m.
    AffineCode trial;
    const AffineCode* cur = &out;
    for (int pass = 0; pass < 2; ++pass) {
        double aa = 0, ab = 0, bb = 0, xa = 0, xb = 0;
        for (int j = 0; j < nsub; ++j) {
            const double B = cur->m[j];
            for (int i = 0; i < s.sub; ++i) {
                const int k = j * s.sub + i;
                const double A = static_cast<double>(cur->sc[j]) * cur->q[k];
                const double wk = w[k];
                aa += wk * A * A;
                ab += wk * A * B;
                bb += wk * B * B;
                xa += wk * x[k] * A;
                xb += wk * x[k] * B;
            }
        }
        double nd = cur->d, nm = cur->dmin;
        const double det = aa * bb - ab * ab;
        if (bb > 0 && det > 1e-12 * aa * bb) {
            nd = (xa * bb - ab * xb) / det;
            nm = (ab * xa - aa * xb) / det;
        } else if (aa > 0) {
            nd = (xa + nm * ab) / aa;
        }
        if (!(nd > 0) || !(nm >= 0)) break;
        const float err = encode_affine(x, w, s, fits, round_step(static_cast<float>(nd)),
                                        round_step(static_cast<float>(nm)), trial);
        if (!(err < best)) break;
        best = err;
        out = trial;
        cur = &out;
    }
}

// ---------------------------------------------------------------------------
// Symmetric super-blocks (Q3_K, Q6_K): x = (d*sc)*q, sc and q signed.

struct SymSpec {
    int sub;           // elements per sub-block
    int nmax;          // quants in [-nmax, nmax - 1]
    int sc_lo, sc_hi;  // integer scale range
    int ntry;          // sub-block search: candidates on each side of -nmax
    float delta;
};

struct SymCode {
    float d = 0;
    int sc[kMaxSub] = {};
    int8_t q[QK_K] = {};  // in [-nmax, nmax - 1]
};

float encode_symmetric(const float* x, const float* w, const SymSpec& s, const SymFit* fits, float d,
                       SymCode& out) {
    const int nsub = QK_K / s.sub;
    out.d = d;
    float total = 0;
    int8_t q[32];
    for (int j = 0; j < nsub; ++j) {
        const float* xs = x + j * s.sub;
        const float* ws = w + j * s.sub;
        int c0 = 0, cn = 0;
        if (d != 0) {
            c0 = clampi(nearest_int(fits[j].scale / d) - kRadius, s.sc_lo, s.sc_hi);
            cn = std::min(s.sc_hi, c0 + 2 * kRadius) - c0;
        }
        float best = kInf;
        for (int c = c0; c <= c0 + cn; ++c) {
            const float D = d * c;
            const float iD = D != 0 ? 1.0f / D : 0.0f;
            float err = 0;
            for (int i = 0; i < s.sub; ++i) {
                const int l = clampi(nearest_int(xs[i] * iD), -s.nmax, s.nmax - 1);
                q[i] = static_cast<int8_t>(l);
                const float diff = xs[i] - D * l;
                err += ws[i] * diff * diff;
            }
            if (err < best || c == c0) {  // first candidate always taken (see encode_affine)
                best = err;
                out.sc[j] = c;
                std::memcpy(out.q + j * s.sub, q, s.sub);
            }
        }
        total += best;
    }
    return total;
}

void quantize_symmetric(const float* x, const float* w, const SymSpec& s, SymCode& out) {
    const int nsub = QK_K / s.sub;
    SymFit fits[kMaxSub];
    float scales[kMaxSub], w_scales[kMaxSub];
    for (int j = 0; j < nsub; ++j) {
        fits[j] = fit_symmetric(x + j * s.sub, w + j * s.sub, s.sub, s.nmax, s.ntry, s.delta);
        scales[j] = fits[j].scale;
        w_scales[j] = fits[j].w_scale;
    }
    float best = encode_symmetric(x, w, s, fits, round_step(choose_step(scales, w_scales, nsub, s.sc_lo, s.sc_hi)), out);
    SymCode trial;
    for (int pass = 0; pass < 2; ++pass) {
        // Least-squares d for the chosen integers: d = sum wxA / sum wA^2, A = sc*q.
        double num = 0, den = 0;
        for (int k = 0; k < QK_K; ++k) {
            const double A = static_cast<double>(out.sc[k / s.sub]) * out.q[k];
            num += static_cast<double>(w[k]) * x[k] * A;
            den += static_cast<double>(w[k]) * A * A;
        }
        if (!(den > 0)) break;
        const float err = encode_symmetric(x, w, s, fits, round_step(static_cast<float>(num / den)), trial);
        if (!(err < best)) break;
        best = err;
        out = trial;
    }
}

// ---------------------------------------------------------------------------
// Bit packing shared by several types.

// Q2_K / Q3_K low bits: element g*128 + s*32 + l lives in bits 2s..2s+1 of
// byte g*32 + l (g in 0..1, s in 0..3, l in 0..31).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int g = 0; g < 2; ++g) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t* e = L + g * 128 + l;
            qs[g * 32 + l] = static_cast<uint8_t>((e[0] & 3) | ((e[32] & 3) << 2) | ((e[64] & 3) << 4) | ((e[96] & 3) << 6));
        }
    }
}
inline int unpack_2bit(const uint8_t* qs, int e) {
    return (qs[(e / 128) * 32 + (e % 32)] >> (2 * ((e / 32) % 4))) & 3;
}

// Q4_K / Q5_K: element g*64 + h*32 + l is nibble h of byte g*32 + l.
void pack_4bit_k(const uint8_t* L, uint8_t* qs) {
    for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; ++l) {
            qs[g * 32 + l] = static_cast<uint8_t>((L[g * 64 + l] & 0xF) | ((L[g * 64 + 32 + l] & 0xF) << 4));
        }
    }
}

// Q4_K / Q5_K 6-bit scales and mins in 12 bytes: bytes 0-3 hold sc[0..3] in
// their low 6 bits, bytes 4-7 hold m[0..3]; sc[4..7] and m[4..7] keep their
// low nibbles in bytes 8-11 (sc low, m high) and their top two bits in bits
// 6-7 of bytes 0-3 (sc) and 4-7 (m).
void pack_scales_k4(const uint8_t* sc, const uint8_t* m, uint8_t* out) {
    for (int j = 0; j < 4; ++j) {
        out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}
// Q3_K 6-bit scales (stored offset by 32): low nibble of scale j in byte j
// (j < 8) or the high nibble of byte j-8; its top two bits in bits
// 2*(j/4)..2*(j/4)+1 of byte 8 + j%4.
void pack_scales_q3(const int* sc, uint8_t* out) {
    std::memset(out, 0, 12);
    for (int j = 0; j < 16; ++j) {
        const int u = sc[j] + 32;
        if (j < 8) {
            out[j] |= static_cast<uint8_t>(u & 0xF);
        } else {
            out[j - 8] |= static_cast<uint8_t>((u & 0xF) << 4);
        }
        out[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
    }
}
constexpr AffineSpec kQ2K{16, 3, 15, 24, -0.6f, 0.06f};
constexpr AffineSpec kQ4K{32, 15, 63, 20, -1.0f, 0.1f};
constexpr AffineSpec kQ5K{32, 31, 63, 20, -0.5f, 0.1f};
// Sub-block search ranges were tuned on the reference data (importance
// weighted error); Q6_K profits from clipping the largest element far more
// than Q3_K, whose sub-block scales share only 6 bits.
constexpr SymSpec kQ3K{16, 4, -32, 31, 8, 0.12f};
constexpr SymSpec kQ6K{16, 32, -128, 127, 16, 0.96f};

}  // namespace

// ===========================================================================
// Q2_K

void quantize_row_q2_K(const float* x, block_q2_K* y, int64_t n, const float* w) {
    float weights[QK_K];
    AffineCode code;
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        make_weights(x, w ? w + b * QK_K : nullptr, kQ2K.sub, weights);
        quantize_affine(x, weights, kQ2K, code);
        block_q2_K& blk = y[b];
        for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<uint8_t>(code.sc[j] | (code.m[j] << 4));
        pack_2bit(code.q, blk.qs);
        blk.d = fp32_to_fp16(code.d);
        blk.dmin = fp32_to_fp16(code.dmin);
    }
}

void dequantize_row_q2_K(const block_q2_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const block_q2_K& blk = x[b];
        const float d = fp16_to_fp32(blk.d);
        const float dmin = fp16_to_fp32(blk.dmin);
        for (int j = 0; j < 16; ++j) {
            const float dl = d * static_cast<float>(blk.scales[j] & 0xF);
            const float ml = dmin * static_cast<float>(blk.scales[j] >> 4);
            for (int i = 0; i < 16; ++i) {
                const int e = j * 16 + i;
                *y++ = dl * static_cast<float>(unpack_2bit(blk.qs, e)) - ml;
            }
        }
    }
}

// ===========================================================================
// Q3_K

void quantize_row_q3_K(const float* x, block_q3_K* y, int64_t n, const float* w) {
    float weights[QK_K];
    SymCode code;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        make_weights(x, w ? w + b * QK_K : nullptr, kQ3K.sub, weights);
        quantize_symmetric(x, weights, kQ3K, code);
        block_q3_K& blk = y[b];
        pack_scales_q3(code.sc, blk.scales);
        // Stored quant u = q + 4 in [0, 7]: low two bits in qs, bit 2 in hmask.
        std::memset(blk.hmask, 0, sizeof(blk.hmask));
        for (int e = 0; e < QK_K; ++e) {
            const int u = code.q[e] + 4;
            L[e] = static_cast<uint8_t>(u & 3);
            if (u & 4) blk.hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
        }
        pack_2bit(L, blk.qs);
        blk.d = fp32_to_fp16(code.d);
    }
}

void dequantize_row_q3_K(const block_q3_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const block_q3_K& blk = x[b];
        const float d = fp16_to_fp32(blk.d);
        for (int j = 0; j < 16; ++j) {
            const float dl = d * static_cast<float>(q3_K_scale(blk.scales, j));
            for (int i = 0; i < 16; ++i) {
                const int e = j * 16 + i;
                const int hbit = (blk.hmask[e % 32] >> (e / 32)) & 1;
                const int q = unpack_2bit(blk.qs, e) - (hbit ? 0 : 4);
                *y++ = dl * static_cast<float>(q);
            }
        }
    }
}

// ===========================================================================
// Q4_K

void quantize_row_q4_K(const float* x, block_q4_K* y, int64_t n, const float* w) {
    float weights[QK_K];
    AffineCode code;
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        make_weights(x, w ? w + b * QK_K : nullptr, kQ4K.sub, weights);
        quantize_affine(x, weights, kQ4K, code);
        block_q4_K& blk = y[b];
        pack_scales_k4(code.sc, code.m, blk.scales);
        pack_4bit_k(code.q, blk.qs);
        blk.d = fp32_to_fp16(code.d);
        blk.dmin = fp32_to_fp16(code.dmin);
    }
}

void dequantize_row_q4_K(const block_q4_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const block_q4_K& blk = x[b];
        const float d = fp16_to_fp32(blk.d);
        const float dmin = fp16_to_fp32(blk.dmin);
        for (int j = 0; j < 8; ++j) {
            int sc, m;
            k4_scale_min(blk.scales, j, sc, m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            const uint8_t* qs = blk.qs + (j / 2) * 32;
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((qs[l] >> shift) & 0xF) - m1;
        }
    }
}

// ===========================================================================
// Q5_K

void quantize_row_q5_K(const float* x, block_q5_K* y, int64_t n, const float* w) {
    float weights[QK_K];
    AffineCode code;
    uint8_t low[QK_K];
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        make_weights(x, w ? w + b * QK_K : nullptr, kQ5K.sub, weights);
        quantize_affine(x, weights, kQ5K, code);
        block_q5_K& blk = y[b];
        pack_scales_k4(code.sc, code.m, blk.scales);
        // Low nibbles as Q4_K; bit 4 of element e is bit e/32 of qh[e % 32].
        std::memset(blk.qh, 0, sizeof(blk.qh));
        for (int e = 0; e < QK_K; ++e) {
            low[e] = code.q[e] & 0xF;
            if (code.q[e] & 0x10) blk.qh[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
        }
        pack_4bit_k(low, blk.qs);
        blk.d = fp32_to_fp16(code.d);
        blk.dmin = fp32_to_fp16(code.dmin);
    }
}

void dequantize_row_q5_K(const block_q5_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const block_q5_K& blk = x[b];
        const float d = fp16_to_fp32(blk.d);
        const float dmin = fp16_to_fp32(blk.dmin);
        for (int j = 0; j < 8; ++j) {
            int sc, m;
            k4_scale_min(blk.scales, j, sc, m);
            const float d1 = d * static_cast<float>(sc);
            const float m1 = dmin * static_cast<float>(m);
            const uint8_t* qs = blk.qs + (j / 2) * 32;
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l) {
                const int q = ((qs[l] >> shift) & 0xF) | (((blk.qh[l] >> j) & 1) << 4);
                *y++ = d1 * static_cast<float>(q) - m1;
            }
        }
    }
}

// ===========================================================================
// Q6_K

void quantize_row_q6_K(const float* x, block_q6_K* y, int64_t n, const float* w) {
    float weights[QK_K];
    SymCode code;
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        make_weights(x, w ? w + b * QK_K : nullptr, kQ6K.sub, weights);
        quantize_symmetric(x, weights, kQ6K, code);
        block_q6_K& blk = y[b];
        for (int j = 0; j < 16; ++j) blk.scales[j] = static_cast<int8_t>(code.sc[j]);
        // Stored u = q + 32 in [0, 63]. Element g*128 + s*32 + l (g in 0..1,
        // s in 0..3): low nibble in nibble s/2 of ql[g*64 + (s%2)*32 + l],
        // top two bits in bits 2s..2s+1 of qh[g*32 + l].
        std::memset(blk.ql, 0, sizeof(blk.ql));
        std::memset(blk.qh, 0, sizeof(blk.qh));
        for (int e = 0; e < QK_K; ++e) {
            const int u = code.q[e] + 32;
            const int g = e / 128, s = (e / 32) % 4, l = e % 32;
            blk.ql[g * 64 + (s % 2) * 32 + l] |= static_cast<uint8_t>((u & 0xF) << (4 * (s / 2)));
            blk.qh[g * 32 + l] |= static_cast<uint8_t>((u >> 4) << (2 * s));
        }
        blk.d = fp32_to_fp16(code.d);
    }
}

void dequantize_row_q6_K(const block_q6_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const block_q6_K& blk = x[b];
        const float d = fp16_to_fp32(blk.d);
        for (int e = 0; e < QK_K; ++e) {
            const int g = e / 128, s = (e / 32) % 4, l = e % 32;
            const int low = (blk.ql[g * 64 + (s % 2) * 32 + l] >> (4 * (s / 2))) & 0xF;
            const int high = (blk.qh[g * 32 + l] >> (2 * s)) & 3;
            const float dl = d * static_cast<float>(blk.scales[e / 16]);
            *y++ = dl * static_cast<float>((low | (high << 4)) - 32);
        }
    }
}

// ===========================================================================
// Q8_K: the activation format of the K-quant dot products. Same semantics as
// GGML's reference: the value of largest magnitude maps to -127, q is
// clamped to 127, d = 1/iscale, and bsums hold the sums of each 16 quants.

void quantize_row_q8_K(const float* x, block_q8_K* y, int64_t n, const float* /*w*/) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        block_q8_K& blk = y[b];
        float amax = 0, vmax = 0;
        for (int i = 0; i < QK_K; ++i) {
            const float ax = std::fabs(x[i]);
            if (ax > amax) {
                amax = ax;
                vmax = x[i];
            }
        }
        if (!(amax > 0)) {
            blk.d = 0;
            std::memset(blk.qs, 0, sizeof(blk.qs));
            std::memset(blk.bsums, 0, sizeof(blk.bsums));
            continue;
        }
        const float iscale = -127.0f / vmax;
        for (int i = 0; i < QK_K; ++i) blk.qs[i] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[i])));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += blk.qs[j * 16 + i];
            blk.bsums[j] = static_cast<int16_t>(sum);
        }
        blk.d = 1.0f / iscale;
    }
}

void dequantize_row_q8_K(const block_q8_K* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        for (int i = 0; i < QK_K; ++i) *y++ = x[b].d * static_cast<float>(x[b].qs[i]);
    }
}

}  // namespace kiln::ref
