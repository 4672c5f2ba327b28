// Packed weights and the packed GEMM kernels: repacking is lossless (every row unpacks to
// its original blocks), every instruction set's kernel matches the scalar reference, and
// the products match a double-precision product of the dequantized weights within the
// error of 8-bit activations (one pass) or ~16-bit activations (precise: two passes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/gemm_bf16_matrix.h"
#include "backends/cpu/kernels/gemm_float.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_repack.h"

using kiln::Type;
using kiln::cpu::Isa;

namespace {

struct Weights {
    std::vector<uint8_t> rows;    // row-major blocks
    std::vector<uint8_t> packed;  // x16 layout
    std::vector<double> deq;      // dequantized [N][K]
};

Weights make_weights(Type t, int64_t K, int64_t N, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> f(static_cast<size_t>(K * N));
    for (auto& v : f) v = nd(rng);
    Weights w;
    const size_t rb = kiln::row_size(t, K);
    w.rows.resize(rb * N);
    kiln::quantize(t, f.data(), w.rows.data(), N, K);
    w.packed.resize(kiln::packed_size(t, K, N));
    kiln::pack_rows(t, w.rows.data(), rb, w.packed.data(), K, N);
    std::vector<float> row(K);
    for (int64_t n = 0; n < N; ++n) {
        kiln::dequantize_row(t, w.rows.data() + n * rb, row.data(), K);
        for (int64_t k = 0; k < K; ++k) w.deq.push_back(row[k]);
    }
    return w;
}

std::vector<float> make_acts(int64_t K, int64_t M, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(K * M));
    for (auto& v : x) v = nd(rng);
    x[3] = 40.0f;  // an outlier, as real activations have
    return x;
}

std::vector<Isa> packed_isas(Type t) {
    std::vector<Isa> v{Isa::Scalar};
    for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (kiln::cpu::isa_supported(isa) && kiln::cpu::packed_accelerated(t, isa)) v.push_back(isa);
    }
    return v;
}

// y[m][n] through one set of packed kernels.
// coarse: MatmulPrecision::Fast's plan (PackedKernels::coarse where the kernels have it).
std::vector<float> run_kernels(const kiln::cpu::PackedKernels& kernels, Type t, const Weights& w, const std::vector<float>& x, int64_t K,
                               int64_t N, int64_t M, bool precise, bool coarse = false) {
    const kiln::cpu::PackedPlan plan = kiln::cpu::packed_plan(kernels, K, precise, M, coarse);
    const kiln::cpu::PackedKernels& pk = *plan.k;
    const size_t tb = plan.tile_bytes;
    const int pairs = plan.pairs;
    std::vector<uint8_t> xq(kiln::cpu::packed_act_bytes(kernels, K, M, precise));
    for (int64_t m = 0; m < M; ++m) {
        const int64_t a = m * pairs;
        pk.quantize_act(x.data() + m * K, K, pk.offset, xq.data() + (a / plan.tile_rows) * tb,
                        static_cast<int>(a % plan.tile_rows), pairs == 2);
    }
    const int64_t y_stride = N + 5;  // strided output rows
    std::vector<float> y(static_cast<size_t>(y_stride * M), -1.0f);
    const size_t gb = kiln::row_size(t, K) * kiln::kPackRows;
    // The kernels' per-thread scratch (GemmTask::scratch), 64-byte aligned.
    std::vector<uint8_t> scratch(pk.gemm_scratch_bytes ? pk.gemm_scratch_bytes(K) + 64 : 0);
    uint8_t* scratch_at = scratch.empty() ? nullptr : scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    // Two calls over different group ranges, as two threads would split them.
    const int64_t groups = N / kiln::kPackRows, half = groups / 2;
    for (auto [g0, g1] : {std::pair<int64_t, int64_t>{0, half}, {half, groups}}) {
        if (g0 == g1) continue;
        pk.gemm(kiln::cpu::GemmTask{.K = K, .w = w.packed.data() + g0 * gb, .w_group_bytes = gb, .n_groups = g1 - g0,
                                    .x = xq.data(), .M = M, .pairs = pairs,
                                    .y = y.data() + g0 * kiln::kPackRows, .y_stride = y_stride, .scratch = scratch_at});
    }
    std::vector<float> out;
    for (int64_t m = 0; m < M; ++m) out.insert(out.end(), y.begin() + m * y_stride, y.begin() + m * y_stride + N);
    return out;
}

// y[m][n] through the packed kernels of one instruction set.
std::vector<float> run_gemm(Type t, Isa isa, const Weights& w, const std::vector<float>& x, int64_t K, int64_t N, int64_t M,
                            bool precise, bool coarse = false) {
    return run_kernels(*kiln::cpu::packed_kernels(t, isa), t, w, x, K, N, M, precise, coarse);
}

// The scalar kernels that compute what `isa`'s kernels compute. For F16/BF16 weights the scalar
// fast mode follows this CPU's float_gemm::fast_path (BF16 or FP16 products where the CPU has
// AVX-512 BF16 or FP16); the AVX2 float kernels have only the F32 path (AVX2 has no 16-bit
// float arithmetic), so their mirror is the scalar F32 path whatever the CPU.
// Batches (kMatrixUnitMinRows rows) take the BF16 matrix tiles where the CPU has AMX-BF16, on
// the AVX-512 side and in the scalar reference alike (gemm_bf16_matrix.h); the AVX2 kernels keep
// their own, so their mirror is the reference without those batch kernels.
const kiln::cpu::PackedKernels& scalar_mirror(Type t, Isa isa) {
    namespace fg = kiln::cpu::float_gemm;
    if ((t == Type::F16 || t == Type::BF16) && isa == Isa::Avx2) return *fg::detail::float_scalar(t, fg::FastPath::F32);
    const kiln::cpu::PackedKernels& s = *kiln::cpu::packed_kernels(t, Isa::Scalar);
    if (isa == Isa::Avx512 || isa == Isa::Scalar) return s;
    struct Plain {
        kiln::cpu::PackedKernels main, coarse;
    };
    static std::map<Type, Plain> plain;
    auto [it, fresh] = plain.try_emplace(t, Plain{s, s});
    if (fresh) {
        it->second.main = kiln::cpu::with_batch(s, nullptr, nullptr);
        if (s.coarse) {
            it->second.coarse = kiln::cpu::with_batch(*s.coarse, nullptr, nullptr);
            it->second.main.coarse = &it->second.coarse;
        }
    }
    return it->second.main;
}

double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        err += (got[i] - ref[i]) * (got[i] - ref[i]);
        norm += ref[i] * ref[i];
    }
    return std::sqrt(err / norm);
}
[[maybe_unused]] double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {  // (used by the x86 tests only)
    return rel_error(got, std::vector<double>(ref.begin(), ref.end()));
}

// Relative error allowed against the double product of the dequantized weights.
double tolerance(Type t, bool precise, bool coarse = false) {
    if (t == Type::F16 || t == Type::BF16) {
        // fast: weights and activations rounded to BF16 (8-bit mantissas, ~0.3%); precise:
        // exact products, float sums.
        return precise ? 1e-5 : 6e-3;
    }
    // 8-bit activations: ~0.5% relative error; with the residual pass ~16 bits. A d per 256
    // elements (coarse K-quant batches) spreads make_acts' outlier over its super-block: up to
    // 2.5% on the rows that have it.
    if (coarse) return 3.5e-2;
    return precise ? 2e-4 : 1.5e-2;
}

// Row lengths to test: the given ones for 32-element blocks; K-quants (256-element
// super-blocks) take 1, 3 and 8 super-blocks instead.
std::vector<int64_t> test_ks(Type t, std::initializer_list<int64_t> ks) {
    if (kiln::traits(t).block_size != kiln::QK_K) return ks;
    return {256, 768, 2048};
}

class PackedGemm : public ::testing::TestWithParam<Type> {};

TEST_P(PackedGemm, RepackIsLossless) {
    const Type t = GetParam();
    for (int64_t K : test_ks(t, {32, 96, 256})) {
        const int64_t N = 48;
        Weights w = make_weights(t, K, N, 7);
        const size_t rb = kiln::row_size(t, K);
        std::vector<uint8_t> row(rb);
        for (int64_t n = 0; n < N; ++n) {
            kiln::unpack_row(t, w.packed.data(), K, n, row.data());
            ASSERT_EQ(0, std::memcmp(row.data(), w.rows.data() + n * rb, rb)) << "row " << n << " K " << K;
        }
    }
    EXPECT_FALSE(kiln::can_pack(t, 64, 40));  // rows not a multiple of 16
    EXPECT_THROW(kiln::pack_rows(t, nullptr, 0, nullptr, 64, 40), std::invalid_argument);
}

TEST_P(PackedGemm, MatchesDoubleReferenceOnEveryIsa) {
    const Type t = GetParam();
    for (int64_t K : test_ks(t, {32, 160, 2048})) {
        const int64_t N = 48;
        const Weights w = make_weights(t, K, N, static_cast<uint32_t>(K));
        // 33 rows: the AVX2 float kernels cut K into slabs; 200: and the rows into 3 chunks
        for (int64_t M : {1, 2, 3, 8, 9, 17, 33, 200}) {
            const std::vector<float> x = make_acts(K, M, static_cast<uint32_t>(M * 31 + K));
            // auto's 8-bit prompts, precise, fast (coarse)
            for (auto [precise, coarse] : {std::pair{false, false}, {true, false}, {false, true}}) {
                for (Isa isa : packed_isas(t)) {
                    const std::vector<float> ref_isa = run_kernels(scalar_mirror(t, isa), t, w, x, K, N, M, precise, coarse);
                    const std::vector<float> y = isa == Isa::Scalar ? ref_isa : run_gemm(t, isa, w, x, K, N, M, precise, coarse);
                    double err = 0, err_isa = 0, norm = 0;
                    for (int64_t m = 0; m < M; ++m) {
                        for (int64_t n = 0; n < N; ++n) {
                            double ref = 0;
                            for (int64_t k = 0; k < K; ++k) ref += w.deq[n * K + k] * x[m * K + k];
                            const double got = y[m * N + n];
                            err += (got - ref) * (got - ref);
                            err_isa += (got - ref_isa[m * N + n]) * (got - ref_isa[m * N + n]);
                            norm += ref * ref;
                        }
                    }
                    const double rel = std::sqrt(err / norm), rel_isa = std::sqrt(err_isa / norm);
                    const char* name = kiln::cpu::isa_name(isa).data();
                    EXPECT_LT(rel, tolerance(t, precise, coarse && M > kiln::cpu::kActTile)) << name << " K " << K << " M " << M << " precise " << precise << " coarse " << coarse;
                    EXPECT_LT(rel_isa, 1e-5) << name << " vs scalar, K " << K << " M " << M;
                }
            }
        }
    }
}

// coarse: fast precision's batches (K-quants: activations scaled per super-block).
// K: one run of 16 blocks (the AVX-512 quantizer's batches), and 4 with 8 blocks past them; one
// block all zeros (d = 0).
TEST_P(PackedGemm, ActivationQuantizationIsIdenticalAcrossIsas) {
    const Type t = GetParam();
    for (const int64_t K : {512, 2304}) {
        std::vector<float> x = make_acts(K, 1, 5);
        const int64_t zero = std::min<int64_t>(19, K / 32 - 5);
        std::fill(x.begin() + 32 * zero, x.begin() + 32 * (zero + 1), 0.0f);
        for (auto [precise, coarse] : {std::pair{false, false}, {true, false}, {false, true}}) {
            // (not one row: a lone row may take kernels of a layout of its own, PackedKernels::single,
            // which the AVX-512 F32 kernels have and the scalar mirror has not; they copy the row as it is)
            const int64_t rows = coarse ? 9 : 2;
            for (Isa isa : packed_isas(t)) {
                const auto plan_s = kiln::cpu::packed_plan(scalar_mirror(t, isa), K, precise, rows, coarse);
                const size_t tb = plan_s.tile_bytes;
                std::vector<uint8_t> ref(tb, 0), got(tb, 0);
                const auto& pks = *plan_s.k;
                for (int col : {0, 2, 6}) pks.quantize_act(x.data(), K, pks.offset, ref.data(), col, plan_s.pairs == 2);
                const auto plan = kiln::cpu::packed_plan(*kiln::cpu::packed_kernels(t, isa), K, precise, rows, coarse);
                ASSERT_EQ(plan.tile_bytes, tb);
                for (int col : {0, 2, 6}) plan.k->quantize_act(x.data(), K, plan.k->offset, got.data(), col, plan.pairs == 2);
                EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), tb)) << kiln::cpu::isa_name(isa) << " K " << K << " precise " << precise << " coarse " << coarse;
            }
        }
    }
}

// K-quant products of more than one tile in fast precision take activations with one d per 256
// elements (as llama.cpp's Q8_K), written into each of its 8 blocks; a single tile, and auto's
// prompts, keep a d per block.
TEST(PackedGemmKQuants, FastBatchActivationsShareOneScalePerSuperBlock) {
    const int64_t K = 512;
    const std::vector<float> x = make_acts(K, 1, 9);
    for (Type t : {Type::Q4_K, Type::Q6_K}) {
        for (Isa isa : packed_isas(t)) {
            for (auto [rows, coarse] : {std::pair<int64_t, bool>{1, true}, {9, false}, {9, true}}) {
                const bool super = rows > 1 && coarse;
                const auto plan = kiln::cpu::packed_plan(*kiln::cpu::packed_kernels(t, isa), K, false, rows, coarse);
                std::vector<uint8_t> tile(plan.tile_bytes, 0);
                plan.k->quantize_act(x.data(), K, plan.k->offset, tile.data(), 3, false);
                auto d = [&](int64_t b) { return reinterpret_cast<const float*>(tile.data() + b * kiln::cpu::kActBlockBytes + 32 * kiln::cpu::kActTile)[3]; };
                int differing = 0;
                for (int64_t b = 0; b < K / 32; ++b) differing += d(b) != d(b - b % 8);
                if (!super) {
                    EXPECT_GT(differing, 8) << kiln::cpu::isa_name(isa);
                } else {
                    EXPECT_EQ(differing, 0) << kiln::cpu::isa_name(isa);
                }
                float amax = 0;  // of the second super-block
                for (int64_t i = 256; i < 512; ++i) amax = std::max(amax, std::fabs(x[i]));
                EXPECT_EQ(super, d(8) == amax / 127.0f) << kiln::cpu::isa_name(isa);
            }
        }
    }
}

// Every fast-mode path of the F16/BF16 kernels (the CPU decides which one runs, see
// float_gemm::fast_path), SIMD against its scalar mirror and the double product.
TEST(PackedGemmFloat, EveryFastPathMatchesItsReference) {
    namespace fg = kiln::cpu::float_gemm;
    for (Type t : {Type::F16, Type::BF16}) {
        for (fg::FastPath p : {fg::FastPath::F32, fg::FastPath::Bf16, fg::FastPath::Half}) {
            const kiln::cpu::PackedKernels* ref_k = fg::detail::float_scalar(t, p);
            if (!ref_k) continue;  // BF16 has no Half path
            std::vector<const kiln::cpu::PackedKernels*> simd;
#if defined(KILN_ARCH_X86)
            if (kiln::cpu::isa_supported(Isa::Avx512)) simd.push_back(fg::detail::float_avx512(t, p, kiln::cpu::cpu_features()));
#endif
            // 800: 25 blocks, i.e. three slabs of 8 and one of 1 (gemm_fast, gemm_half)
            for (int64_t K : {160, 800, 1024}) {
                const int64_t N = 48;
                const Weights w = make_weights(t, K, N, static_cast<uint32_t>(K + 3));
                // Half, 400 rows of 1024: more than one L2 slice of activations (gemm_half)
                const bool slices = K == 1024 && p == fg::FastPath::Half;
                for (int64_t M : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{17}, slices ? int64_t{400} : int64_t{9}}) {
                    const std::vector<float> x = make_acts(K, M, static_cast<uint32_t>(M * 7 + K));
                    std::vector<double> ref(static_cast<size_t>(M * N));
                    for (int64_t m = 0; m < M; ++m) {
                        for (int64_t n = 0; n < N; ++n) {
                            for (int64_t k = 0; k < K; ++k) ref[m * N + n] += w.deq[n * K + k] * x[m * K + k];
                        }
                    }
                    const std::vector<float> y_ref = run_kernels(*ref_k, t, w, x, K, N, M, false);
                    const double tol = p == fg::FastPath::F32 ? 1e-5 : 6e-3;
                    EXPECT_LT(rel_error(y_ref, ref), tol) << kiln::type_name(t) << " path " << int(p) << " K " << K << " M " << M;
                    for (const kiln::cpu::PackedKernels* k : simd) {
                        if (!k) continue;  // this CPU lacks the path's instructions
                        const std::vector<float> y = run_kernels(*k, t, w, x, K, N, M, false);
                        std::vector<double> yr(y_ref.begin(), y_ref.end());
                        EXPECT_LT(rel_error(y, yr), 1e-5) << kiln::type_name(t) << " path " << int(p) << " K " << K << " M " << M;
                    }
                }
            }
        }
    }
}

#if defined(KILN_ARCH_X86)
// The q4_0 and Q6_K AVX-512 tiles come in two builds, quants unpacked by shifts and masks or by
// GFNI (gemm_avx512gfni.cpp, gemm_kquants_avx512gfni.cpp); packed_kernels picks by CPU. Both must
// give identical bits (same integer sums), so the one this CPU does not run is still checked
// against the other. M 1 and 2: generation tiles; 7 and 8: the prompt tiles of few rows; 19: the
// decoded groups (K-quants) or several tiles.
TEST(PackedGemmGfni, TilesMatchShiftTilesExactly) {
    if (!kiln::cpu::isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 VNNI here";
    kiln::cpu::CpuFeatures f = kiln::cpu::cpu_features();
    f.gfni = false;
    f.amx_int8 = false;  // the VNNI tiles (the AMX ones are checked against them below)
    const kiln::cpu::PackedKernels* shift[2] = {kiln::cpu::detail::packed_avx512(Type::Q4_0, f),
                                                kiln::cpu::detail::packed_kquants_avx512(Type::Q6_K, f)};
    ASSERT_NE(shift[0], nullptr);
    ASSERT_NE(shift[1], nullptr);
    if (!kiln::cpu::cpu_features().gfni) GTEST_SKIP() << "no GFNI here";
    const kiln::cpu::PackedKernels* gfni[2] = {kiln::cpu::detail::packed_q4_0_avx512gfni(),
                                               kiln::cpu::detail::packed_q6_K_avx512gfni()};
    for (int i = 0; i < 2; ++i) {
        const Type t = i == 0 ? Type::Q4_0 : Type::Q6_K;
        ASSERT_NE(shift[i], gfni[i]);
        for (int64_t K : i == 0 ? std::vector<int64_t>{32, 96, 2048} : std::vector<int64_t>{256, 512, 2048}) {
            const int64_t N = 64;
            const Weights w = make_weights(t, K, N, static_cast<uint32_t>(K + 11));
            for (int64_t M : {1, 2, 7, 8, 19}) {
                const std::vector<float> x = make_acts(K, M, static_cast<uint32_t>(M + K));
                for (bool precise : {false, true}) {
                    const std::vector<float> a = run_kernels(*shift[i], t, w, x, K, N, M, precise);
                    const std::vector<float> b = run_kernels(*gfni[i], t, w, x, K, N, M, precise);
                    ASSERT_EQ(a.size(), b.size());
                    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                        << kiln::type_name(t) << " K " << K << " M " << M << " precise " << precise;
                }
            }
        }
    }
}

// The wide tiles (two weight groups per tile, gemm_wide; chosen on Zen 5) against the
// one-group tiles: the same integer sums added in the same order, so identical bits. Every
// CPU with AVX-512 VNNI runs both here, whichever packed_kernels picks for it. N = 80: five
// groups, split 2 + 3 by run_kernels, so pairs and an odd last group; M below kWideMinRows
// (gemm_wide hands it to the one-group path) and above, with partial tiles.
TEST(PackedGemmWide, MatchesOneGroupTilesExactly) {
    if (!kiln::cpu::isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 VNNI here";
    for (Type t : {Type::Q4_0, Type::Q8_0}) {
        for (bool gfni : {false, true}) {
            if (gfni && (t != Type::Q4_0 || !kiln::cpu::cpu_features().gfni)) continue;
            kiln::cpu::CpuFeatures f = kiln::cpu::cpu_features();
            f.gfni = gfni;
            f.zen4 = false;  // Zen 4 never takes the GFNI tiles; check them here all the same
            f.zen5 = false;
            f.amx_int8 = false;
            const kiln::cpu::PackedKernels* one = kiln::cpu::detail::packed_avx512(t, f);
            f.zen5 = true;
            const kiln::cpu::PackedKernels* wide = kiln::cpu::detail::packed_avx512(t, f);
            ASSERT_NE(one, nullptr);
            ASSERT_NE(one, wide);
            for (int64_t K : {32, 96, 2048}) {
                const int64_t N = 80;
                const Weights w = make_weights(t, K, N, static_cast<uint32_t>(K + 13));
                for (int64_t M : {1, 9, 37, 64, 70, 133}) {
                    const std::vector<float> x = make_acts(K, M, static_cast<uint32_t>(M * 3 + K));
                    for (bool precise : {false, true}) {
                        const std::vector<float> a = run_kernels(*one, t, w, x, K, N, M, precise);
                        const std::vector<float> b = run_kernels(*wide, t, w, x, K, N, M, precise);
                        ASSERT_EQ(a.size(), b.size());
                        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                            << kiln::type_name(t) << " gfni " << gfni << " K " << K << " M " << M << " precise " << precise;
                    }
                }
            }
        }
    }
}

// The AMX int8 tiles (gemm_avx512amx.cpp, gemm_kquants_avx512amx.cpp; chosen where
// CpuFeatures::amx_int8) against the VNNI tiles: the same int32 block sums scaled and added in
// the same order, so identical bits, on both sides of kMatrixUnitMinRows (precise mode doubles
// the rows), with an odd number of activation tiles, partial last tiles, odd and even block
// counts, an odd number of groups per call (N = 80: run_kernels splits 2 + 3), and for Q4_K
// both activation scalings (coarse: fast mode's d per super-block).
TEST(PackedGemmAmx, MatchesVnniTilesExactly) {
    if (!kiln::cpu::isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 here";
    if (!kiln::cpu::cpu_features().amx_int8) GTEST_SKIP() << "no AMX-INT8 here (or KILN_AMX=0)";
    for (Type t : {Type::Q4_0, Type::Q8_0, Type::Q4_K}) {
        const bool kq = t == Type::Q4_K;
        kiln::cpu::CpuFeatures f = kiln::cpu::cpu_features();
        f.amx_int8 = false;
        const kiln::cpu::PackedKernels* vnni = kq ? kiln::cpu::detail::packed_kquants_avx512(t, f) : kiln::cpu::detail::packed_avx512(t, f);
        // the VNNI kernels with the AMX int8 kernels as batch kernels (before packed_kernels
        // gives the batches of fast mode to the BF16 tiles where the CPU has them)
        const kiln::cpu::PackedKernels* amx = kq ? kiln::cpu::detail::packed_kquants_avx512(t, kiln::cpu::cpu_features())
                                                 : kiln::cpu::detail::packed_avx512(t, kiln::cpu::cpu_features());
        const kiln::cpu::PackedKernels* int8 = kq ? kiln::cpu::detail::packed_kquants_amx(t) : kiln::cpu::detail::packed_amx(t);
        ASSERT_NE(vnni, nullptr);
        ASSERT_NE(int8, nullptr);
        ASSERT_EQ(amx->batch, int8);
        ASSERT_EQ(amx->batch_pairs, int8);
        // precise mode's residual pairs keep them where the BF16 tiles take the other batches
        ASSERT_EQ(kiln::cpu::packed_kernels(t, Isa::Avx512)->batch_pairs, int8);
        const std::vector<int64_t> ks = kq ? std::vector<int64_t>{256, 768, 2048} : std::vector<int64_t>{32, 96, 160, 2048};
        for (int64_t K : ks) {
            const int64_t N = 80;
            const Weights w = make_weights(t, K, N, static_cast<uint32_t>(K + 17));
            for (int64_t M : {1, 8, 9, 15, 16, 17, 24, 31, 32, 33, 64, 133}) {
                const std::vector<float> x = make_acts(K, M, static_cast<uint32_t>(M * 5 + K));
                for (auto [precise, coarse] : {std::pair{false, false}, {true, false}, {false, true}}) {
                    if (coarse && !kq) continue;
                    const kiln::cpu::PackedPlan plan = kiln::cpu::packed_plan(*amx, K, precise, M, coarse);
                    EXPECT_EQ(plan.tile_rows == kiln::cpu::kMatrixTileRows, M * plan.pairs >= kiln::cpu::kMatrixUnitMinRows) << M;
                    const std::vector<float> a = run_kernels(*vnni, t, w, x, K, N, M, precise, coarse);
                    const std::vector<float> b = run_kernels(*amx, t, w, x, K, N, M, precise, coarse);
                    ASSERT_EQ(a.size(), b.size());
                    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                        << kiln::type_name(t) << " K " << K << " M " << M << " precise " << precise << " coarse " << coarse;
                }
            }
        }
    }
}

// The BF16 matrix tiles (gemm_bf16_matrix_avx512amx.cpp): the batch kernels of fast mode for
// every type they decode, where CpuFeatures::amx_bf16, from kMatrixUnitMinRows rows; against
// their reference (gemm_bf16_matrix.cpp: the core's dequantize_row, rounded to BF16, float sums
// in element order), which differs only in the order of the float sums: row counts around the
// threshold, odd tile and group counts (N = 80: run_kernels splits the 5 groups 2 + 3), partial
// last tiles, K of 1 to 64 blocks.
TEST(PackedGemmAmx, Bf16MatrixTilesMatchTheirReference) {
    if (!kiln::cpu::isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 here";
    if (!kiln::cpu::cpu_features().amx_bf16) GTEST_SKIP() << "no AMX-BF16 here (or KILN_AMX=0)";
    namespace bm = kiln::cpu::bf16_matrix;
    for (Type t : {Type::Q4_0, Type::Q8_0, Type::F16, Type::BF16, Type::Q4_K, Type::Q6_K}) {
        const kiln::cpu::PackedKernels* k = kiln::cpu::packed_kernels(t, Isa::Avx512);
        ASSERT_EQ(k->batch, bm::detail::kernels_amx(t)) << kiln::type_name(t);
        ASSERT_NE(k->batch, nullptr);
        const kiln::cpu::PackedKernels& ref = *bm::detail::kernels_scalar(t);
        for (int64_t K : test_ks(t, {32, 96, 2048})) {
            const int64_t N = 80;
            const Weights w = make_weights(t, K, N, static_cast<uint32_t>(K + 19));
            for (int64_t M : {15, 16, 31, 32, 33, 40, 133}) {
                for (bool coarse : {false, true}) {
                    const bool tiles = kiln::cpu::packed_plan(*k, K, false, M, coarse).k == k->batch;
                    EXPECT_EQ(tiles, M >= kiln::cpu::kMatrixUnitMinRows) << kiln::type_name(t) << " M " << M << " coarse " << coarse;
                    if (!tiles) continue;
                    const std::vector<float> x = make_acts(K, M, static_cast<uint32_t>(M * 7 + K));
                    const std::vector<float> a = run_kernels(*k, t, w, x, K, N, M, false, coarse);
                    const std::vector<float> b = run_kernels(ref, t, w, x, K, N, M, false);
                    ASSERT_EQ(a.size(), b.size());
                    EXPECT_LT(rel_error(a, b), 1e-6) << kiln::type_name(t) << " K " << K << " M " << M;
                }
            }
        }
    }
    // Two activation slices (about 3 MiB of 16-row tiles: 12 tiles of K = 8192), the second of one tile.
    for (Type t : {Type::Q4_K, Type::F16}) {
        const int64_t K = 8192, N = 48, M = 200;
        const Weights w = make_weights(t, K, N, 23);
        const std::vector<float> x = make_acts(K, M, 29);
        const std::vector<float> a = run_kernels(*kiln::cpu::packed_kernels(t, Isa::Avx512), t, w, x, K, N, M, false);
        const std::vector<float> b = run_kernels(*bm::detail::kernels_scalar(t), t, w, x, K, N, M, false);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_LT(rel_error(a, b), 3e-6) << kiln::type_name(t) << " K " << K << " M " << M;  // float sums 4x longer
    }
}
#endif

// The 16-bit float layouts pack blocks of 32 columns.
TEST(PackedGemmFloat, NeedsWholeBlocksOfColumns) {
    for (Type t : {Type::F16, Type::BF16}) {
        EXPECT_TRUE(kiln::can_pack(t, 64, 32));
        EXPECT_FALSE(kiln::can_pack(t, 48, 32));
        EXPECT_EQ(kiln::packed_size(t, 64, 32), kiln::row_size(t, 64) * 32);
    }
}

INSTANTIATE_TEST_SUITE_P(Types, PackedGemm, ::testing::Values(Type::Q4_0, Type::Q8_0, Type::F16, Type::BF16, Type::Q4_K, Type::Q6_K),
                         [](const auto& p) { return std::string(kiln::type_name(p.param)); });

}  // namespace
