// The CPU attention kernels (kernels/attn_kernels.h) of every instruction set this machine runs,
// one by one against references written here: the softmax helpers against libm, the mask scans
// against their scalar references, the BF16 and FP16 products against double sums of the same
// rounded operands. The op built from them is tested in test_cpu_ops.cpp (CpuOps.Attention*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/gemm_float.h"
#include "backends/cpu/kernels/kernels.h"
#include "core/float_convert.h"
#include "core/quant.h"
#include "core/types.h"
#include "test_support.h"

namespace {

using kiln::test::dequantize_rows;
using kiln::test::quantize_rows;
using kiln::test::randn;

using kiln::Type;
using kiln::cpu::Isa;

constexpr Isa kIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon};

// An exp_row into 16-bit floats (exp_row_bf16, exp_row_f16) on rows of scores from -30 to 3 around
// m = 2.5, with a masked key (-inf) and one far below (-95): s untouched, each value within
// rel * exp(s - m) + abs of it (exactly 0 below the normal floats, as the coarse exp gives), the
// returned sum that of the exact values; to_float reads the format. partner: an odd n's p[n] is
// written as 0 (BF16 pairs); else nothing past n may be.
void check_exp_row_half(float (*exp_row)(const float*, int64_t, float, uint16_t*, const uint8_t*), float (*to_float)(uint16_t),
                        double rel, double abs, bool partner) {
    for (int64_t n : {1, 15, 16, 17, 33, 48, 128, 255}) {
        std::vector<float> sv(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) sv[j] = -30.0f + 33.0f * static_cast<float>(j) / static_cast<float>(n) - 0.37f;
        if (n > 3) sv[2] = -std::numeric_limits<float>::infinity();
        if (n > 5) sv[4] = -95.0f;
        const std::vector<float> s0 = sv;
        std::vector<uint16_t> p(static_cast<size_t>(n + 2), 0xffff);
        // (with lines of sv asked for meanwhile: a hint, which must not change anything)
        const float sum = exp_row(sv.data(), n, 2.5f, p.data(), n % 2 ? reinterpret_cast<const uint8_t*>(sv.data()) : nullptr);
        EXPECT_EQ(sv, s0);
        double want_sum = 0;
        for (int64_t j = 0; j < n; ++j) {
            const double want = std::exp(static_cast<double>(sv[j] - 2.5f));
            want_sum += want;
            const float got = to_float(p[j]);
            if (want < 1.2e-38) {
                EXPECT_EQ(got, 0.0f) << "n=" << n << " j=" << j;
            } else {
                EXPECT_NEAR(got, want, want * rel + abs) << "n=" << n << " j=" << j;
            }
        }
        if (!partner) {
            EXPECT_EQ(p[n], 0xffff) << "n=" << n;
        } else if (n % 2) {
            EXPECT_EQ(p[n], 0) << "n=" << n;
        }
        EXPECT_NEAR(sum, want_sum, want_sum * 1e-4) << "n=" << n;
    }
}

// The softmax helpers of every table against libm: exp to a few ulp over the range scores take
// (exactly 0 for -inf and far below), tanh-based softcap to float rounding.
TEST(AttentionKernels, ExpAndSoftcapMatchLibm) {
    std::vector<float> x;
    for (int i = 0; i <= 4000; ++i) x.push_back(-100.0f + 0.025f * static_cast<float>(i));  // -100 .. 0
    x.push_back(-std::numeric_limits<float>::infinity());
    x.push_back(-1e-30f);
    for (Isa isa : kIsas) {
        if (!kiln::cpu::isa_supported(isa)) continue;
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        const auto& k = kiln::cpu::attn_kernels(isa);
        std::vector<float> e = x;
        const float sum = k.exp_row(e.data(), static_cast<int64_t>(e.size()), 0.5f);
        double want_sum = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double want = std::exp(static_cast<double>(x[i] - 0.5f));  // the kernels subtract in float
            want_sum += want;
            if (want < 1.2e-38) {
                EXPECT_LE(e[i], 1.2e-38f) << "x=" << x[i];  // below the normal floats: 0 (or libm's subnormal)
            } else {
                EXPECT_NEAR(e[i], want, want * 4e-7) << "x=" << x[i];
            }
        }
        EXPECT_NEAR(sum, want_sum, want_sum * 1e-6);

        std::vector<float> s(103), mask(103, 0.0f);
        for (size_t i = 0; i < s.size(); ++i) s[i] = -60.0f + 1.2f * static_cast<float>(i);  // -60 .. 62
        mask[7] = -std::numeric_limits<float>::infinity();
        std::vector<float> got = s;
        const float mx = k.score_row(got.data(), mask.data(), static_cast<int64_t>(s.size()), 20.0f);
        float want_max = -std::numeric_limits<float>::infinity();
        for (size_t i = 0; i < s.size(); ++i) {
            const double want = 20.0 * std::tanh(static_cast<double>(s[i]) / 20.0) + mask[i];
            if (i == 7) {
                EXPECT_EQ(got[i], mask[i]);
            } else {
                EXPECT_NEAR(got[i], want, 4e-6) << "s=" << s[i];
                want_max = std::max(want_max, static_cast<float>(want));
            }
        }
        EXPECT_NEAR(mx, want_max, 4e-6);
    }
}

// mask_span and mask_visible of every table against the reference, on random masks with every span
// length and offset around the vector width (tails, no visible key, all visible, one at either end).
TEST(AttentionKernels, MaskSpanMatchesReference) {
    std::mt19937 rng(11);
    const float inf = std::numeric_limits<float>::infinity();
    for (Isa isa : kIsas) {
        if (!kiln::cpu::isa_supported(isa)) continue;
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        const auto& k = kiln::cpu::attn_kernels(isa);
        for (int density : {0, 1, 10, 50, 100}) {  // % of keys visible
            std::vector<float> m(100);
            for (auto& x : m) x = static_cast<int>(rng() % 100) < density ? (rng() % 2 ? 0.0f : -3.5f) : -inf;
            for (int64_t lo = 0; lo <= 40; lo += 3) {
                for (int64_t hi = lo; hi <= 100; hi += 7) {
                    int64_t first = hi, last = hi, count = 0;
                    for (int64_t c = lo; c < hi; ++c) {
                        if (m[c] == -inf) continue;
                        if (count++ == 0) first = c;
                        last = c + 1;
                    }
                    const kiln::cpu::MaskSpan got = k.mask_span(m.data(), lo, hi);
                    EXPECT_EQ(got.first, first) << "lo=" << lo << " hi=" << hi << " density=" << density;
                    EXPECT_EQ(got.last, last) << "lo=" << lo << " hi=" << hi << " density=" << density;
                    EXPECT_EQ(got.count, count) << "lo=" << lo << " hi=" << hi << " density=" << density;
                    // mask_visible: the same keys as a list, in order (room for a vector past the span)
                    std::vector<int32_t> want_idx, idx(static_cast<size_t>(hi - lo + kiln::cpu::kAttnLanes), -1);
                    for (int64_t c = lo; c < hi; ++c) {
                        if (m[c] != -inf) want_idx.push_back(static_cast<int32_t>(c));
                    }
                    const int64_t n = k.mask_visible(m.data(), lo, hi, idx.data());
                    ASSERT_EQ(n, static_cast<int64_t>(want_idx.size())) << "lo=" << lo << " hi=" << hi;
                    EXPECT_TRUE(std::equal(want_idx.begin(), want_idx.end(), idx.begin())) << "lo=" << lo << " hi=" << hi;
                }
            }
        }
    }
}

// The BF16 product kernels against the reference: bf16_pairs bit-exact with rounding each element
// (as the type's loader reads it) to nearest even, from every native type, odd row and column
// counts; gemm_bf16 against double sums of the same rounded values, with and without beta, odd
// tile edges (rows and pair counts), columns of 1 to 5 vectors and strided operands.
TEST(AttentionKernels, Bf16ProductsMatchReference) {
    std::mt19937 rng(13);
    bool ran = false;
    for (Isa isa : kIsas) {
        if (!kiln::cpu::isa_supported(isa)) continue;
        const auto& k = kiln::cpu::attn_kernels(isa);
        ASSERT_EQ(k.gemm_bf16 == nullptr, k.bf16_pairs == nullptr);
        ASSERT_EQ(k.gemm_bf16 == nullptr, k.exp_row_bf16 == nullptr);
        if (!k.gemm_bf16) continue;
        ran = true;
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        // exp_row_bf16: within BF16 rounding (2^-9), the odd count's partner 0
        check_exp_row_half(k.exp_row_bf16, [](uint16_t h) { return kiln::bf16_to_fp32(h); }, 1.0 / 256, 0.0, true);
        for (Type t : {Type::F32, Type::F16, Type::BF16, Type::Q8_0}) {
            for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {2, 16}, {7, 33}, {64, 64}, {13, 96}}) {
                if (t == Type::Q8_0 && cols % 32) continue;
                SCOPED_TRACE(std::string(kiln::type_name(t)) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
                const auto v = randn(rng, rows * cols);
                const auto raw = quantize_rows(t, v, cols);
                const auto vals = dequantize_rows(t, raw, cols);  // what the loaders read
                const size_t stride = kiln::row_size(t, cols) + 64;  // rows apart by more than their size
                std::vector<uint8_t> src(stride * static_cast<size_t>(rows));
                for (int64_t i = 0; i < rows; ++i) {
                    std::memcpy(src.data() + i * stride, raw.data() + i * kiln::row_size(t, cols), kiln::row_size(t, cols));
                }
                const int64_t cp = kiln::cpu::attn_pad(cols), ld = cp + 16;
                std::vector<uint32_t> got(static_cast<size_t>((rows + 1) / 2 * ld), 0xdeadbeefu);
                k.bf16_pairs(t, src.data(), stride, rows, cols, got.data(), ld);
                for (int64_t i = 0; i < rows; i += 2)
                    for (int64_t c = 0; c < cp; ++c) {
                        auto half = [&](int64_t r) -> uint32_t {
                            return r < rows && c < cols ? kiln::fp32_to_bf16(vals[r * cols + c]) : 0u;
                        };
                        ASSERT_EQ(got[(i / 2) * ld + c], half(i) | half(i + 1) << 16) << "row " << i << " col " << c;
                    }
            }
        }
        for (int64_t M : {1, 5, 8, 13}) {
            for (int64_t N : {16, 32, 48, 80}) {
                for (int64_t Kp : {1, 7, 32, 33}) {
                    for (bool with_beta : {false, true}) {
                        SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " Kp=" + std::to_string(Kp));
                        const int64_t lda = Kp + 3, ldb = N + 16, ldc = N + 5;
                        std::vector<uint32_t> A(static_cast<size_t>(M * lda)), B(static_cast<size_t>(Kp * ldb));
                        auto random_pair = [&] {
                            const auto v = randn(rng, 2);
                            return kiln::fp32_to_bf16(v[0]) | uint32_t{kiln::fp32_to_bf16(v[1])} << 16;
                        };
                        for (auto& x : A) x = random_pair();
                        for (auto& x : B) x = random_pair();
                        const auto c0 = randn(rng, M * ldc);
                        std::vector<float> beta(static_cast<size_t>(M));
                        for (int64_t r = 0; r < M; ++r) beta[r] = 0.25f * static_cast<float>(r % 4);
                        std::vector<float> C = c0;
                        const float* bt = with_beta ? beta.data() : nullptr;
                        k.gemm_bf16(M, N, Kp, A.data(), lda, B.data(), ldb, C.data(), ldc, bt);
                        auto half = [](uint32_t w) { return static_cast<double>(kiln::bf16_to_fp32(static_cast<uint16_t>(w))); };
                        auto lo = [&](uint32_t w) { return half(w); };
                        auto hi = [&](uint32_t w) { return half(w >> 16); };
                        for (int64_t r = 0; r < M; ++r) {
                            for (int64_t j = 0; j < ldc; ++j) {
                                if (j >= N) {  // past N: untouched
                                    ASSERT_EQ(C[r * ldc + j], c0[r * ldc + j]);
                                    continue;
                                }
                                double want = with_beta ? static_cast<double>(c0[r * ldc + j]) * beta[r] : 0.0, mag = std::fabs(want);
                                for (int64_t q = 0; q < Kp; ++q) {
                                    const uint32_t a = A[r * lda + q], b = B[q * ldb + j];
                                    want += lo(a) * lo(b) + hi(a) * hi(b);
                                    mag += std::fabs(lo(a) * lo(b)) + std::fabs(hi(a) * hi(b));
                                }
                                ASSERT_NEAR(C[r * ldc + j], want, 1e-6 * mag + 1e-30) << "r=" << r << " j=" << j;
                            }
                        }
                    }
                }
            }
        }
    }
    if (!ran) GTEST_SKIP() << "no instruction set here has BF16 attention products";
}

// The FP16 product kernels against the reference: exp_row_f16 within fp16 rounding (and exactly 0 for
// masked keys); gemm_f16 against double sums of the same fp16 operands, within what summing runs of
// kAttnF16Run products in fp16 loses (a few 2^-11 of the products' magnitudes), with and without
// beta and row scales, odd tile edges (rows, columns, steps), B's columns past b_cols read as zeros
// whatever the memory there holds, strided operands, C past N untouched; runs whose fp16 sums
// overflow summed in float instead (float accuracy, no infinities).
TEST(AttentionKernels, F16ProductsMatchReference) {
    std::mt19937 rng(17);
    bool ran = false;
    for (Isa isa : kIsas) {
        if (!kiln::cpu::isa_supported(isa)) continue;
        const auto& k = kiln::cpu::attn_kernels(isa);
        ASSERT_EQ(k.gemm_f16 == nullptr, k.exp_row_f16 == nullptr);
        if (!k.gemm_f16) continue;
        ran = true;
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        // exp_row_f16: within fp16 rounding (2^-11, or half its smallest subnormal step, 2^-25), nothing past n
        check_exp_row_half(k.exp_row_f16, [](uint16_t h) { return kiln::fp16_to_fp32(h); }, 1.0 / 1024, 3e-8, false);
        auto fp16_values = [&](int64_t count, float sigma) {
            std::vector<uint16_t> h(static_cast<size_t>(count));
            const auto v = randn(rng, count, sigma);
            for (int64_t i = 0; i < count; ++i) h[i] = kiln::fp32_to_fp16(v[i]);
            return h;
        };
        for (int64_t M : {1, 5, 8, 13}) {
            for (int64_t N : {16, 32, 48, 80, 128}) {
                for (int64_t K : {1, 7, 32, 33, 100}) {
                    for (int64_t b_cols : {N, N - 9}) {
                        for (int variant = 0; variant < 4; ++variant) {
                            const bool with_beta = variant & 1, with_scale = variant & 2;
                            SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                         " b_cols=" + std::to_string(b_cols) + " beta=" + std::to_string(with_beta) +
                                         " scale=" + std::to_string(with_scale));
                            const int64_t lda = K + 3, ldb = N + 40, ldc = N + 5;
                            const auto A = fp16_values(M * lda, 0.7f);
                            auto B = fp16_values(K * ldb, 1.0f);
                            for (int64_t q = 0; q < K; ++q) {  // past b_cols: large values the kernel must not read
                                for (int64_t j = b_cols; j < ldb; ++j) B[q * ldb + j] = kiln::fp32_to_fp16(30000.0f);
                            }
                            const auto c0 = randn(rng, M * ldc);
                            std::vector<float> beta(static_cast<size_t>(M)), scale(static_cast<size_t>(M));
                            for (int64_t r = 0; r < M; ++r) {
                                beta[r] = 0.25f * static_cast<float>(r % 4);
                                scale[r] = std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
                            }
                            std::vector<float> C = c0;
                            k.gemm_f16(M, N, K, A.data(), lda, reinterpret_cast<const uint8_t*>(B.data()),
                                       static_cast<size_t>(ldb) * 2, b_cols, C.data(), ldc, with_beta ? beta.data() : nullptr,
                                       with_scale ? scale.data() : nullptr, nullptr);
                            for (int64_t r = 0; r < M; ++r) {
                                for (int64_t j = 0; j < ldc; ++j) {
                                    if (j >= N) {  // past N: untouched
                                        ASSERT_EQ(C[r * ldc + j], c0[r * ldc + j]);
                                        continue;
                                    }
                                    double dot = 0, mag = 0;
                                    for (int64_t q = 0; q < K && j < b_cols; ++q) {
                                        const double prod = static_cast<double>(kiln::fp16_to_fp32(A[r * lda + q])) *
                                                            kiln::fp16_to_fp32(B[q * ldb + j]);
                                        dot += prod;
                                        mag += std::fabs(prod);
                                    }
                                    const double s = with_scale ? scale[r] : 1.0;
                                    const double base = with_beta ? static_cast<double>(c0[r * ldc + j]) * beta[r] : 0.0;
                                    // (+ fp16's subnormal step, 2^-24, per step: products near 0 round absolutely)
                                    const double tol = s * (mag * (1.0 / 256) + static_cast<double>(K) * 6e-8) + 1e-6 * std::fabs(base);
                                    ASSERT_NEAR(C[r * ldc + j], base + s * dot, tol)
                                        << "r=" << r << " j=" << j;
                                }
                            }
                        }
                    }
                }
            }
        }
        // Sums past fp16's range (products of 4,500; runs of 32 reach 144,000): such runs are summed
        // in float, so C is the float result, finite, beside runs that stayed in fp16.
        {
            const int64_t M = 3, N = 64, K = 70, lda = K, ldb = N;
            std::vector<uint16_t> A(static_cast<size_t>(M * lda)), B(static_cast<size_t>(K * ldb));
            for (int64_t r = 0; r < M; ++r)
                for (int64_t q = 0; q < K; ++q) A[r * lda + q] = kiln::fp32_to_fp16(q < 64 ? 1.5f : 0.25f * static_cast<float>(r + 1));
            for (int64_t q = 0; q < K; ++q)
                for (int64_t j = 0; j < N; ++j) {
                    const float big = 3000.0f + static_cast<float>(j), sign = q < 40 ? 1.0f : -1.0f;
                    B[q * ldb + j] = kiln::fp32_to_fp16(q < 64 ? sign * big : 1.0f + 0.01f * static_cast<float>(j));
                }
            std::vector<float> C(static_cast<size_t>(M * N), -1.0f);
            k.gemm_f16(M, N, K, A.data(), lda, reinterpret_cast<const uint8_t*>(B.data()), static_cast<size_t>(ldb) * 2, N,
                       C.data(), N, nullptr, nullptr, nullptr);
            for (int64_t r = 0; r < M; ++r)
                for (int64_t j = 0; j < N; ++j) {
                    double dot = 0, mag = 0;
                    for (int64_t q = 0; q < K; ++q) {
                        const double prod = static_cast<double>(kiln::fp16_to_fp32(A[r * lda + q])) * kiln::fp16_to_fp32(B[q * ldb + j]);
                        dot += prod;
                        mag += std::fabs(prod);
                    }
                    ASSERT_TRUE(std::isfinite(C[r * N + j])) << "r=" << r << " j=" << j;
                    ASSERT_NEAR(C[r * N + j], dot, 1e-6 * mag) << "r=" << r << " j=" << j;
                }
        }
    }
    if (!ran) GTEST_SKIP() << "no instruction set here has FP16 attention products";
}

// The FP16 products' row scale from the exponent bits against its frexp form, over every binade a
// float has (subnormals, the clamps at 2^-100 and 2^100, zero, infinity, NaN) and both binade edges.
TEST(AttentionKernels, HalfRowScaleMatchesFrexp) {
    std::vector<float> xs = {0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                             std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
    for (int e = -149; e <= 127; ++e) {
        const float lo = std::ldexp(1.0f, e);
        xs.push_back(lo);
        xs.push_back(std::nextafter(std::ldexp(1.0f, e + 1), 0.0f));  // the top of the binade
        xs.push_back(lo * 1.37f);
    }
    for (float x : xs) {
        const float got = kiln::cpu::float_gemm::half_row_scale(x), want = kiln::cpu::float_gemm::half_row_scale_slow(x);
        ASSERT_EQ(got, want) << "amax=" << x;
        if (std::isfinite(x) && x >= std::ldexp(1.0f, -100) && x < std::ldexp(1.0f, 100)) {
            ASSERT_GE(x * got, 1.0f) << "amax=" << x;
            ASSERT_LT(x * got, 2.0f) << "amax=" << x;
        }
    }
}

}  // namespace
