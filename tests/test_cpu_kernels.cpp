// CPU dot-product kernels: every instruction set this machine supports
// against the scalar reference, and the scalar reference against float dot
// products of the dequantized rows. Also the run-time ISA choice (KILN_CPU).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "core/float_convert.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/types.h"
#include "kiln.h"

namespace {

using kiln::Type;
using kiln::cpu::Isa;

const Type kWeightTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1,
                             Type::Q8_0, Type::IQ4_NL, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K};

std::vector<Isa> supported_isas() {
    std::vector<Isa> v;
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (kiln::cpu::isa_supported(isa)) v.push_back(isa);
    }
    return v;
}

// Row lengths: one block, odd block counts (7, 33: exercise the unrolled
// loops' tails), and model-sized rows.
std::vector<int64_t> row_lengths(Type t) {
    const int64_t bs = kiln::traits(t).block_size;
    if (bs == 1) return {1, 7, 31, 33, 257, 4096, 4099};
    return {bs, 7 * bs, 33 * bs, std::max<int64_t>(4096, bs), 11008};
}

// Random values with a spread of magnitudes between blocks, a few outliers,
// and an all-zero block (the quantizers' degenerate case).
std::vector<float> random_row(std::mt19937& rng, int64_t n, int block) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(0.05f, 2.0f);
    std::vector<float> v(static_cast<size_t>(n));
    float scale = 1;
    for (int64_t i = 0; i < n; ++i) {
        if (i % block == 0) scale = uni(rng);
        v[i] = scale * normal(rng);
        if (rng() % 97 == 0) v[i] *= 8;  // outlier
    }
    if (n >= 3 * block) std::fill(v.begin() + block, v.begin() + 2 * block, 0.0f);
    return v;
}

std::vector<uint8_t> quantize_row(Type t, const std::vector<float>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(kiln::row_size(t, n));
    kiln::quantize(t, x.data(), q.data(), 1, n);
    return q;
}

std::vector<float> dequantize(Type t, const std::vector<uint8_t>& q, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    kiln::dequantize_row(t, q.data(), v.data(), n);
    return v;
}

// Random bytes for every field except the float scales, which get finite
// values: reaches bit patterns the quantizers never produce (Q8_0 -128,
// Q6_K scale -128, every Q3_K high-bit mask).
std::vector<uint8_t> random_blocks(std::mt19937& rng, Type t, int64_t n) {
    const auto& tr = kiln::traits(t);
    std::vector<uint8_t> q(kiln::row_size(t, n));
    for (auto& b : q) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    auto h = [&](float lo = -1.0f) { return kiln::fp32_to_fp16(lo < 0 ? uni(rng) : std::fabs(uni(rng))); };
    const int64_t nb = n / tr.block_size;
    auto* p = q.data();
    for (int64_t b = 0; b < nb; ++b, p += tr.type_size) {
        switch (t) {
            case Type::F32:
                for (size_t i = 0; i < tr.type_size; i += 4) {
                    const float f = uni(rng);
                    std::memcpy(p + i, &f, 4);
                }
                break;
            case Type::F16: {
                const uint16_t v = kiln::fp32_to_fp16(uni(rng));
                std::memcpy(p, &v, 2);
                break;
            }
            case Type::BF16: {
                const uint16_t v = kiln::fp32_to_bf16(uni(rng));
                std::memcpy(p, &v, 2);
                break;
            }
            case Type::Q4_0: reinterpret_cast<kiln::block_q4_0*>(p)->d = h(); break;
            case Type::Q5_0: reinterpret_cast<kiln::block_q5_0*>(p)->d = h(); break;
            case Type::Q8_0: reinterpret_cast<kiln::block_q8_0*>(p)->d = h(); break;
            case Type::IQ4_NL: reinterpret_cast<kiln::block_iq4_nl*>(p)->d = h(); break;
            case Type::Q4_1: {
                auto* blk = reinterpret_cast<kiln::block_q4_1*>(p);
                blk->d = h(0);
                blk->m = h();
                break;
            }
            case Type::Q5_1: {
                auto* blk = reinterpret_cast<kiln::block_q5_1*>(p);
                blk->d = h(0);
                blk->m = h();
                break;
            }
            case Type::Q2_K: {
                auto* blk = reinterpret_cast<kiln::block_q2_K*>(p);
                blk->d = h(0);
                blk->dmin = h(0);
                break;
            }
            case Type::Q3_K: reinterpret_cast<kiln::block_q3_K*>(p)->d = h(); break;
            case Type::Q4_K: {
                auto* blk = reinterpret_cast<kiln::block_q4_K*>(p);
                blk->d = h(0);
                blk->dmin = h(0);
                break;
            }
            case Type::Q5_K: {
                auto* blk = reinterpret_cast<kiln::block_q5_K*>(p);
                blk->d = h(0);
                blk->dmin = h(0);
                break;
            }
            case Type::Q6_K: reinterpret_cast<kiln::block_q6_K*>(p)->d = h(); break;
            default: ADD_FAILURE() << "no random block recipe for " << kiln::type_name(t);
        }
    }
    return q;
}

// Magnitude scale of a dot product's intermediate terms: sum over elements
// of (|w_i| + max |w| in its block) * |a_i|. The second part covers the
// min/offset terms of the affine formats, which the kernels evaluate
// separately from the scaled quants (so partial results can exceed the
// plain sum of |w_i a_i|).
double magnitude(const std::vector<float>& w, const std::vector<float>& a, int64_t block) {
    double s = 0;
    for (size_t b = 0; b < w.size(); b += static_cast<size_t>(block)) {
        float wmax = 0;
        for (size_t i = b; i < b + static_cast<size_t>(block); ++i) wmax = std::max(wmax, std::fabs(w[i]));
        for (size_t i = b; i < b + static_cast<size_t>(block); ++i) {
            s += (static_cast<double>(std::fabs(w[i])) + wmax) * std::fabs(a[i]);
        }
    }
    return s;
}

// Q8_1's s = fp16(d * sum(q)) is rounded to fp16, so the m * s term of
// Q4_1 / Q5_1 carries a relative error of up to 2^-11 of itself.
double q8_1_sum_error(Type wt, const std::vector<uint8_t>& wq, const std::vector<uint8_t>& aq, int64_t n) {
    if (wt != Type::Q4_1 && wt != Type::Q5_1) return 0;
    const auto* y = reinterpret_cast<const kiln::block_q8_1*>(aq.data());
    double e = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
        kiln::fp16_t m;
        const size_t ts = kiln::traits(wt).type_size;
        std::memcpy(&m, wq.data() + b * ts + 2, 2);  // m follows d in both layouts
        e += std::fabs(kiln::fp16_to_fp32(m)) * std::fabs(kiln::fp16_to_fp32(y[b].s)) * std::ldexp(1.0, -11);
    }
    return e;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
}

// Per-element bound of the activation quantization error, given the row
// converted to vec_dot_type.
std::vector<double> activation_error(Type at, const std::vector<float>& a) {
    std::vector<double> e(a.size());
    const int64_t bs = kiln::traits(at).block_size;
    for (size_t b = 0; b < a.size(); b += static_cast<size_t>(bs)) {
        float amax = 0;
        for (size_t i = b; i < b + static_cast<size_t>(bs); ++i) amax = std::max(amax, std::fabs(a[i]));
        const double d = amax / 127.0;
        for (size_t i = b; i < b + static_cast<size_t>(bs); ++i) {
            switch (at) {
                case Type::F32: e[i] = 0; break;
                case Type::F16: e[i] = std::fabs(a[i]) * std::ldexp(1.0, -11) + 1e-7; break;
                case Type::BF16: e[i] = std::fabs(a[i]) * std::ldexp(1.0, -8); break;
                // Rounding to the grid (d / 2) plus, for the fp16-stored
                // scales, 127 quanta times the scale's rounding (2^-11 d).
                case Type::Q8_K: e[i] = 0.5 * d; break;
                default: e[i] = (0.5 + 127.0 / 2048) * d; break;
            }
        }
    }
    return e;
}

class CpuKernels : public ::testing::TestWithParam<Type> {};

// The scalar kernel equals the exact dot product of the dequantized weight
// and activation rows (up to float rounding), and approximates the float
// dot product with the original activations within the activation
// quantization error.
TEST_P(CpuKernels, ScalarMatchesDequantized) {
    const Type wt = GetParam();
    const auto& k = kiln::cpu::kernels(wt, Isa::Scalar);
    ASSERT_NE(k.vec_dot, nullptr);
    ASSERT_NE(k.from_float, nullptr);
    const int64_t wbs = kiln::traits(wt).block_size;
    std::mt19937 rng(1234 + static_cast<unsigned>(wt));
    for (int64_t n : row_lengths(wt)) {
        SCOPED_TRACE("n = " + std::to_string(n));
        const auto w = random_row(rng, n, static_cast<int>(std::max<int64_t>(wbs, 32)));
        const auto a = random_row(rng, n, 32);
        const auto wq = quantize_row(wt, w);
        std::vector<uint8_t> aq(kiln::row_size(k.vec_dot_type, n));
        k.from_float(a.data(), aq.data(), n);
        const auto wd = dequantize(wt, wq, n);
        const auto ad = dequantize(k.vec_dot_type, aq, n);

        float got = 0;
        k.vec_dot(n, &got, wq.data(), aq.data());
        const double mag = magnitude(wd, ad, std::max<int64_t>(wbs, 1));
        const double exact = dot(wd, ad);
        EXPECT_NEAR(got, exact, 1e-5 * mag + q8_1_sum_error(wt, wq, aq, n) + 1e-30)
            << kiln::type_name(wt) << " vs dequantized rows";

        const auto ae = activation_error(k.vec_dot_type, a);
        double bound = 0;
        for (size_t i = 0; i < wd.size(); ++i) bound += std::fabs(wd[i]) * ae[i];
        EXPECT_NEAR(got, dot(wd, a), bound + 1e-5 * mag + q8_1_sum_error(wt, wq, aq, n) + 1e-30)
            << kiln::type_name(wt) << " vs float activations";
    }
}

// A SIMD table entry against the scalar one: same activation format,
// bit-identical activation conversion, and dot products equal up to the
// order of float accumulation. Weights are both quantized rows and raw
// random blocks.
void expect_matches_scalar(Type wt, const kiln::cpu::TypeKernels& k) {
    const auto& ref = kiln::cpu::kernels(wt, Isa::Scalar);
    const int64_t wbs = kiln::traits(wt).block_size;
    ASSERT_EQ(k.vec_dot_type, ref.vec_dot_type);
    ASSERT_NE(k.vec_dot, nullptr);
    ASSERT_NE(k.from_float, nullptr);
    std::mt19937 rng(99 + static_cast<unsigned>(wt));
    for (int64_t n : row_lengths(wt)) {
        SCOPED_TRACE("n = " + std::to_string(n));
        const auto a = random_row(rng, n, 32);
        std::vector<uint8_t> aq(kiln::row_size(ref.vec_dot_type, n)), aq_simd(aq.size());
        ref.from_float(a.data(), aq.data(), n);
        k.from_float(a.data(), aq_simd.data(), n);
        EXPECT_EQ(0, std::memcmp(aq.data(), aq_simd.data(), aq.size())) << "from_float differs from scalar";
        const auto ad = dequantize(ref.vec_dot_type, aq, n);

        for (int variant = 0; variant < 2; ++variant) {
            const auto wq = variant == 0 ? quantize_row(wt, random_row(rng, n, static_cast<int>(std::max<int64_t>(wbs, 32))))
                                         : random_blocks(rng, wt, n);
            const auto wd = dequantize(wt, wq, n);
            float want = 0, got = 0;
            ref.vec_dot(n, &want, wq.data(), aq.data());
            k.vec_dot(n, &got, wq.data(), aq.data());
            const double mag = magnitude(wd, ad, std::max<int64_t>(wbs, 1));
            EXPECT_NEAR(got, want, 1e-5 * mag + 1e-30)
                << kiln::type_name(wt) << (variant == 0 ? " quantized row" : " random blocks");
        }
    }
}

TEST_P(CpuKernels, SimdMatchesScalar) {
    const Type wt = GetParam();
    for (Isa isa : supported_isas()) {
        if (isa == Isa::Scalar) continue;
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        expect_matches_scalar(wt, kiln::cpu::kernels(wt, isa));
    }
}

}  // namespace

// The per-set tables (internal to the library, exported like the rest of
// it): called directly to reach the variants this CPU would not be given,
// e.g. the AVX-512 kernels without VNNI / BF16 on a CPU that has both.
namespace kiln::cpu::detail {
#if defined(__x86_64__) || defined(_M_X64)
const TypeKernels* avx512_kernels(Type t, const CpuFeatures& f);
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
const TypeKernels* neon_kernels(Type t, const CpuFeatures& f);
#endif
}  // namespace kiln::cpu::detail

namespace {

TEST_P(CpuKernels, SimdVariantsWithoutExtensions) {
    [[maybe_unused]] const Type wt = GetParam();
    [[maybe_unused]] kiln::cpu::CpuFeatures f = kiln::cpu::cpu_features();
#if defined(__x86_64__) || defined(_M_X64)
    if (kiln::cpu::isa_supported(Isa::Avx512)) {
        f.avx512vnni = false;
        f.avx512bf16 = false;
        SCOPED_TRACE("avx512 without vnni/bf16");
        if (const auto* k = kiln::cpu::detail::avx512_kernels(wt, f)) expect_matches_scalar(wt, *k);
    }
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
    if (kiln::cpu::isa_supported(Isa::Neon)) {
        if (f.dotprod && f.i8mm) {  // the SDOT variant on a CPU that would be given the SMMLA one
            kiln::cpu::CpuFeatures g = f;
            g.i8mm = false;
            SCOPED_TRACE("neon dotprod without i8mm");
            if (const auto* k = kiln::cpu::detail::neon_kernels(wt, g)) expect_matches_scalar(wt, *k);
        }
        f.dotprod = false;
        f.i8mm = false;
        SCOPED_TRACE("neon without dotprod");
        if (const auto* k = kiln::cpu::detail::neon_kernels(wt, f)) expect_matches_scalar(wt, *k);
    }
#endif
}

// Activation conversion on the values random rows never produce: every
// float bit pattern class (NaN payloads, infinities, subnormals, fp16
// overflow) for F16 / BF16, and exact rounding ties for the 8-bit formats
// (a block whose largest magnitude is 127 has scale 1, so x.5 values are
// ties: Q8_0 rounds them away from zero, Q8_K to even).
TEST(CpuKernelsFromFloat, SpecialValuesBitExact) {
    std::mt19937 rng(7);
    std::vector<float> bits(4099);
    for (auto& v : bits) {
        const uint32_t u = static_cast<uint32_t>(rng());
        std::memcpy(&v, &u, sizeof(v));
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.0f, 65520.0f, -65520.0f,
                              1e-8f, -3e-41f, 5.96e-8f, 2.98e-8f, 1.00390625f, 1.01171875f, 3.4e38f};
    std::copy(std::begin(specials), std::end(specials), bits.begin());

    std::vector<float> ties(2 * 256);
    for (size_t i = 0; i < ties.size(); ++i) ties[i] = static_cast<float>(static_cast<int>(i % 200) - 100) + 0.5f;
    for (size_t b = 0; b < ties.size(); b += 32) ties[b] = 127.0f;  // block maximum first: scale exactly 1

    for (Isa isa : supported_isas()) {
        if (isa == Isa::Scalar) continue;
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        for (Type wt : {Type::F16, Type::BF16, Type::Q8_0, Type::Q4_K}) {
            const auto& ref = kiln::cpu::kernels(wt, Isa::Scalar);
            const auto& k = kiln::cpu::kernels(wt, isa);
            const auto& x = (wt == Type::F16 || wt == Type::BF16) ? bits : ties;
            const int64_t n = static_cast<int64_t>(x.size());
            std::vector<uint8_t> want(kiln::row_size(ref.vec_dot_type, n)), got(want.size());
            ref.from_float(x.data(), want.data(), n);
            k.from_float(x.data(), got.data(), n);
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size())) << kiln::type_name(ref.vec_dot_type);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CpuKernels, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<Type>& param) {
                             return std::string(kiln::type_name(param.param));
                         });

TEST(CpuKernelsDispatch, ScalarAlwaysSupported) {
    EXPECT_TRUE(kiln::cpu::isa_supported(Isa::Scalar));
    EXPECT_EQ(kiln::cpu::isa_name(Isa::Scalar), "scalar");
    EXPECT_EQ(kiln::cpu::isa_name(Isa::Avx2), "avx2");
    EXPECT_EQ(kiln::cpu::isa_name(Isa::Avx512), "avx512");
    EXPECT_EQ(kiln::cpu::isa_name(Isa::Neon), "neon");
    const auto& f = kiln::cpu::cpu_features();
    if (kiln::cpu::isa_supported(Isa::Avx512)) {
        EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl);
    }
    if (kiln::cpu::isa_supported(Isa::Avx2)) {
        EXPECT_TRUE(f.avx2 && f.fma && f.f16c);
    }
    if (kiln::cpu::isa_supported(Isa::Neon)) {
        EXPECT_TRUE(f.neon);
    }
}

TEST(CpuKernelsDispatch, TypesWithoutKernelsThrow) {
    for (Isa isa : supported_isas()) {
        EXPECT_THROW(kiln::cpu::kernels(Type::IQ2_XXS, isa), std::invalid_argument);
        EXPECT_THROW(kiln::cpu::kernels(Type::I32, isa), std::invalid_argument);
    }
}

TEST(CpuKernelsDispatch, UnsupportedIsaThrows) {
    for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!kiln::cpu::isa_supported(isa)) {
            EXPECT_THROW(kiln::cpu::kernels(Type::Q4_0, isa), std::runtime_error);
        }
    }
}

// Sets (or with nullopt unsets) KILN_CPU for the scope, restoring the old value.
class ScopedEnv {
public:
    explicit ScopedEnv(std::optional<std::string> value) {
        if (const char* old = std::getenv("KILN_CPU")) old_ = std::string(old);
        set(value);
    }
    ~ScopedEnv() { set(old_); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    static void set(const std::optional<std::string>& v) {
#if defined(_WIN32)
        _putenv_s("KILN_CPU", v ? v->c_str() : "");
#else
        if (v) {
            setenv("KILN_CPU", v->c_str(), 1);
        } else {
            unsetenv("KILN_CPU");
        }
#endif
    }
    std::optional<std::string> old_;
};

TEST(CpuKernelsDispatch, DefaultIsBestSupported) {
    ScopedEnv env(std::nullopt);
    const Isa best = kiln::cpu::selected_isa();
    EXPECT_TRUE(kiln::cpu::isa_supported(best));
    if (kiln::cpu::isa_supported(Isa::Avx512)) {
        EXPECT_EQ(best, Isa::Avx512);
    } else if (kiln::cpu::isa_supported(Isa::Avx2)) {
        EXPECT_EQ(best, Isa::Avx2);
    } else if (kiln::cpu::isa_supported(Isa::Neon)) {
        EXPECT_EQ(best, Isa::Neon);
    } else {
        EXPECT_EQ(best, Isa::Scalar);
    }
    // The one-argument kernels() uses the selected set.
    EXPECT_EQ(&kiln::cpu::kernels(Type::Q4_0), &kiln::cpu::kernels(Type::Q4_0, best));
}

TEST(CpuKernelsDispatch, EnvForcesSupportedSet) {
    for (Isa isa : supported_isas()) {
        ScopedEnv env(std::string(kiln::cpu::isa_name(isa)));
        EXPECT_EQ(kiln::cpu::selected_isa(), isa);
        EXPECT_EQ(&kiln::cpu::kernels(Type::Q8_0), &kiln::cpu::kernels(Type::Q8_0, isa));
    }
}

// The C API's machine description follows the same choice, and a bad KILN_CPU is an error value
// (null and kiln_last_error), not an exception through the C boundary.
TEST(CpuKernelsDispatch, ApiNamesKernelsAndMachine) {
    const std::string cpu = kiln_cpu_description();
    EXPECT_FALSE(cpu.empty());
    for (Isa isa : supported_isas()) {
        ScopedEnv env(std::string(kiln::cpu::isa_name(isa)));
        const char* k = kiln_cpu_kernels();
        ASSERT_NE(k, nullptr) << kiln_last_error();
        EXPECT_EQ(std::string(k), kiln::cpu::isa_name(isa));
        const std::string info = kiln_system_info();
        EXPECT_EQ(info.rfind("CPU: " + cpu + " | kernels: " + k + " | AVX2 = ", 0), 0u) << info;
        EXPECT_NE(info.find(std::string("AVX2 = ") + (kiln::cpu::cpu_features().avx2 ? "1" : "0")), std::string::npos) << info;
    }
    ScopedEnv env(std::string("avx1024"));
    EXPECT_EQ(kiln_cpu_kernels(), nullptr);
    EXPECT_NE(std::string(kiln_last_error()).find("KILN_CPU=avx1024"), std::string::npos) << kiln_last_error();
    EXPECT_NE(std::string(kiln_system_info()).find("kernels: none (KILN_CPU=avx1024"), std::string::npos);
}

TEST(CpuKernelsDispatch, EnvRejectsUnknownOrUnsupported) {
    {
        ScopedEnv env(std::string("avx1024"));
        EXPECT_THROW(kiln::cpu::selected_isa(), std::runtime_error);
        try {
            kiln::cpu::selected_isa();
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find("avx1024"), std::string::npos) << e.what();
        }
    }
    for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (kiln::cpu::isa_supported(isa)) continue;
        ScopedEnv env(std::string(kiln::cpu::isa_name(isa)));
        EXPECT_THROW(kiln::cpu::selected_isa(), std::runtime_error) << kiln::cpu::isa_name(isa);
    }
}

}  // namespace
