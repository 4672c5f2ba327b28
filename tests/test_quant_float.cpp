// F16 / BF16 conversions against the compiler's own correctly rounded
// conversions (an independent implementation), exhaustively where feasible.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/float_convert.h"
#include "core/quant.h"

namespace {

TEST(Fp16, EveryHalfRoundTrips) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const float f = kiln::fp16_to_fp32(static_cast<kiln::fp16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0);
            continue;
        }
        EXPECT_EQ(kiln::fp32_to_fp16(f), h) << std::hex << h;
    }
}

// GCC accepts _Float16 in C++ from version 13 (it defines __FLT16_MAX__ earlier on some targets).
#if defined(__FLT16_MAX__) && (defined(__clang__) || __GNUC__ >= 13)
TEST(Fp16, MatchesCompilerConversion) {
    // Every half value, each midpoint between neighbours and random floats over the whole range.
    std::vector<float> probes;
    for (uint32_t h = 0; h < 0x7c00u; ++h) {
        const float a = kiln::fp16_to_fp32(static_cast<kiln::fp16_t>(h));
        const float b = kiln::fp16_to_fp32(static_cast<kiln::fp16_t>(h + 1));
        const float mid = a + (b - a) / 2;
        for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
            probes.push_back(v);
            probes.push_back(-v);
        }
    }
    std::mt19937 rng(42);
    for (int i = 0; i < 2000000; ++i) probes.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    probes.push_back(65519.0f);
    probes.push_back(65520.0f);
    probes.push_back(1e-8f);
    for (float v : probes) {
        if (std::isnan(v)) continue;
        const _Float16 c = static_cast<_Float16>(v);
        uint16_t expect;
        std::memcpy(&expect, &c, 2);
        ASSERT_EQ(kiln::fp32_to_fp16(v), expect) << v;
        ASSERT_EQ(std::bit_cast<uint32_t>(kiln::fp16_to_fp32(expect)), std::bit_cast<uint32_t>(static_cast<float>(c)));
    }
}
#endif

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(kiln::fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(kiln::fp32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
    EXPECT_EQ(kiln::fp32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
    EXPECT_EQ(kiln::fp32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
    EXPECT_EQ(kiln::fp32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // overflow to inf
    const uint16_t nan = kiln::fp32_to_bf16(std::bit_cast<float>(0x7f800001u));
    EXPECT_TRUE(std::isnan(kiln::bf16_to_fp32(nan)));
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const float f = kiln::bf16_to_fp32(static_cast<uint16_t>(h));
        if (!std::isnan(f)) {
            EXPECT_EQ(kiln::fp32_to_bf16(f), h);
        }
    }
}

TEST(Quant, RejectsBadSizes) {
    std::vector<float> x(100, 1.0f);
    std::vector<uint8_t> out(1024);
    EXPECT_THROW(kiln::quantize(kiln::Type::Q4_0, x.data(), out.data(), 1, 100), std::invalid_argument);
    EXPECT_THROW(kiln::dequantize_row(kiln::Type::Q4_K, out.data(), x.data(), 100), std::invalid_argument);
    EXPECT_THROW(kiln::quantize(kiln::Type::IQ2_XXS, x.data(), out.data(), 1, 256), std::invalid_argument);
}

// Legacy formats on random data: each element's error is bounded by the
// format's step: half a step for rounding, a whole step for the one value the
// symmetric 4/5-bit formats clamp (the grid has one level more below zero).
TEST(Quant, LegacyErrorWithinStep) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int n = 32 * 64;
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = nd(rng);
    struct Case {
        kiln::Type t;
        bool affine;
        float levels;  // steps across the range: |max| / levels for symmetric, (max - min) / levels for affine
        float bound;   // allowed error in steps
    };
    for (auto c : {Case{kiln::Type::Q4_0, false, 8, 1.0f}, Case{kiln::Type::Q4_1, true, 15, 0.5f},
                   Case{kiln::Type::Q5_0, false, 16, 1.0f}, Case{kiln::Type::Q5_1, true, 31, 0.5f},
                   Case{kiln::Type::Q8_0, false, 127, 0.5f}}) {
        std::vector<uint8_t> q(kiln::row_size(c.t, n));
        kiln::quantize(c.t, x.data(), q.data(), 1, n);
        kiln::dequantize_row(c.t, q.data(), y.data(), n);
        for (int b = 0; b < n / 32; ++b) {
            float lo = x[b * 32], hi = x[b * 32];
            for (int j = 0; j < 32; ++j) {
                lo = std::min(lo, x[b * 32 + j]);
                hi = std::max(hi, x[b * 32 + j]);
            }
            const float step = (c.affine ? hi - lo : std::max(hi, -lo)) / c.levels;
            for (int j = 0; j < 32; ++j) {
                ASSERT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), c.bound * step * 1.01f + 1e-3f)
                    << kiln::type_name(c.t) << " block " << b;
            }
        }
    }
}

}  // namespace
