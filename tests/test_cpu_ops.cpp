// Every graph op of the CPU backend, computed through Graph + Scheduler +
// CpuBackend and compared against naive double-precision references written
// here: odd row lengths, non-contiguous views as inputs, broadcast shapes,
// 1/2/3 threads; mul_mat for every weight type in both precision modes and on
// every instruction set this machine runs.
//
// Tolerances (each documented where it is set) follow from what the op does in
// float32: element-wise ops whose result is one correctly rounded float
// operation (add, mul, scale) must match exactly; ops with transcendental
// functions or sums allow a few float32 ulps; mul_mat allows what quantizing
// the activations to the weight type's vec_dot format loses.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/attn_kernels.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/scheduler.h"
#include "core/graph.h"
#include "core/kv_layout.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_repack.h"
#include "core/types.h"
#include "test_support.h"

namespace {

using kiln::test::dequantize_rows;
using kiln::test::quantize_rows;
using kiln::test::randn;

using kiln::AttentionParams;
using kiln::Graph;
using kiln::MatmulPrecision;
using kiln::Op;
using kiln::RopeMode;
using kiln::Scheduler;
using kiln::Tensor;
using kiln::Type;
using kiln::cpu::CpuBackend;
using kiln::cpu::CpuBackendOptions;
using kiln::cpu::Isa;
using Shape = std::array<int64_t, 4>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
const int kThreads[] = {1, 2, 3};

int64_t numel(const Shape& ne) { return ne[0] * ne[1] * ne[2] * ne[3]; }
int64_t lin(const Shape& ne, int64_t i0, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
    return i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3));
}
std::string shape_str(const Shape& ne) {
    return "[" + std::to_string(ne[0]) + "," + std::to_string(ne[1]) + "," + std::to_string(ne[2]) + "," +
           std::to_string(ne[3]) + "]";
}

// How an F32 input is stored: the op sees the same logical values either way.
enum class Layout {
    Contiguous,
    Padded,    // rows of ne0 + 3 floats, the view starting one float in (nb[1] > row size)
    Permuted,  // stored with dims 1 and 2 swapped (nb[2] < nb[1]), as a head-major q/k would be
};
const char* layout_name(Layout l) {
    switch (l) {
        case Layout::Contiguous: return "contiguous";
        case Layout::Padded: return "padded";
        case Layout::Permuted: return "permuted";
    }
    return "?";
}
const Layout kLayouts[] = {Layout::Contiguous, Layout::Padded, Layout::Permuted};

// Sets (or with nullopt unsets) KILN_CPU for the scope, restoring the old value.
class ScopedIsa {
public:
    explicit ScopedIsa(std::optional<std::string> value) {
        if (const char* old = std::getenv("KILN_CPU")) old_ = std::string(old);
        set(value);
    }
    ~ScopedIsa() { set(old_); }
    ScopedIsa(const ScopedIsa&) = delete;
    ScopedIsa& operator=(const ScopedIsa&) = delete;

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

// The instruction sets to run mul_mat on: every supported one if KILN_CPU can
// switch them in-process (selected_isa() reads it on each call), else only the
// one selected for this process.
std::vector<Isa> isas_to_test() {
    std::vector<Isa> out;
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!kiln::cpu::isa_supported(isa)) continue;
        ScopedIsa env(std::string(kiln::cpu::isa_name(isa)));
        if (kiln::cpu::selected_isa() == isa) out.push_back(isa);
    }
    if (out.empty()) out.push_back(kiln::cpu::selected_isa());
    return out;
}

// One graph on one CPU backend: leaves hold data owned here; inputs are filled
// after allocation; every computed node is poisoned with NaN before compute so
// that rows an op fails to write cannot pass by holding stale results.
class Harness {
public:
    explicit Harness(int n_threads, MatmulPrecision p = MatmulPrecision::Fast)
        : backend_(CpuBackendOptions{.n_threads = n_threads, .matmul_precision = p}), sched_({&backend_}, nullptr) {}

    Graph g;

    void* hold(size_t bytes) {
        store_.emplace_back(bytes + 64, uint8_t{0});
        return store_.back().data();
    }

    void* hold_copy(const std::vector<uint8_t>& bytes) {
        void* p = hold(bytes.size());
        std::memcpy(p, bytes.data(), bytes.size());
        return p;
    }

    // F32 leaf with logical values v (ne0 fastest), stored per layout.
    Tensor* f32(Shape ne, const std::vector<float>& v, Layout layout = Layout::Contiguous, std::string name = "x") {
        EXPECT_EQ(static_cast<int64_t>(v.size()), numel(ne));
        if (layout == Layout::Contiguous) {
            auto* d = static_cast<float*>(hold(v.size() * sizeof(float)));
            std::copy(v.begin(), v.end(), d);
            return g.leaf(Type::F32, ne, std::move(name), d);
        }
        if (layout == Layout::Padded) {
            const int64_t row = ne[0] + 3;
            const Shape sne{row, ne[1], ne[2], ne[3]};
            auto* d = static_cast<float*>(hold(static_cast<size_t>(numel(sne)) * sizeof(float)));
            std::fill(d, d + numel(sne), std::numeric_limits<float>::quiet_NaN());
            for (int64_t i3 = 0; i3 < ne[3]; ++i3)
                for (int64_t i2 = 0; i2 < ne[2]; ++i2)
                    for (int64_t i1 = 0; i1 < ne[1]; ++i1)
                        for (int64_t i0 = 0; i0 < ne[0]; ++i0) d[lin(sne, i0 + 1, i1, i2, i3)] = v[lin(ne, i0, i1, i2, i3)];
            Tensor* s = g.leaf(Type::F32, sne, name + "_storage", d);
            const size_t rb = static_cast<size_t>(row) * sizeof(float);
            return g.view(s, ne, {sizeof(float), rb, rb * ne[1], rb * ne[1] * ne[2]}, sizeof(float), name);
        }
        // Permuted: storage [ne0, ne2, ne1, ne3].
        const Shape sne{ne[0], ne[2], ne[1], ne[3]};
        auto* d = static_cast<float*>(hold(v.size() * sizeof(float)));
        for (int64_t i3 = 0; i3 < ne[3]; ++i3)
            for (int64_t i2 = 0; i2 < ne[2]; ++i2)
                for (int64_t i1 = 0; i1 < ne[1]; ++i1)
                    for (int64_t i0 = 0; i0 < ne[0]; ++i0) d[lin(sne, i0, i2, i1, i3)] = v[lin(ne, i0, i1, i2, i3)];
        Tensor* s = g.leaf(Type::F32, sne, name + "_storage", d);
        const size_t rb = static_cast<size_t>(ne[0]) * sizeof(float);
        return g.view(s, ne, {sizeof(float), rb * ne[2], rb, rb * ne[1] * ne[2]}, 0, name);
    }

    // 2-D leaf of any reference type: rows of v quantized with kiln::quantize.
    // row_stride > 1 stores the rows that far apart and returns a strided view.
    Tensor* typed(Type t, int64_t ne0, int64_t rows, const std::vector<float>& v, int row_stride = 1,
                  std::string name = "w") {
        std::vector<uint8_t> q(kiln::row_size(t, ne0) * static_cast<size_t>(rows));
        kiln::quantize(t, v.data(), q.data(), rows, ne0);
        return typed_q(t, ne0, rows, q, row_stride, std::move(name));
    }
    // The same from rows already in type t.
    Tensor* typed_q(Type t, int64_t ne0, int64_t rows, const std::vector<uint8_t>& q, int row_stride = 1,
                    std::string name = "w") {
        const size_t rb = kiln::row_size(t, ne0);
        auto* d = static_cast<uint8_t*>(hold(rb * static_cast<size_t>(rows * row_stride)));
        std::fill(d, d + rb * static_cast<size_t>(rows * row_stride), uint8_t{0x7f});
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(d + static_cast<size_t>(r * row_stride) * rb, q.data() + static_cast<size_t>(r) * rb, rb);
        }
        if (row_stride == 1) return g.leaf(t, {ne0, rows, 1, 1}, std::move(name), d);
        Tensor* s = g.leaf(t, {ne0, rows * row_stride, 1, 1}, name + "_storage", d);
        return g.view(s, {ne0, rows, 1, 1}, {kiln::traits(t).type_size, rb * row_stride, rb * row_stride * rows,
                                             rb * row_stride * rows},
                      0, name);
    }

    Tensor* i32(const std::vector<int32_t>& v, std::string name = "ids") {
        auto* d = static_cast<int32_t*>(hold(v.size() * sizeof(int32_t)));
        std::copy(v.begin(), v.end(), d);
        return g.leaf(Type::I32, {static_cast<int64_t>(v.size()), 1, 1, 1}, std::move(name), d);
    }

    // Graph inputs (memory from the scheduler), filled after allocate().
    Tensor* input_i32(const std::vector<int32_t>& v, std::string name = "inp_ids") {
        Tensor* t = g.input(Type::I32, {static_cast<int64_t>(v.size()), 1, 1, 1}, std::move(name));
        std::vector<uint8_t> bytes(v.size() * sizeof(int32_t));
        std::memcpy(bytes.data(), v.data(), bytes.size());
        inputs_.emplace_back(t, std::move(bytes));
        return t;
    }
    Tensor* input_f32(Shape ne, const std::vector<float>& v, std::string name = "inp") {
        Tensor* t = g.input(Type::F32, ne, std::move(name));
        std::vector<uint8_t> bytes(v.size() * sizeof(float));
        std::memcpy(bytes.data(), v.data(), bytes.size());
        inputs_.emplace_back(t, std::move(bytes));
        return t;
    }

    void compute() {
        sched_.allocate(g);
        for (Tensor* n : g.nodes()) {
            if (!kiln::op_aliases_src0(n->op)) std::memset(n->data, 0xff, n->nbytes());  // NaN in every float
        }
        for (auto& [t, bytes] : inputs_) std::memcpy(t->data, bytes.data(), bytes.size());
        sched_.compute(g);
    }

    CpuBackend& backend() { return backend_; }

private:
    CpuBackend backend_;
    Scheduler sched_;
    std::deque<std::vector<uint8_t>> store_;
    std::vector<std::pair<Tensor*, std::vector<uint8_t>>> inputs_;
};

// Logical values of an F32 tensor (any strides).
std::vector<float> read(const Tensor* t) {
    EXPECT_EQ(t->type, Type::F32);
    std::vector<float> out(static_cast<size_t>(t->nelements()));
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
                const auto* r = reinterpret_cast<const float*>(t->row(i1, i2, i3));
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) out[static_cast<size_t>(lin(t->ne, i0, i1, i2, i3))] = r[i0];
            }
    return out;
}

// |got - want| <= atol + rtol * |want| everywhere (NaN never passes; equal infinities do).
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                                 double rtol) {
    if (got.size() != want.size()) {
        return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
    }
    size_t bad = 0;
    std::ostringstream first;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i], w = want[i];
        if (g == w) continue;
        const double err = std::fabs(g - w);
        const bool ok = std::isfinite(g) && err <= atol + rtol * std::fabs(w);
        worst = std::max(worst, std::isfinite(err) ? err : INFINITY);
        if (!ok && bad++ < 5) first << "  [" << i << "] got " << g << " want " << w << "\n";
    }
    if (bad) {
        return ::testing::AssertionFailure() << bad << " of " << got.size() << " values off (atol " << atol
                                             << ", rtol " << rtol << ", worst abs err " << worst << "):\n"
                                             << first.str();
    }
    return ::testing::AssertionSuccess();
}

std::vector<float> dequant_rows(Type t, const std::vector<float>& v, int64_t ne0) {
    return dequantize_rows(t, quantize_rows(t, v, ne0), ne0);
}

// Row lengths a type allows: odd ones for the float types, odd block counts otherwise.
std::vector<int64_t> lengths(Type t) {
    const int64_t bs = kiln::traits(t).block_size;
    if (bs == 1) return {1, 7, 33, 257};
    if (bs == 32) return {32, 7 * 32};
    return {256, 3 * 256};
}

const Type kAllRefTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1,
                             Type::Q8_0, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::IQ4_NL};

class CpuOps : public ::testing::TestWithParam<int> {};  // param: threads

// ---- get_rows -------------------------------------------------------------------------

TEST_P(CpuOps, GetRows) {
    const int nth = GetParam();
    std::mt19937 rng(1);
    for (Type t : kAllRefTypes) {
        for (int64_t ne0 : lengths(t)) {
            const int64_t rows = 11;
            const auto q = quantize_rows(t, randn(rng, ne0 * rows), ne0);
            // The reference dequantizer is the definition: the gather must reproduce it exactly.
            const auto deq = dequantize_rows(t, q, ne0);
            for (int stride : {1, 2}) {
                for (bool as_input : {false, true}) {
                    SCOPED_TRACE(std::string(kiln::type_name(t)) + " ne0=" + std::to_string(ne0) +
                                 " stride=" + std::to_string(stride) + (as_input ? " ids=input" : " ids=leaf"));
                    const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 1};
                    Harness h(nth);
                    Tensor* table = h.typed_q(t, ne0, rows, q, stride);
                    Tensor* idt = as_input ? h.input_i32(ids) : h.i32(ids);
                    Tensor* out = h.g.get_rows(table, idt, "rows");
                    h.compute();
                    ASSERT_EQ(out->ne, (Shape{ne0, 6, 1, 1}));
                    std::vector<double> want;
                    for (int32_t id : ids) want.insert(want.end(), deq.begin() + id * ne0, deq.begin() + (id + 1) * ne0);
                    EXPECT_TRUE(close(read(out), want, 0, 0));
                }
            }
        }
    }
}

// ---- add / mul (broadcast) --------------------------------------------------------------

TEST_P(CpuOps, AddMulBroadcast) {
    const int nth = GetParam();
    std::mt19937 rng(2);
    // (one row: fewer rows than threads, so the threads split its columns; 1000 ends mid-line)
    for (auto [ne0, one_row] : {std::pair<int64_t, bool>{1, false}, {7, false}, {33, false}, {257, false}, {7, true},
                                {257, true}, {1000, true}}) {
        const Shape a_ne = one_row ? Shape{ne0, 1, 1, 1} : Shape{ne0, 3, 4, 2};
        // b shapes: same, per-row vector, per-column, scalar, partial broadcasts in dims 2/3, and
        // (when ne0 allows) a row shorter than a's that repeats along it.
        std::vector<Shape> b_shapes = {a_ne, {1, 1, 1, 1}};
        if (!one_row) {
            for (const Shape& b : {Shape{ne0, 1, 1, 1}, Shape{1, 3, 1, 1}, Shape{ne0, 3, 2, 1}, Shape{ne0, 1, 4, 2}, Shape{1, 3, 2, 2}}) {
                b_shapes.push_back(b);
            }
        }
        if (ne0 == 33) b_shapes.push_back({11, 3, 1, 1});
        if (ne0 == 1000) b_shapes.push_back({40, 1, 1, 1});
        if (ne0 == 7 && !one_row) b_shapes.push_back({7, 1, 1, 2});
        for (const Shape& b_ne : b_shapes) {
            for (Layout la : kLayouts) {
                for (Layout lb : {Layout::Contiguous, Layout::Padded}) {
                    SCOPED_TRACE("a " + shape_str(a_ne) + " " + layout_name(la) + ", b " + shape_str(b_ne) + " " +
                                 layout_name(lb));
                    const auto av = randn(rng, numel(a_ne));
                    const auto bv = randn(rng, numel(b_ne));
                    Harness h(nth);
                    Tensor* a = h.f32(a_ne, av, la, "a");
                    Tensor* b = h.f32(b_ne, bv, lb, "b");
                    Tensor* s = h.g.add(a, b, "sum");
                    Tensor* p = h.g.mul(a, b, "prod");
                    h.g.mark_output(s);
                    h.g.mark_output(p);
                    h.compute();
                    std::vector<double> ws, wp;
                    for (int64_t i3 = 0; i3 < a_ne[3]; ++i3)
                        for (int64_t i2 = 0; i2 < a_ne[2]; ++i2)
                            for (int64_t i1 = 0; i1 < a_ne[1]; ++i1)
                                for (int64_t i0 = 0; i0 < a_ne[0]; ++i0) {
                                    const double x = av[lin(a_ne, i0, i1, i2, i3)];
                                    const double y = bv[lin(b_ne, i0 % b_ne[0], i1 % b_ne[1], i2 % b_ne[2], i3 % b_ne[3])];
                                    // One float add/mul is correctly rounded, and so is the double result
                                    // rounded to float: they must be bit-identical.
                                    ws.push_back(static_cast<float>(x + y));
                                    wp.push_back(static_cast<float>(x * y));
                                }
                    EXPECT_TRUE(close(read(s), ws, 0, 0)) << "add";
                    EXPECT_TRUE(close(read(p), wp, 0, 0)) << "mul";
                }
            }
        }
    }
}

// ---- scale, unary and gated activations ------------------------------------------------

double ref_silu(double x) { return x / (1.0 + std::exp(-x)); }
double ref_gelu_tanh(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

TEST_P(CpuOps, ScaleAndActivations) {
    const int nth = GetParam();
    std::mt19937 rng(3);
    // (one row: fewer rows than threads, so the threads split its columns; 1000 ends mid-line)
    for (auto [ne0, one_row] : {std::pair<int64_t, bool>{1, false}, {7, false}, {33, false}, {257, false}, {257, true},
                                {1000, true}}) {
        for (Layout layout : kLayouts) {
            SCOPED_TRACE("ne0=" + std::to_string(ne0) + (one_row ? " one row " : " ") + layout_name(layout));
            const Shape ne = one_row ? Shape{ne0, 1, 1, 1} : Shape{ne0, 3, 2, 2};
            auto xv = randn(rng, numel(ne), 3.0f);
            auto uv = randn(rng, numel(ne));
            // Saturating inputs: exp overflow must give the limits, not NaN.
            const float extremes[] = {0.0f, -0.0f, 40.0f, -40.0f, 100.0f, -100.0f, 1e-30f, 700.0f, -700.0f};
            for (size_t i = 0; i < std::size(extremes) && i < xv.size(); ++i) xv[i * 3 % xv.size()] = extremes[i];
            Harness h(nth);
            Tensor* x = h.f32(ne, xv, layout, "x");
            Tensor* u = h.f32(ne, uv, layout == Layout::Permuted ? Layout::Padded : layout, "u");
            Tensor* sc = h.g.scale(x, -0.375f, "scale");
            Tensor* si = h.g.silu(x, "silu");
            Tensor* ge = h.g.gelu_tanh(x, "gelu");
            Tensor* sw = h.g.swiglu(x, u, "swiglu");
            Tensor* gg = h.g.geglu(x, u, "geglu");
            for (Tensor* t : {sc, si, ge, sw, gg}) h.g.mark_output(t);
            h.compute();
            std::vector<double> wsc, wsi, wge, wsw, wgg;
            for (size_t i = 0; i < xv.size(); ++i) {
                const double xi = xv[i], ui = uv[i];
                wsc.push_back(static_cast<float>(xi * -0.375));  // exact: one float multiply
                wsi.push_back(ref_silu(xi));
                wge.push_back(ref_gelu_tanh(xi));
                wsw.push_back(ref_silu(xi) * ui);
                wgg.push_back(ref_gelu_tanh(xi) * ui);
            }
            EXPECT_TRUE(close(read(sc), wsc, 0, 0)) << "scale";
            // float exp/tanh: a few ulps relative, plus an absolute floor for results near zero
            // (silu(-100) underflows to a denormal in double, -0 in float). gelu_tanh for x << 0
            // computes 1 + tanh(..) ~ 0 in float: an absolute error of |x|/2 * ulp(1) ~ 3e-7 at |x| ~ 10,
            // times |up| ~ 4 for geglu.
            EXPECT_TRUE(close(read(si), wsi, 1e-6, 4e-6)) << "silu";
            EXPECT_TRUE(close(read(ge), wge, 2e-6, 4e-6)) << "gelu_tanh";
            EXPECT_TRUE(close(read(sw), wsw, 1e-6, 6e-6)) << "swiglu";
            EXPECT_TRUE(close(read(gg), wgg, 6e-6, 6e-6)) << "geglu";
        }
    }
}

// ---- rms_norm ----------------------------------------------------------------------------

TEST_P(CpuOps, RmsNorm) {
    const int nth = GetParam();
    std::mt19937 rng(4);
    for (int64_t ne0 : {1, 7, 33, 257, 4099}) {
        for (Layout layout : kLayouts) {
            for (float eps : {1e-6f, 1e-5f, 0.5f}) {
                SCOPED_TRACE("ne0=" + std::to_string(ne0) + " " + layout_name(layout) + " eps=" + std::to_string(eps));
                const Shape ne{ne0, 3, 2, 1};
                auto xv = randn(rng, numel(ne), 2.0f);
                std::fill(xv.begin(), xv.begin() + ne0, 0.0f);  // an all-zero row: output 0, not NaN
                for (int64_t i = 0; i < ne0; ++i) xv[static_cast<size_t>(ne0 + i)] *= 1e3f;  // a large row
                Harness h(nth);
                Tensor* out = h.g.rms_norm(h.f32(ne, xv, layout), eps, "norm");
                h.compute();
                std::vector<double> want(xv.size());
                for (int64_t r = 0; r < numel(ne) / ne0; ++r) {
                    double ss = 0;
                    for (int64_t i = 0; i < ne0; ++i) ss += double(xv[r * ne0 + i]) * xv[r * ne0 + i];
                    const double s = 1.0 / std::sqrt(ss / ne0 + eps);
                    for (int64_t i = 0; i < ne0; ++i) want[r * ne0 + i] = xv[r * ne0 + i] * s;
                }
                // The scale factor is computed in double and rounded once; x * s rounds again: 2 ulps.
                EXPECT_TRUE(close(read(out), want, 0, 3e-7));
            }
        }
    }
}

// ---- rope ----------------------------------------------------------------------------------

std::vector<double> ref_rope(const std::vector<float>& x, Shape ne, const std::vector<int32_t>& pos, int n_dims,
                             RopeMode mode, double base, double freq_scale) {
    std::vector<double> out(x.begin(), x.end());
    const int half = n_dims / 2;
    for (int64_t it = 0; it < ne[2]; ++it)
        for (int64_t ih = 0; ih < ne[1]; ++ih) {
            const int64_t o = lin(ne, 0, ih, it);
            for (int i = 0; i < half; ++i) {
                const double theta = pos[it] * freq_scale * std::pow(base, -2.0 * i / n_dims);
                const int64_t a = mode == RopeMode::Neox ? i : 2 * i;
                const int64_t b = mode == RopeMode::Neox ? i + half : 2 * i + 1;
                const double x0 = x[o + a], x1 = x[o + b];
                out[o + a] = x0 * std::cos(theta) - x1 * std::sin(theta);
                out[o + b] = x0 * std::sin(theta) + x1 * std::cos(theta);
            }
        }
    return out;
}

TEST_P(CpuOps, Rope) {
    const int nth = GetParam();
    std::mt19937 rng(5);
    struct Case {
        int64_t head_dim;
        int n_dims;
    };
    // Full rotation, partial rotation (n_dims < head_dim: the rest passes through), the minimum.
    const Case cases[] = {{8, 8}, {64, 64}, {64, 32}, {66, 64}, {10, 2}, {128, 96}};
    const std::vector<int32_t> pos = {0, 1, 17, 4097, 123456};
    for (const Case& c : cases) {
        for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
            for (Layout layout : kLayouts) {
                for (auto [base, fscale] : {std::pair{10000.0f, 1.0f}, std::pair{1e6f, 0.25f}}) {
                    SCOPED_TRACE("head_dim=" + std::to_string(c.head_dim) + " n_dims=" + std::to_string(c.n_dims) +
                                 (mode == RopeMode::Neox ? " neox " : " normal ") + layout_name(layout) +
                                 " base=" + std::to_string(base));
                    const Shape ne{c.head_dim, 3, static_cast<int64_t>(pos.size()), 1};
                    const auto xv = randn(rng, numel(ne));
                    Harness h(nth);
                    Tensor* out =
                        h.g.rope(h.f32(ne, xv, layout), h.input_i32(pos, "pos"), c.n_dims, mode, base, fscale, "rope");
                    h.compute();
                    // Angles in double (up to ~1e5 rad); cos/sin rounded to float and the rotation done in
                    // float: a few float ulps of |x| <~ 4.5, i.e. ~1.5e-6 absolute at worst.
                    EXPECT_TRUE(close(read(out), ref_rope(xv, ne, pos, c.n_dims, mode, base, fscale), 3e-6, 2e-6));
                }
            }
        }
    }
}

// ---- soft_max ------------------------------------------------------------------------------

TEST_P(CpuOps, SoftMax) {
    const int nth = GetParam();
    std::mt19937 rng(6);
    for (int64_t ne0 : {1, 7, 33, 257}) {
        for (int mask_kind : {0, 1, 2}) {  // none, 0/-inf (with a fully masked row), finite biases + -inf
            for (Layout layout : kLayouts) {
                for (float scale : {1.0f, 0.125f}) {
                    SCOPED_TRACE("ne0=" + std::to_string(ne0) + " mask=" + std::to_string(mask_kind) + " " +
                                 layout_name(layout) + " scale=" + std::to_string(scale));
                    const Shape ne{ne0, 5, 2, 2};
                    const auto xv = randn(rng, numel(ne), 4.0f);
                    std::vector<float> mv(static_cast<size_t>(ne0 * 5), 0.0f);
                    std::uniform_int_distribution<int> coin(0, 2);
                    if (mask_kind) {
                        for (auto& m : mv) m = coin(rng) == 0 ? kNegInf : (mask_kind == 2 ? -0.5f * coin(rng) : 0.0f);
                        for (int64_t i = 0; i < ne0; ++i) mv[static_cast<size_t>(2 * ne0 + i)] = kNegInf;  // row 2 fully masked
                        mv[static_cast<size_t>(3 * ne0)] = 0.0f;                                          // row 3 keeps one
                    }
                    Harness h(nth);
                    Tensor* mask = mask_kind ? h.f32({ne0, 5, 1, 1}, mv, Layout::Contiguous, "mask") : nullptr;
                    Tensor* out = h.g.soft_max(h.f32(ne, xv, layout), mask, scale, "softmax");
                    h.compute();
                    std::vector<double> want(xv.size());
                    for (int64_t r = 0; r < numel(ne) / ne0; ++r) {
                        const int64_t i1 = r % 5;
                        std::vector<double> z(static_cast<size_t>(ne0));
                        double mx = -INFINITY;
                        for (int64_t i = 0; i < ne0; ++i) {
                            z[i] = double(xv[r * ne0 + i]) * scale + (mask_kind ? mv[i1 * ne0 + i] : 0.0);
                            mx = std::max(mx, z[i]);
                        }
                        double sum = 0;
                        for (auto& zi : z) sum += (zi = mx == -INFINITY ? 0.0 : std::exp(zi - mx));
                        // A fully masked row comes out as zeros (no NaN).
                        for (int64_t i = 0; i < ne0; ++i) want[r * ne0 + i] = sum > 0 ? z[i] / sum : 0.0;
                    }
                    // Probabilities in [0, 1]. The exponent x * scale + mask - max (|.| up to ~40) is formed in
                    // float, so it carries ~0.5 ulp(32) = 2e-6 absolute error, which exp() turns into that
                    // much relative error; plus exp and the normalisation: 1e-5 relative.
                    EXPECT_TRUE(close(read(out), want, 1e-7, 1e-5));
                }
            }
        }
    }
}

// ---- store_rows ----------------------------------------------------------------------------

TEST_P(CpuOps, StoreRowsIntoCaches) {
    const int nth = GetParam();
    std::mt19937 rng(7);
    for (Type t : {Type::F32, Type::F16, Type::BF16, Type::Q8_0}) {
        for (int64_t ne0 : lengths(t)) {
            for (Layout layout : {Layout::Contiguous, Layout::Padded}) {
                SCOPED_TRACE(std::string(kiln::type_name(t)) + " ne0=" + std::to_string(ne0) + " " + layout_name(layout));
                const int64_t cells = 9;
                const size_t rb = kiln::row_size(t, ne0);
                const std::vector<int32_t> ids = {4, 0, 8, 5, 2};  // distinct, out of order
                const auto xv = randn(rng, ne0 * static_cast<int64_t>(ids.size()));
                Harness h(nth);
                auto* cache = static_cast<uint8_t*>(h.hold(rb * cells));
                for (size_t i = 0; i < rb * cells; ++i) cache[i] = static_cast<uint8_t>(i * 7 + 1);
                const std::vector<uint8_t> before(cache, cache + rb * cells);
                Tensor* c = h.g.leaf(t, {ne0, cells, 1, 1}, "cache", cache);
                Tensor* x = h.f32({ne0, static_cast<int64_t>(ids.size()), 1, 1}, xv, layout, "x");
                Tensor* st = h.g.store_rows(c, x, h.input_i32(ids), "store");
                h.compute();
                EXPECT_EQ(st->data, c->data) << "store_rows aliases its cache";
                for (int64_t cell = 0; cell < cells; ++cell) {
                    const auto it = std::find(ids.begin(), ids.end(), static_cast<int32_t>(cell));
                    const uint8_t* got = cache + cell * rb;
                    if (it == ids.end()) {
                        EXPECT_EQ(0, std::memcmp(got, before.data() + cell * rb, rb)) << "untouched cell " << cell;
                        continue;
                    }
                    const int64_t r = it - ids.begin();
                    // Bit-exact with the reference quantizer (the cache format's definition) ...
                    std::vector<uint8_t> want(rb);
                    kiln::quantize(t, xv.data() + r * ne0, want.data(), 1, ne0);
                    EXPECT_EQ(0, std::memcmp(got, want.data(), rb)) << "cell " << cell;
                    // ... and close to the stored floats: f16 rounds to 2^-11 relative, bf16 to 2^-8,
                    // q8_0 to half a step of amax/127 per block.
                    std::vector<float> back(static_cast<size_t>(ne0));
                    kiln::dequantize_row(t, got, back.data(), ne0);
                    for (int64_t i = 0; i < ne0; ++i) {
                        const double x0 = xv[r * ne0 + i];
                        double tol = 0;
                        if (t == Type::F16) tol = std::fabs(x0) * 0.5 / 1024 + 3e-8;  // + f16 subnormal spacing
                        if (t == Type::BF16) tol = std::fabs(x0) * 0.5 / 128;
                        if (t == Type::Q8_0) {
                            double amax = 0;
                            for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, double(std::fabs(xv[r * ne0 + j])));
                            tol = amax / 127 * 0.5 * 1.01 + amax * 1e-3;  // + the f16 rounding of the block scale
                        }
                        ASSERT_LE(std::fabs(back[i] - x0), tol + 1e-30) << "cell " << cell << " [" << i << "]";
                    }
                }
            }
        }
    }
}

// Computes store_rows of the rows xv (F32 [row, ids.size()]) into a cache of `cells` rows of type t
// (bytes in all) laid out per `layout`, whose bytes start as a known pattern; `before` gets that
// pattern. Returns the cache.
const uint8_t* store_into_patterned_cache(Harness& h, Type t, int64_t row, int64_t cells, size_t bytes,
                                          const std::vector<float>& xv, const std::vector<int32_t>& ids,
                                          kiln::StoreRowsLayout layout, std::vector<uint8_t>& before) {
    auto* cache = static_cast<uint8_t*>(h.hold(bytes));
    for (size_t i = 0; i < bytes; ++i) cache[i] = static_cast<uint8_t>(i * 7 + 1);
    before.assign(cache, cache + bytes);
    Tensor* c = h.g.leaf(t, {row, cells, 1, 1}, "cache", cache);
    h.g.store_rows(c, h.f32({row, static_cast<int64_t>(ids.size()), 1, 1}, xv, Layout::Padded, "x"), h.input_i32(ids),
                   "store", layout);
    h.compute();
    return cache;
}

// K panels (core/kv_layout.h): store_rows scatters each head's row down a column of its tile. Checked
// against the layout's formula written out here, and bit-exact with the reference conversion.
TEST_P(CpuOps, StoreRowsIntoKPanels) {
    const int nth = GetParam();
    std::mt19937 rng(17);
    for (Type t : {Type::F32, Type::F16, Type::BF16}) {
        for (auto [hd, n_head] : {std::pair<int64_t, int64_t>{7, 3}, {64, 2}, {300, 1}}) {
            SCOPED_TRACE(std::string(kiln::type_name(t)) + " hd=" + std::to_string(hd) + " heads=" + std::to_string(n_head));
            const int64_t row = hd * n_head, cells = 128;  // two panels
            const kiln::KPanels kp{.type = t, .head_dim = hd, .n_head = n_head, .cells = cells};
            const size_t es = t == Type::F32 ? 4 : 2, bytes = static_cast<size_t>(row * cells) * es;
            const std::vector<int32_t> ids = {4, 0, 69, 127, 64, 2};  // both panels, their edges, out of order
            const auto xv = randn(rng, row * static_cast<int64_t>(ids.size()));
            Harness h(nth);
            std::vector<uint8_t> want;
            const uint8_t* cache = store_into_patterned_cache(h, t, row, cells, bytes, xv, ids, {.panel_head_dim = hd}, want);
            for (size_t r = 0; r < ids.size(); ++r) {
                std::vector<uint8_t> conv(static_cast<size_t>(row) * es);
                kiln::quantize(t, xv.data() + static_cast<int64_t>(r) * row, conv.data(), 1, row);
                for (int64_t hh = 0; hh < n_head; ++hh)
                    for (int64_t d = 0; d < hd; ++d) {
                        const int64_t cell = ids[r];
                        const size_t at = static_cast<size_t>(hh * cells * hd + cell / 64 * 64 * hd + d * 64 + cell % 64) * es;
                        std::memcpy(want.data() + at, conv.data() + static_cast<size_t>(hh * hd + d) * es, es);
                    }
            }
            EXPECT_EQ(0, std::memcmp(cache, want.data(), bytes)) << "bytes differ from the panel layout";
            std::vector<float> back(static_cast<size_t>(row));
            kp.read_cell(cache, ids[2], back.data());
            const auto ref = dequant_rows(t, std::vector<float>(xv.begin() + 2 * row, xv.begin() + 3 * row), row);
            EXPECT_EQ(back, ref) << "read_cell";
        }
    }
}

// Head-major rows (core/kv_layout.h, the V cache): each head's part of a row goes to cell `id` of the
// head's own region. Checked against the formula written out here, bit-exact with the reference
// conversion, every other byte untouched.
TEST_P(CpuOps, StoreRowsHeadMajor) {
    const int nth = GetParam();
    std::mt19937 rng(23);
    for (Type t : {Type::F32, Type::F16, Type::BF16, Type::Q8_0}) {
        for (auto [hd, n_head] : {std::pair<int64_t, int64_t>{32, 3}, {64, 2}, {96, 1}}) {
            SCOPED_TRACE(std::string(kiln::type_name(t)) + " hd=" + std::to_string(hd) + " heads=" + std::to_string(n_head));
            const int64_t row = hd * n_head, cells = 19;
            const size_t hrb = kiln::row_size(t, hd), bytes = hrb * static_cast<size_t>(n_head * cells);
            const std::vector<int32_t> ids = {4, 0, 18, 7};
            const auto xv = randn(rng, row * static_cast<int64_t>(ids.size()));
            Harness h(nth);
            std::vector<uint8_t> want;
            const uint8_t* cache = store_into_patterned_cache(h, t, row, cells, bytes, xv, ids, {.head_major_dim = hd}, want);
            for (size_t r = 0; r < ids.size(); ++r) {
                for (int64_t hh = 0; hh < n_head; ++hh) {
                    std::vector<uint8_t> conv(hrb);
                    kiln::quantize(t, xv.data() + static_cast<int64_t>(r) * row + hh * hd, conv.data(), 1, hd);
                    std::memcpy(want.data() + (static_cast<size_t>(hh * cells) + static_cast<size_t>(ids[r])) * hrb, conv.data(), hrb);
                }
            }
            EXPECT_EQ(0, std::memcmp(cache, want.data(), bytes)) << "bytes differ from the head-major layout";
        }
    }
    // A head that is not a whole number of the type's blocks is refused when the graph is built.
    Harness h(nth);
    Tensor* c = h.g.leaf(Type::Q8_0, {96, 4, 1, 1}, "cache", h.hold(kiln::row_size(Type::Q8_0, 96) * 4));
    EXPECT_THROW(h.g.store_rows(c, h.f32({96, 1, 1, 1}, randn(rng, 96), Layout::Padded, "x"), h.input_i32({0}), "store",
                                {.head_major_dim = 48}),
                 std::exception);
}

// ---- attention -----------------------------------------------------------------------------

struct AttnCase {
    int64_t hd, hdv, n_head, n_head_kv, n_tokens, n_kv, n_cells;
    Type kv_type;
    // 0 causal, 1 sliding window of 3, 2 random holes + a fully masked token, 3 window of 150,
    // 4 three sequences in runs of 37 cells (token t belongs to sequence t % 3), as in batched decoding,
    // 5 five sequences interleaved cell by cell (cell % 5), as batched decoding places generated tokens:
    // sparse enough that op_attention gathers each token's keys,
    // 6 six sequences (token t: t % 6) with interleaved cells before and after a prompt run of 45 cells
    // each (from cell 64), the run's third cell hidden: runs read densely within gathering blocks, next
    // to gathered keys of the same token
    int mask_kind;
    float softcap;
};

std::vector<float> make_mask(const AttnCase& c, std::mt19937& rng) {
    std::vector<float> m(static_cast<size_t>(c.n_kv * c.n_tokens), kNegInf);
    const int64_t p0 = c.n_kv - c.n_tokens;  // token t sits at cell p0 + t
    std::uniform_int_distribution<int> coin(0, 3);
    for (int64_t t = 0; t < c.n_tokens; ++t) {
        const int64_t pos = p0 + t;
        for (int64_t cell = 0; cell < c.n_kv; ++cell) {
            bool see = cell <= pos;
            if (c.mask_kind == 1) see = see && cell > pos - 3;
            if (c.mask_kind == 3) see = see && cell > pos - 150;
            if (c.mask_kind == 4) see = see && (cell / 37) % 3 == t % 3;
            if (c.mask_kind == 5) see = see && cell % 5 == t % 5;
            if (c.mask_kind == 6) {
                const int64_t s = t % 6, run0 = 64 + 45 * s;
                see = see && (cell < 64 ? cell % 6 == s
                              : cell < 64 + 45 * 6 ? cell >= run0 && cell < run0 + 45 && cell != run0 + 2
                                                  : (cell - 64 - 45 * 6) % 6 == s);
            }
            if (c.mask_kind == 2) see = see && (cell == pos || coin(rng) != 0) && t != 1;
            if (see) m[static_cast<size_t>(t * c.n_kv + cell)] = 0.0f;
        }
    }
    return m;
}

// q [hd, n_head, n_tokens], k/v as rows [hd(v), n_head_kv] per cell; mask [n_kv, n_tokens].
std::vector<double> ref_attention(const AttnCase& c, const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, const std::vector<float>& mask, double scale) {
    const int64_t n_rep = c.n_head / c.n_head_kv;
    std::vector<double> out(static_cast<size_t>(c.hdv * c.n_head * c.n_tokens), 0.0);
    for (int64_t t = 0; t < c.n_tokens; ++t)
        for (int64_t h = 0; h < c.n_head; ++h) {
            const int64_t hk = h / n_rep;
            std::vector<double> s(static_cast<size_t>(c.n_kv), -INFINITY);
            double mx = -INFINITY;
            for (int64_t cell = 0; cell < c.n_kv; ++cell) {
                const float m = mask[t * c.n_kv + cell];
                if (m == kNegInf) continue;
                double d = 0;
                for (int64_t j = 0; j < c.hd; ++j)
                    d += double(q[(t * c.n_head + h) * c.hd + j]) * k[(cell * c.n_head_kv + hk) * c.hd + j];
                d *= scale;
                if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
                s[cell] = d + m;
                mx = std::max(mx, s[cell]);
            }
            if (mx == -INFINITY) continue;  // no visible cell: zeros
            double sum = 0;
            for (auto& x : s) sum += (x = std::exp(x - mx));
            for (int64_t cell = 0; cell < c.n_kv; ++cell)
                for (int64_t j = 0; j < c.hdv; ++j)
                    out[(t * c.n_head + h) * c.hdv + j] += s[cell] / sum * v[(cell * c.n_head_kv + hk) * c.hdv + j];
        }
    return out;
}

std::string attn_label(const AttnCase& c) {
    return std::string(kiln::type_name(c.kv_type)) + " hd=" + std::to_string(c.hd) + " hdv=" + std::to_string(c.hdv) +
           " heads=" + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + " tokens=" +
           std::to_string(c.n_tokens) + " n_kv=" + std::to_string(c.n_kv) + " mask=" + std::to_string(c.mask_kind) +
           " softcap=" + std::to_string(c.softcap);
}

// A K cache of n_cells cells in panels (core/kv_layout.h) holding the rows of kf (one per cell). The
// padding cells past n_cells hold large values: a score read from them would show in the result.
Tensor* k_panel_cache(Harness& h, const AttnCase& c, const std::vector<float>& kf) {
    const int64_t row = c.hd * c.n_head_kv, cells = kiln::KPanels::padded_cells(c.n_cells);
    const kiln::KPanels kp{.type = c.kv_type, .head_dim = c.hd, .n_head = c.n_head_kv, .cells = cells};
    void* d = h.hold(static_cast<size_t>(row * cells) * kp.elem_bytes());
    const std::vector<float> junk(static_cast<size_t>(row), 3000.0f);
    for (int64_t cell = 0; cell < cells; ++cell) {
        kp.write_cell(d, cell, cell < c.n_cells ? kf.data() + cell * row : junk.data());
    }
    return h.g.leaf(c.kv_type, {row, cells, 1, 1}, "k_cache", d);
}

// Values rounded to BF16 (what the BF16 attention products see).
std::vector<float> bf16_round(std::vector<float> v, float scale = 1.0f) {
    for (float& x : v) x = kiln::bf16_to_fp32(kiln::fp32_to_bf16(x * scale));
    return v;
}

// Each value within atol + rtol |want| of `want` or within atol_b + rtol_b |want_b| of `want_b`:
// attention in fast precision computes the rows of large query blocks with BF16 products and the
// others (small blocks, gathered keys) in F32, and which rows take which path is the op's plan.
::testing::AssertionResult close_either(const std::vector<float>& got, const std::vector<double>& want, double atol,
                                        double rtol, const std::vector<double>& want_b, double atol_b, double rtol_b) {
    size_t bad = 0;
    std::ostringstream first;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i];
        const bool ok = std::isfinite(g) && (std::fabs(g - want[i]) <= atol + rtol * std::fabs(want[i]) ||
                                             std::fabs(g - want_b[i]) <= atol_b + rtol_b * std::fabs(want_b[i]));
        if (!ok && bad++ < 5) {
            first << "  [" << i << "] got " << g << " want " << want[i] << " or " << want_b[i] << "\n";
        }
    }
    if (bad) return ::testing::AssertionFailure() << bad << " of " << got.size() << " values off:\n" << first.str();
    return ::testing::AssertionSuccess();
}

// Runs one case through a graph on nth threads and checks it against the double-precision reference;
// k_panels: K stored in panels rather than rows. prec: the backend's precision; in Fast mode on an
// instruction set with BF16 attention products, rows may instead match the reference computed from
// Q (scaled), K and V rounded to BF16 (only P's rounding, 2^-9 relative per weight, is left then);
// with FP16 products (an F16 cache in panels, Fast or Auto) they are within fp16's rounding of the
// reference. Auto is only checked with at most kAutoPreciseRows tokens (no BF16 products then).
void check_attention(const AttnCase& c, int nth, bool q_permuted, std::mt19937& rng, bool k_panels = false,
                     MatmulPrecision prec = MatmulPrecision::Precise) {
    SCOPED_TRACE(attn_label(c) + (q_permuted ? " q permuted" : "") + (k_panels ? " k panels" : "") +
                 (prec == MatmulPrecision::Fast ? " fast" : ""));
    const Shape q_ne{c.hd, c.n_head, c.n_tokens, 1};
    const auto qv = randn(rng, numel(q_ne));
    // The caches hold n_cells rows of [hd * n_head_kv]; attention sees the first n_kv cells through a
    // view, as the model does. Reference values are what the cache holds (dequantized).
    const auto kf = randn(rng, c.hd * c.n_head_kv * c.n_cells);
    const auto vf = randn(rng, c.hdv * c.n_head_kv * c.n_cells);
    const auto mask = make_mask(c, rng);
    Harness h(nth, prec);
    Tensor* kc = k_panels ? k_panel_cache(h, c, kf) : h.typed(c.kv_type, c.hd * c.n_head_kv, c.n_cells, kf, 1, "k_cache");
    Tensor* vc = h.typed(c.kv_type, c.hdv * c.n_head_kv, c.n_cells, vf, 1, "v_cache");
    const size_t k_head = kiln::row_size(c.kv_type, c.hd), v_head = kiln::row_size(c.kv_type, c.hdv);
    Tensor* kview = h.g.view(kc, {c.hd, c.n_head_kv, c.n_kv, 1}, {kc->nb[0], k_head, kc->nb[1], kc->nb[1] * c.n_kv}, 0);
    Tensor* vview = h.g.view(vc, {c.hdv, c.n_head_kv, c.n_kv, 1}, {vc->nb[0], v_head, vc->nb[1], vc->nb[1] * c.n_kv}, 0);
    Tensor* q = h.f32(q_ne, qv, q_permuted ? Layout::Permuted : Layout::Contiguous, "q");
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    Tensor* out = h.g.attention(q, kview, vview, h.input_f32({c.n_kv, c.n_tokens, 1, 1}, mask, "mask"),
                                AttentionParams{.scale = scale, .softcap = c.softcap, .k_panels = k_panels,
                                                // K rows converted for gathered keys in precise runs, read
                                                // from the panels in fast ones (gathered keys stay F32)
                                                .mixed_sequences = c.mask_kind >= 4 && prec == MatmulPrecision::Precise},
                                "attn");
    h.compute();
    ASSERT_EQ(out->ne, (Shape{c.hdv * c.n_head, c.n_tokens, 1, 1}));
    const auto kd = dequant_rows(c.kv_type, kf, c.hd * c.n_head_kv);
    const auto vd = dequant_rows(c.kv_type, vf, c.hdv * c.n_head_kv);
    // Float dot products over hd and an online softmax in float: outputs are averages of
    // values ~N(0,1), accurate to a few 1e-7; 2e-5 leaves room for exp() of scores ~ +-10.
    const auto want = ref_attention(c, qv, kd, vd, mask, scale);
    const auto& kern = kiln::cpu::attn_kernels(kiln::cpu::selected_isa());
    if (prec != MatmulPrecision::Precise && kern.gemm_f16 && k_panels && c.kv_type == Type::F16) {
        // FP16 products (K and V as stored, Q and P rounded to fp16, fp16 sums of 32 products):
        // outputs within ~1e-3 of values ~N(0,1) (worst seen 1.2e-3).
        EXPECT_TRUE(close(read(out), want, 4e-3, 4e-3));
    } else if (prec == MatmulPrecision::Fast && kern.gemm_bf16) {
        // P rounded to BF16 (2^-9) against a sum of unrounded weights: outputs within ~2^-8 of
        // the mean |v| they weigh, a few 1e-3 for values ~N(0,1).
        const auto want_b = ref_attention(c, bf16_round(qv, scale), bf16_round(kd), bf16_round(vd), mask, 1.0);
        EXPECT_TRUE(close_either(read(out), want, 2e-5, 1e-5, want_b, 4e-3, 4e-3));
    } else {
        EXPECT_TRUE(close(read(out), want, 2e-5, 1e-5));
    }
}

// Small odd shapes: every KV type, head size (odd ones for the float types), GQA ratio, mask and
// softcap, on every instruction set.
TEST_P(CpuOps, Attention) {
    const int nth = GetParam();
    std::vector<AttnCase> cases;
    for (Type kv : {Type::F32, Type::F16, Type::BF16, Type::Q8_0}) {
        const bool blocky = kv == Type::Q8_0;
        for (auto [hd, hdv] : {std::pair<int64_t, int64_t>{32, 32}, {64, 32}, {7, 7}, {33, 5}}) {
            if (blocky && (hd % 32 || hdv % 32)) continue;
            for (auto [nh, nkv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {4, 1}, {8, 2}}) {  // GQA 1, 2, 4, 4
                for (int mk : {0, 1, 2, 5}) {
                    for (float cap : {0.0f, 1.5f}) {
                        cases.push_back({hd, hdv, nh, nkv, 5, 11, 14, kv, mk, cap});
                    }
                }
            }
        }
    }
    cases.push_back({64, 64, 4, 4, 1, 1, 1, Type::F16, 0, 0.0f});  // one token over one cell
    cases.push_back({32, 32, 4, 2, 3, 40, 40, Type::Q8_0, 1, 0.0f});
    const auto isas = isas_to_test();
    for (Isa isa : isas) {
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        ScopedIsa env(std::string(kiln::cpu::isa_name(isa)));
        std::mt19937 rng(8);
        for (const AttnCase& c : cases) {
            check_attention(c, nth, false, rng);
            if (kiln::k_panels_supported(c.kv_type)) check_attention(c, nth, false, rng, true);
            check_attention(c, nth, false, rng, kiln::k_panels_supported(c.kv_type), MatmulPrecision::Fast);
            // Auto with at most kAutoPreciseRows tokens: F32, or FP16 over F16 panels where the CPU has it
            if (c.n_tokens <= kiln::kAutoPreciseRows) {
                check_attention(c, nth, false, rng, kiln::k_panels_supported(c.kv_type), MatmulPrecision::Auto);
            }
            // q's strides are handled before the kernels: one instruction set is enough
            if (isa == isas.front()) check_attention(c, nth, true, rng);
        }
    }
}

// Model-like shapes: many keys (several key blocks, blocks skipped by causal and window masks,
// key ranges split into more items when there are too few heads), several query blocks, head
// sizes 64 / 128 / 256, GQA 1 / 2 / 8, and a cache type the kernels cannot read (Q4_0, staged).
TEST_P(CpuOps, AttentionLong) {
    const int nth = GetParam();
    std::vector<AttnCase> cases = {
        // generation: one token over many cells, all visible (n_kv padded past the last cell)
        {64, 64, 8, 1, 1, 300, 320, Type::F16, 0, 0.0f},
        {128, 128, 8, 4, 1, 290, 300, Type::BF16, 0, 0.0f},
        {256, 256, 4, 1, 1, 200, 200, Type::Q8_0, 0, 30.0f},  // gemma-like: hd 256, softcap
        {64, 64, 2, 2, 1, 333, 333, Type::F32, 2, 0.0f},
        // at depth, few items: the key ranges cut into more items than threads (make_plan), with a
        // window (blocks skipped inside ranges) and holes
        {64, 64, 8, 2, 1, 1100, 1152, Type::F16, 0, 0.0f},
        {128, 128, 4, 2, 1, 1500, 1536, Type::BF16, 3, 0.0f},
        {64, 64, 4, 1, 2, 1300, 1300, Type::F16, 2, 0.0f},
        {64, 64, 4, 1, 1, 1030, 1030, Type::Q8_0, 0, 0.0f},
        // prompt processing: many queries, causal / windowed / holes
        {64, 64, 8, 1, 20, 300, 300, Type::F16, 0, 0.0f},
        {64, 64, 2, 2, 70, 260, 260, Type::F16, 3, 0.0f},
        {128, 128, 4, 2, 17, 280, 280, Type::Q8_0, 2, 0.0f},
        {256, 256, 4, 1, 9, 180, 180, Type::F16, 3, 50.0f},
        {64, 64, 4, 1, 6, 270, 270, Type::Q4_0, 1, 0.0f},
        {32, 32, 2, 1, 3, 300, 300, Type::Q4_0, 0, 0.0f},
        // batched decoding: each token sees only its own sequence's cells
        {64, 64, 8, 1, 12, 400, 400, Type::F16, 4, 0.0f},
        {64, 64, 2, 2, 30, 290, 290, Type::BF16, 4, 0.0f},
        {64, 64, 8, 1, 12, 400, 400, Type::F16, 5, 0.0f},  // gathered: more than one block of keys per token
        {128, 128, 4, 2, 7, 700, 700, Type::Q8_0, 5, 0.0f},
        {64, 64, 4, 1, 9, 333, 333, Type::Q4_0, 5, 20.0f},
        {256, 256, 4, 4, 5, 900, 900, Type::BF16, 5, 0.0f},
        // batched decoding after long prompts: dense runs and gathered keys of one token
        {64, 64, 8, 1, 12, 500, 512, Type::F16, 6, 0.0f},
        {128, 128, 4, 2, 7, 520, 520, Type::BF16, 6, 0.0f},
        {64, 64, 32, 2, 6, 450, 460, Type::F32, 6, 0.0f},  // GQA 16: runs in BF16 products in fast mode
        {32, 32, 4, 1, 9, 480, 480, Type::Q8_0, 6, 5.0f},
        {64, 64, 4, 1, 6, 400, 400, Type::Q4_0, 6, 0.0f},
    };
    for (Isa isa : isas_to_test()) {
        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)));
        ScopedIsa env(std::string(kiln::cpu::isa_name(isa)));
        std::mt19937 rng(12);
        for (const AttnCase& c : cases) {
            check_attention(c, nth, false, rng);
            if (kiln::k_panels_supported(c.kv_type)) check_attention(c, nth, false, rng, true);
            for (bool panels : {false, true}) {
                if (!panels || kiln::k_panels_supported(c.kv_type)) check_attention(c, nth, false, rng, panels, MatmulPrecision::Fast);
            }
        }
    }
}

// Store then attend in one graph: the attention must see the rows written by store_rows (ordering
// through the alias), for every cache type.
// V in rows or head-major (the model's layout for V).
TEST_P(CpuOps, StoreThenAttend) {
    const int nth = GetParam();
    std::mt19937 rng(9);
    for (auto [kv, panels] : {std::pair{Type::F32, false}, {Type::F16, false}, {Type::BF16, false}, {Type::Q8_0, false},
                              {Type::F32, true}, {Type::F16, true}, {Type::BF16, true}})
    for (bool v_heads : {false, true}) {
        SCOPED_TRACE(std::string(kiln::type_name(kv)) + (panels ? " k panels" : "") + (v_heads ? " v head-major" : ""));
        AttnCase c{32, 32, 4, 2, 3, 8, 12, kv, 0, 0.0f};
        const int64_t row = c.hd * c.n_head_kv;
        auto kf = randn(rng, row * c.n_cells), vf = randn(rng, row * c.n_cells);
        const auto knew = randn(rng, row * c.n_tokens), vnew = randn(rng, row * c.n_tokens);
        const std::vector<int32_t> ids = {5, 6, 7};  // the batch's tokens go to the last visible cells
        const auto qv = randn(rng, c.hd * c.n_head * c.n_tokens);
        const auto mask = make_mask(c, rng);
        Harness h(nth, MatmulPrecision::Precise);  // F32 products: what is read matters here, not FP16 rounding
        Tensor* kc = panels ? k_panel_cache(h, c, kf) : h.typed(kv, row, c.n_cells, kf, 1, "k_cache");
        // head-major: the old values rearranged, head h's rows of every cell after one another
        std::vector<float> v_init = vf;
        if (v_heads) {
            for (int64_t cell = 0; cell < c.n_cells; ++cell)
                for (int64_t hh = 0; hh < c.n_head_kv; ++hh)
                    std::copy_n(vf.begin() + cell * row + hh * c.hd, c.hd, v_init.begin() + (hh * c.n_cells + cell) * c.hd);
        }
        Tensor* vc = h.typed(kv, row, c.n_cells, v_init, 1, "v_cache");
        Tensor* idx = h.input_i32(ids, "kv_idx");
        Tensor* ks = h.g.store_rows(kc, h.f32({row, c.n_tokens, 1, 1}, knew, Layout::Contiguous, "k_new"), idx, {},
                                    {.panel_head_dim = panels ? c.hd : 0});
        Tensor* vs = h.g.store_rows(vc, h.f32({row, c.n_tokens, 1, 1}, vnew, Layout::Padded, "v_new"), idx, {},
                                    {.head_major_dim = v_heads ? c.hd : 0});
        const size_t hb = kiln::row_size(kv, c.hd);
        Tensor* kview = h.g.view(ks, {c.hd, c.n_head_kv, c.n_kv, 1}, {ks->nb[0], hb, ks->nb[1], ks->nb[1] * c.n_kv}, 0);
        const size_t v_head_bytes = hb * static_cast<size_t>(c.n_cells);
        Tensor* vview = v_heads ? h.g.view(vs, {c.hd, c.n_head_kv, c.n_kv, 1}, {vs->nb[0], v_head_bytes, hb, v_head_bytes * c.n_head_kv}, 0)
                                : h.g.view(vs, {c.hd, c.n_head_kv, c.n_kv, 1}, {vs->nb[0], hb, vs->nb[1], vs->nb[1] * c.n_kv}, 0);
        Tensor* out = h.g.attention(h.f32({c.hd, c.n_head, c.n_tokens, 1}, qv), kview, vview,
                                    h.input_f32({c.n_kv, c.n_tokens, 1, 1}, mask, "mask"),
                                    AttentionParams{.scale = 0.2f, .k_panels = panels}, "attn");
        h.compute();
        for (size_t i = 0; i < ids.size(); ++i) {
            std::copy_n(knew.begin() + static_cast<int64_t>(i) * row, row, kf.begin() + ids[i] * row);
            std::copy_n(vnew.begin() + static_cast<int64_t>(i) * row, row, vf.begin() + ids[i] * row);
        }
        const auto want = ref_attention(c, qv, dequant_rows(kv, kf, row), dequant_rows(kv, vf, row), mask, 0.2);
        EXPECT_TRUE(close(read(out), want, 2e-5, 1e-5));
    }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuOps, ::testing::ValuesIn(kThreads),
                         [](const ::testing::TestParamInfo<int>& p) { return "t" + std::to_string(p.param); });

// ---- mul_mat ---------------------------------------------------------------------------------

// Error of a matrix product relative to its natural scale: sqrt(sum (out - ref)^2 / sum_{n,m,k}
// (w x)^2). For random data this is the relative error per product term that rounding the
// activations causes; it does not blow up where a dot product happens to cancel to ~0.
struct ErrSums {
    double num = 0, den = 0;
    double value() const { return den > 0 ? std::sqrt(num / den) : 0.0; }
    void add(const ErrSums& o) {
        num += o.num;
        den += o.den;
    }
};

ErrSums matmul_error(const std::vector<float>& got, const std::vector<float>& w, const std::vector<float>& x, int64_t K,
                     int64_t N, int64_t M) {
    ErrSums e;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double p = double(w[n * K + k]) * x[m * K + k];
                ref += p;
                mag += p * p;
            }
            const double d = got[static_cast<size_t>(m * N + n)] - ref;
            e.num += std::isfinite(d) ? d * d : 1e300;
            e.den += mag;
        }
    return e;
}

// Tolerances on matmul_error per activation format (the weight type's vec_dot_type), for one product
// (small ones are noisy: a single output of K = 32 is one random sample). The weights' own
// quantization error is not part of it: the reference uses the dequantized weights. Activations are
// N(0,1) with every 37th value x6 (outliers, as in real models), which widens the 8-bit steps.
//  F32: float accumulation only.
//  F16: each activation rounded to 11 bits (rms ~1.6e-4 relative); BF16: 8 bits (~1.3e-3).
//  Q8_0 (blocks of 32), Q8_K (256): steps of amax/127; observed up to ~1.5e-2 (Q8_0) and ~4e-2 (Q8_K,
//  whose larger blocks hold more outliers); Precise ~1e-4 and ~3e-4.
//  Q8_1 (Q4_1, Q5_1): as Q8_0, but the block sum s that multiplies the weight minimum is stored as
//  f16, and its rounding (~2^-12 of a block sum) is not corrected by Precise's residual pass.
//  Precise adds a pass over the residual in the same format: the 8-bit step shrinks by ~250x, the
//  f16/bf16 rounding error is squared.
struct Tol {
    double fast, precise;
    double gain;  // Precise must be this many times closer than Fast (aggregated over all shapes)
};
Tol matmul_tol(Type vec_dot_type) {
    switch (vec_dot_type) {
        case Type::F32: return {2e-6, 2e-6, 1};
        case Type::F16: return {6e-4, 2e-6, 100};
        case Type::BF16: return {5e-3, 3e-5, 50};
        case Type::Q8_0: return {3e-2, 2.5e-4, 50};
        case Type::Q8_1: return {4e-2, 3e-3, 5};
        default: return {6e-2, 5e-4, 50};  // Q8_K
    }
}

class MulMat : public ::testing::TestWithParam<Type> {};

TEST_P(MulMat, AllIsasPrecisionsThreadsShapes) {
    const Type t = GetParam();
    const Type vdt = kiln::cpu::kernels(t).vec_dot_type;
    const Tol tol = matmul_tol(vdt);
    std::mt19937 rng(10 + static_cast<unsigned>(t));
    const auto isas = isas_to_test();
    if (isas.size() == 1 && kiln::cpu::isa_supported(Isa::Avx2)) {
        std::printf("note: KILN_CPU cannot switch instruction sets in-process here; testing %s only\n",
                    std::string(kiln::cpu::isa_name(isas[0])).c_str());
    }
    struct Shape3 {
        int64_t N, M2, M3;  // weight rows; activation rows as [K, M2, M3]
        Layout layout;
    };
    const Shape3 shapes[] = {{1, 1, 1, Layout::Contiguous},
                             {7, 5, 1, Layout::Contiguous},
                             {33, 3, 2, Layout::Permuted},
                             {17, 19, 1, Layout::Padded}};
    double worst[2] = {0, 0};
    for (Isa isa : isas) {
        ScopedIsa env(std::string(kiln::cpu::isa_name(isa)));
        ErrSums total[2];
        for (int64_t K : lengths(t)) {
            for (const Shape3& s : shapes) {
                const int64_t M = s.M2 * s.M3;
                const auto wv = randn(rng, K * s.N);
                const auto wq = quantize_rows(t, wv, K);
                const auto wd = dequantize_rows(t, wq, K);
                auto xv = randn(rng, K * M);
                for (size_t i = 0; i < xv.size(); i += 37) xv[i] *= 6;  // activation outliers
                for (int pi = 0; pi < 2; ++pi) {
                    const MatmulPrecision prec = pi ? MatmulPrecision::Precise : MatmulPrecision::Fast;
                    std::vector<float> first;
                    for (int nth : kThreads) {
                        SCOPED_TRACE(std::string(kiln::cpu::isa_name(isa)) + " K=" + std::to_string(K) + " N=" +
                                     std::to_string(s.N) + " M=" + std::to_string(s.M2) + "x" + std::to_string(s.M3) +
                                     " " + layout_name(s.layout) + (pi ? " precise" : " fast") +
                                     " threads=" + std::to_string(nth));
                        Harness h(nth, prec);
                        Tensor* w = h.g.leaf(t, {K, s.N, 1, 1}, "w", h.hold_copy(wq));
                        Tensor* x = h.f32({K, s.M2, s.M3, 1}, xv, s.layout, "x");
                        Tensor* out = h.g.mul_mat(w, x, "mm");
                        h.compute();
                        ASSERT_EQ(out->ne, (Shape{s.N, s.M2, s.M3, 1}));
                        const auto got = read(out);
                        if (nth == kThreads[0]) {
                            const ErrSums e = matmul_error(got, wd, xv, K, s.N, M);
                            EXPECT_LE(e.value(), pi ? tol.precise : tol.fast);
                            worst[pi] = std::max(worst[pi], e.value());
                            if (K >= 32) total[pi].add(e);
                            first = got;
                        } else {
                            // Each output is one thread's dot product: the thread count cannot change it.
                            EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float)))
                                << "result depends on the thread count";
                        }
                    }
                }
            }
        }
        // Precise must be much closer to the float reference wherever activations are rounded.
        if (vdt != Type::F32) {
            EXPECT_GT(total[0].value(), tol.gain * total[1].value())
                << kiln::cpu::isa_name(isa) << ": fast " << total[0].value() << ", precise " << total[1].value();
        }
    }
    std::string isa_list;
    for (Isa isa : isas) isa_list += std::string(isa_list.empty() ? "" : ",") + std::string(kiln::cpu::isa_name(isa));
    std::printf("%-7s (activations %s) on %s: worst error fast %.3g, precise %.3g\n",
                std::string(kiln::type_name(t)).c_str(), std::string(kiln::type_name(vdt)).c_str(), isa_list.c_str(),
                worst[0], worst[1]);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MulMat, ::testing::ValuesIn(kAllRefTypes),
                         [](const ::testing::TestParamInfo<Type>& p) { return std::string(kiln::type_name(p.param)); });

// Auto precision: Precise for up to kAutoPreciseRows activation rows, Fast above (bit-identical to
// the explicit modes).
TEST(MulMatAuto, PreciseForSmallBatchesFastForLarge) {
    std::mt19937 rng(11);
    const int64_t K = 256, N = 9;
    const auto wv = randn(rng, K * N);
    for (int64_t M : {int64_t{1}, kiln::kAutoPreciseRows, kiln::kAutoPreciseRows + 1}) {
        SCOPED_TRACE("M=" + std::to_string(M));
        const auto xv = randn(rng, K * M);
        std::vector<float> res[3];
        for (int i = 0; i < 3; ++i) {
            const MatmulPrecision p[] = {MatmulPrecision::Auto, MatmulPrecision::Fast, MatmulPrecision::Precise};
            Harness h(2, p[i]);
            Tensor* out = h.g.mul_mat(h.typed(Type::Q4_K, K, N, wv), h.f32({K, M, 1, 1}, xv), "mm");
            h.compute();
            res[i] = read(out);
        }
        const auto& want = M <= kiln::kAutoPreciseRows ? res[2] : res[1];
        const auto& other = M <= kiln::kAutoPreciseRows ? res[1] : res[2];
        EXPECT_EQ(0, std::memcmp(res[0].data(), want.data(), want.size() * sizeof(float)));
        EXPECT_NE(0, std::memcmp(res[0].data(), other.data(), other.size() * sizeof(float)));
    }
}

// Products of one input with several packed weights in a row (q, k and v in the models) quantize it
// once (PackedActs), and where the activation format is the same they run as one op
// (op_mul_mat_group: their weight groups handed out together, a thread's claim crossing from one
// product into the next). Each must equal the same product computed alone, bit for bit, whether
// the activation format matches the previous product's (Q4_0 after Q4_0), differs only in its
// offset (Q8_0) or entirely (Q4_K, Q6_K: a group takes two formats, each quantized into its own
// tile, and ends before a third), with products of different heights (a group of 16 rows alone),
// in both precisions, with another op or input in between.
TEST(MulMatPacked, ConsecutiveProductsOfOneInputMatchProductsAlone) {
    std::mt19937 rng(14);
    const int64_t K = 256;
    const Type types[] = {Type::Q4_0, Type::Q4_0, Type::Q8_0, Type::Q4_K, Type::Q4_K, Type::Q6_K, Type::Q4_K, Type::Q4_0};
    const int64_t heights[] = {48, 16, 80, 32, 32, 16, 64, 32};
    constexpr size_t n_mm = std::size(types);
    std::vector<std::vector<uint8_t>> packed;
    for (size_t i = 0; i < n_mm; ++i) {
        const Type t = types[i];
        const int64_t N = heights[i];
        const auto wv = randn(rng, K * N);
        std::vector<uint8_t> rows(kiln::row_size(t, K) * N);
        kiln::quantize(t, wv.data(), rows.data(), N, K);
        packed.emplace_back(kiln::packed_size(t, K, N));
        kiln::pack_rows(t, rows.data(), kiln::row_size(t, K), packed.back().data(), K, N);
    }
    for (int64_t M : {1, 2, 5}) {  // generation (each row's blocks quantized by all threads) and batches
        const auto xv = randn(rng, K * M), x2v = randn(rng, K * M);
        for (MatmulPrecision prec : {MatmulPrecision::Fast, MatmulPrecision::Precise}) {
            for (int nth : kThreads) {
                SCOPED_TRACE(std::string(prec == MatmulPrecision::Fast ? "fast" : "precise") + " threads=" + std::to_string(nth) + " M=" + std::to_string(M));
                auto weight = [&](Harness& h, size_t i) {
                    Tensor* w = h.g.leaf(types[i], {K, heights[i], 1, 1}, "w" + std::to_string(i), h.hold_copy(packed[i]));
                    w->layout = kiln::Layout::Packed16;
                    return w;
                };
                // All in one graph: x times weights 0-5 (0-2: one group of two formats, Q4_0's and
                // Q8_0's; 3-5: one of Q4_K's and Q6_K's), an add, x times weight 6, x2 times weight 7.
                Harness h(nth, prec);
                Tensor* x = h.f32({K, M, 1, 1}, xv, Layout::Contiguous, "x");
                Tensor* x2 = h.f32({K, M, 1, 1}, x2v, Layout::Contiguous, "x2");
                std::vector<Tensor*> outs;
                for (size_t i = 0; i < 6; ++i) outs.push_back(h.g.mul_mat(weight(h, i), x, "mm" + std::to_string(i)));
                Tensor* sum = h.g.add(outs[3], outs[4]);  // both 32 high
                outs.push_back(h.g.mul_mat(weight(h, 6), x, "mm6"));
                outs.push_back(h.g.mul_mat(weight(h, 7), x2, "mm7"));
                for (Tensor* o : outs) h.g.mark_output(o);  // kept (memory not reused) to be read after
                const bool precise = prec == MatmulPrecision::Precise;
                const auto nodes = h.g.nodes();
                // The node list starts with the products (x and x2 are leaves).
                ASSERT_EQ(nodes[0], outs[0]);
                EXPECT_EQ(3u, kiln::cpu::mul_mat_group_size(nodes, precise, false, kiln::cpu::selected_isa()));
                EXPECT_EQ(2u, kiln::cpu::mul_mat_group_size(nodes.subspan(1), precise, false, kiln::cpu::selected_isa()));  // a third format next
                EXPECT_EQ(3u, kiln::cpu::mul_mat_group_size(nodes.subspan(3), precise, false, kiln::cpu::selected_isa()));
                EXPECT_EQ(2u, kiln::cpu::mul_mat_group_size(nodes.subspan(4), precise, false, kiln::cpu::selected_isa()));
                EXPECT_EQ(1u, kiln::cpu::mul_mat_group_size(nodes.subspan(6), precise, false, kiln::cpu::selected_isa()));  // the add
                h.compute();
                for (size_t i = 0; i < outs.size(); ++i) {
                    Harness alone(nth, prec);
                    Tensor* out = alone.g.mul_mat(weight(alone, i),
                                                  alone.f32({K, M, 1, 1}, i == 7 ? x2v : xv, Layout::Contiguous, "x"), "mm");
                    alone.compute();
                    const auto got = read(outs[i]), want = read(out);
                    ASSERT_EQ(got.size(), want.size());
                    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                        << "product " << i << " (" << kiln::type_name(types[i]) << ")";
                }
                ASSERT_NE(sum, nullptr);
            }
        }
    }
}

// Products of fewer activation rows than threads (generation) have each row's blocks quantized by
// all threads, in runs of whole super-blocks (K here: 3 super-blocks, or 19 blocks of 32, whose last
// run is short). Float weights' prompts claim up to 16 of their 43 groups at a time
// (PackedKernels::prompt_claim_groups; 5 with 2 threads, 3 with 3, the last claim short). Every
// thread count must give one thread's result bit for bit, and that the reference's.
TEST(MulMatPacked, FewRowsQuantizedByAllThreadsMatchOneThread) {
    std::mt19937 rng(15);
    struct Case {
        Type t;
        int64_t N;
        std::initializer_list<int64_t> rows;
    };
    const Case cases[] = {{Type::Q4_0, 32, {1, 2}}, {Type::Q8_0, 32, {1, 2}}, {Type::Q4_K, 32, {1, 2}}, {Type::Q6_K, 32, {1, 2}},
                          {Type::F16, 32, {1, 2}},  {Type::F16, 16 * 43, {24}}, {Type::BF16, 16 * 43, {24}}};
    for (const auto& [t, N, rows] : cases) {
        const int64_t K = t == Type::Q4_0 || t == Type::Q8_0 ? 32 * 19 : 3 * 256;
        const auto wv = randn(rng, K * N);
        const auto wq = quantize_rows(t, wv, K);
        const auto wd = dequantize_rows(t, wq, K);
        std::vector<uint8_t> packed(kiln::packed_size(t, K, N));
        kiln::pack_rows(t, wq.data(), kiln::row_size(t, K), packed.data(), K, N);
        for (int64_t M : rows) {
            const auto xv = randn(rng, K * M);
            for (MatmulPrecision prec : {MatmulPrecision::Fast, MatmulPrecision::Precise}) {
                std::vector<float> first;
                for (int nth : {1, 2, 3}) {
                    SCOPED_TRACE(std::string(kiln::type_name(t)) + " M=" + std::to_string(M) +
                                 (prec == MatmulPrecision::Fast ? " fast" : " precise") + " threads=" + std::to_string(nth));
                    Harness h(nth, prec);
                    Tensor* w = h.g.leaf(t, {K, N, 1, 1}, "w", h.hold_copy(packed));
                    w->layout = kiln::Layout::Packed16;
                    Tensor* out = h.g.mul_mat(w, h.f32({K, M, 1, 1}, xv), "mm");
                    h.compute();
                    const auto got = read(out);
                    if (nth == 1) {
                        // (packed F16's fast products take BF16 activations)
                        const Tol tol = matmul_tol(t == Type::F16 || t == Type::BF16 ? Type::BF16 : kiln::cpu::kernels(t).vec_dot_type);
                        EXPECT_LE(matmul_error(got, wd, xv, K, N, M).value(), prec == MatmulPrecision::Fast ? tol.fast : tol.precise);
                        first = got;
                    } else {
                        EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float)));
                    }
                }
            }
        }
    }
}

// What a thread asks for while it waits before a product (CpuBackend::compute, IdlePrefetch): in
// generation the first weights of its own region of the product's groups (the work regions split
// a group of products as one index space), up to the byte budget, across products of a group;
// nothing for prompts; kept, with its progress, when planned again for the same product.
TEST(IdlePrefetch, PlansTheFirstWeightsOfTheThreadsRegion) {
    const int64_t K = 64;
    const Type t = Type::Q4_0;
    const size_t gb = kiln::row_size(t, K) * kiln::kPackRows;  // bytes of one 16-row group
    Harness h(1);
    std::vector<uint8_t> w0(3 * gb), w1(5 * gb);  // 3 and 5 groups: 8 in the joint index space
    auto weight = [&](std::vector<uint8_t>& bytes, int64_t n, const char* name) {
        Tensor* w = h.g.leaf(t, {K, n, 1, 1}, name, bytes.data());
        w->layout = kiln::Layout::Packed16;
        return w;
    };
    Tensor* a = weight(w0, 48, "w0");
    Tensor* b = weight(w1, 80, "w1");
    for (int64_t M : {int64_t{1}, int64_t{9}}) {
        Tensor* x = h.g.leaf(Type::F32, {K, M, 1, 1}, "x", h.hold(static_cast<size_t>(K * M) * sizeof(float)));
        const Tensor* group[] = {h.g.mul_mat(a, x), h.g.mul_mat(b, x)};
        kiln::cpu::IdlePrefetch idle;
        kiln::cpu::plan_idle_prefetch(group, 0, 2, size_t{1} << 20, idle);
        if (M > 8) {  // a prompt: the weights are read from the caches by many tiles, nothing asked
            EXPECT_EQ(0u, idle.n);
            continue;
        }
        // thread 0 of 2: groups 0..3, i.e. all of w0 and w1's first group
        ASSERT_EQ(2u, idle.n);
        EXPECT_EQ(w0.data(), idle.ranges[0].p);
        EXPECT_EQ(3 * gb, static_cast<size_t>(idle.ranges[0].end - idle.ranges[0].p));
        EXPECT_EQ(w1.data(), idle.ranges[1].p);
        EXPECT_EQ(gb, static_cast<size_t>(idle.ranges[1].end - idle.ranges[1].p));
        // thread 1 (its own record): groups 4..7 = w1's groups 1..4, cut at the budget
        idle = kiln::cpu::IdlePrefetch{};
        kiln::cpu::plan_idle_prefetch(group, 1, 2, gb + 100, idle);
        ASSERT_EQ(1u, idle.n);
        EXPECT_EQ(w1.data() + gb, idle.ranges[0].p);
        EXPECT_EQ(gb + 100, static_cast<size_t>(idle.ranges[0].end - idle.ranges[0].p));
        // Planned again for the same product: the requests already made are not repeated.
        ASSERT_TRUE(idle.step());
        const uint8_t* after_step = idle.ranges[0].p;
        EXPECT_GT(after_step, w1.data() + gb);
        kiln::cpu::plan_idle_prefetch(group, 1, 2, gb + 100, idle);
        EXPECT_EQ(after_step, idle.ranges[0].p);
        int steps = 1;
        while (idle.step()) ++steps;
        EXPECT_EQ(static_cast<int>((gb + 100 + 255) / 256), steps);  // 4 lines a step
    }
}

// A chain mixing every op in one graph and one run, to exercise the per-node barriers and the
// scratch buffer shared by mul_mat and attention nodes of different sizes.
TEST(CpuOpsChain, MixedGraphMatchesStepwise) {
    std::mt19937 rng(12);
    const int64_t d = 64, T = 4, H = 2, HKV = 1, hd = 32;
    const auto xv = randn(rng, d * T);
    const auto wq = randn(rng, d * d), wk = randn(rng, d * HKV * hd), wv = randn(rng, d * HKV * hd);
    std::vector<std::vector<float>> results;
    for (int nth : kThreads) {
        Harness h(nth, MatmulPrecision::Precise);
        Tensor* x = h.input_f32({d, T, 1, 1}, xv, "x");
        Tensor* n = h.g.rms_norm(x, 1e-6f);
        Tensor* q = h.g.mul_mat(h.typed(Type::Q8_0, d, d, wq), n);
        Tensor* k = h.g.mul_mat(h.typed(Type::F16, d, HKV * hd, wk), n);
        Tensor* v = h.g.mul_mat(h.typed(Type::BF16, d, HKV * hd, wv), n);
        Tensor* pos = h.input_i32({0, 1, 2, 3}, "pos");
        q = h.g.rope(h.g.reshape(q, {hd, H, T, 1}), pos, hd, RopeMode::Neox, 10000, 1);
        k = h.g.rope(h.g.reshape(k, {hd, HKV, T, 1}), pos, hd, RopeMode::Neox, 10000, 1);
        Tensor* kv_k = h.g.leaf(Type::F16, {hd * HKV, 8, 1, 1}, "kc", h.hold(kiln::row_size(Type::F16, hd * HKV) * 8));
        Tensor* kv_v = h.g.leaf(Type::Q8_0, {hd * HKV, 8, 1, 1}, "vc", h.hold(kiln::row_size(Type::Q8_0, hd * HKV) * 8));
        Tensor* idx = h.input_i32({0, 1, 2, 3}, "idx");
        Tensor* ks = h.g.store_rows(kv_k, h.g.reshape(k, {hd * HKV, T, 1, 1}), idx);
        Tensor* vs = h.g.store_rows(kv_v, v, idx);
        std::vector<float> mask(static_cast<size_t>(4 * T));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < 4; ++c) mask[static_cast<size_t>(t * 4 + c)] = c <= t ? 0.0f : kNegInf;
        const size_t khb = kiln::row_size(Type::F16, hd), vhb = kiln::row_size(Type::Q8_0, hd);
        Tensor* a = h.g.attention(q, h.g.view(ks, {hd, HKV, 4, 1}, {ks->nb[0], khb, ks->nb[1], ks->nb[1] * 4}, 0),
                                  h.g.view(vs, {hd, HKV, 4, 1}, {vs->nb[0], vhb, vs->nb[1], vs->nb[1] * 4}, 0),
                                  h.input_f32({4, T, 1, 1}, mask, "mask"), AttentionParams{.scale = 0.25f});
        Tensor* y = h.g.add(h.g.scale(a, 0.5f), x);
        Tensor* out = h.g.geglu(h.g.silu(y), h.g.soft_max(y, nullptr, 1.0f));
        h.g.mark_output(out);
        h.compute();
        results.push_back(read(out));
        for (float f : results.back()) ASSERT_TRUE(std::isfinite(f));
    }
    for (size_t i = 1; i < results.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(results[0].data(), results[i].data(), results[0].size() * sizeof(float)))
            << "threads " << kThreads[i] << " differ from 1 thread";
    }
}

// Buffers of 2 MiB and more (KV cache layers) are asked for in huge pages, their part past the last
// whole huge page not (HostBuffer): the smaps flags of the mappings say so (hg / nh).
TEST(CpuBackendBasics, LargeBuffersAskForHugePages) {
    CpuBackend be(CpuBackendOptions{.n_threads = 1, .matmul_precision = MatmulPrecision::Fast});
    constexpr size_t kBytes = (size_t{5} << 20) + 1000;
    auto buf = be.alloc_buffer(kBytes);
    auto* base = static_cast<uint8_t*>(buf->base());
    ASSERT_NE(base, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 64, 0u);
    base[0] = 1;
    base[kBytes - 1] = 2;
    uint8_t back = 0;
    buf->read(kBytes - 1, &back, 1);
    EXPECT_EQ(back, 2);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    std::FILE* thp = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!thp) GTEST_SKIP() << "no transparent huge pages in this kernel";
    std::fclose(thp);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (size_t{2} << 20), 0u);
    // The VmFlags of the mapping holding address a.
    auto flags_at = [](const void* a) {
        std::FILE* f = std::fopen("/proc/self/smaps", "r");
        std::string flags;
        if (!f) return flags;
        char line[512];
        bool inside = false;
        const auto x = reinterpret_cast<uintptr_t>(a);
        while (std::fgets(line, sizeof line, f)) {
            unsigned long lo = 0, hi = 0;
            if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
                inside = x >= lo && x < hi;
            } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
                flags = line + 8;
                break;
            }
        }
        std::fclose(f);
        return flags;
    };
    {  // where madvise's flags do not show (qemu-user, which runs the arm64 tests, drops the call)
        void* probe = ::mmap(nullptr, size_t{4} << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(probe, MAP_FAILED);
        ::madvise(probe, size_t{4} << 20, MADV_HUGEPAGE);
        const bool shown = flags_at(probe).find(" hg") != std::string::npos;
        ::munmap(probe, size_t{4} << 20);
        if (!shown) GTEST_SKIP() << "madvise(MADV_HUGEPAGE) does not show in /proc/self/smaps here";
    }
    EXPECT_NE(flags_at(base).find(" hg"), std::string::npos) << flags_at(base);
    EXPECT_NE(flags_at(base + kBytes - 1).find(" nh"), std::string::npos) << flags_at(base + kBytes - 1);
#endif
}

TEST(CpuBackendBasics, ReportsItselfAndRejectsUnsupported) {
    CpuBackend be(CpuBackendOptions{.n_threads = 3, .matmul_precision = MatmulPrecision::Fast});
    EXPECT_EQ(be.n_threads(), 3);
    EXPECT_TRUE(be.is_host());
    EXPECT_EQ(be.name(), "CPU");
    CpuBackend def;
    EXPECT_GE(def.n_threads(), 1);
    auto buf = be.alloc_buffer(100);
    ASSERT_NE(buf->base(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->base()) % 64, 0u);
    const char msg[] = "hello";
    buf->write(10, msg, sizeof msg);
    char back[sizeof msg];
    buf->read(10, back, sizeof back);
    EXPECT_STREQ(back, msg);
    // A weight type without a matmul kernel: the scheduler finds no backend for it.
    Graph g;
    std::vector<uint8_t> wbytes(kiln::row_size(Type::IQ2_XXS, 256) * 2);
    std::vector<float> xbytes(256);
    Tensor* mm = g.mul_mat(g.leaf(Type::IQ2_XXS, {256, 2, 1, 1}, "w", wbytes.data()),
                           g.leaf(Type::F32, {256, 1, 1, 1}, "x", xbytes.data()), "mm_iq2");
    EXPECT_FALSE(be.supports_op(*mm));
    Scheduler sched({&be}, nullptr);
    try {
        sched.allocate(g);
        ADD_FAILURE() << "allocate() accepted an unsupported node";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("mm_iq2"), std::string::npos) << e.what();
    }
}

}  // namespace
