// Products over packed weights that compute their activations from the nodes before them
// (backends/cpu/fused_acts.h): the residual add, RMS norm and weight multiply before q/k/v or
// gate/up, the gated activation before ffn_down. A graph computed with fusion must give the same
// bits as without it (every output, the add's result included), for every thread count, row count
// (generation's one row, whose chunks the threads share, and batches) and precision, with one or
// two activation formats in the group; and nodes whose results someone else reads are not fused.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/scheduler.h"
#include "core/graph.h"
#include "core/quant.h"
#include "core/quant_repack.h"

namespace {

using kiln::Graph;
using kiln::MatmulPrecision;
using kiln::Scheduler;
using kiln::Tensor;
using kiln::Type;
using kiln::cpu::CpuBackend;
using kiln::cpu::CpuBackendOptions;

std::vector<float> randn(std::mt19937& rng, int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
}

// Weights of type t [K, N] quantized and packed as the loader packs them.
std::vector<uint8_t> packed_weights(std::mt19937& rng, Type t, int64_t K, int64_t N) {
    const auto wv = randn(rng, K * N);
    std::vector<uint8_t> rows(kiln::row_size(t, K) * static_cast<size_t>(N));
    kiln::quantize(t, wv.data(), rows.data(), N, K);
    std::vector<uint8_t> packed(kiln::packed_size(t, K, N));
    kiln::pack_rows(t, rows.data(), kiln::row_size(t, K), packed.data(), K, N);
    return packed;
}

// One graph on one CPU backend; every computed node poisoned with NaN before compute, so that a
// result a fused product fails to write cannot pass.
class Harness {
public:
    Harness(int n_threads, MatmulPrecision p, bool fuse)
        : backend_(CpuBackendOptions{.n_threads = n_threads, .matmul_precision = p, .fuse_ops = fuse}), sched_({&backend_}, nullptr) {}
    Graph g;
    Tensor* f32(std::array<int64_t, 4> ne, const std::vector<float>& v, const std::string& name) {
        store_.emplace_back(v.size() * sizeof(float));
        std::memcpy(store_.back().data(), v.data(), v.size() * sizeof(float));
        return g.leaf(Type::F32, ne, name, store_.back().data());
    }
    Tensor* packed(Type t, int64_t K, int64_t N, const std::vector<uint8_t>& bytes, const std::string& name) {
        store_.push_back(bytes);
        Tensor* w = g.leaf(t, {K, N, 1, 1}, name, store_.back().data());
        w->layout = kiln::Layout::Packed16;
        return w;
    }
    void compute() {
        backend_.set_profiling(true);
        sched_.allocate(g);
        for (Tensor* n : g.nodes()) {
            if (!kiln::op_aliases_src0(n->op)) std::memset(n->data, 0xff, n->nbytes());
        }
        sched_.compute(g);
    }
    // The profile's row names (a fused product's names the nodes it took in).
    std::vector<std::string> op_names() const {
        std::vector<std::string> out;
        for (const auto& t : backend_.op_times()) out.push_back(t.name);
        return out;
    }

private:
    CpuBackend backend_;
    Scheduler sched_;
    std::deque<std::vector<uint8_t>> store_;
};

std::vector<float> values(const Tensor* t) {
    std::vector<float> v(static_cast<size_t>(t->nelements()));
    std::memcpy(v.data(), t->data, v.size() * sizeof(float));
    return v;
}

bool has_name(const std::vector<std::string>& names, const std::string& want) {
    for (const auto& n : names) {
        if (n == want) return true;
    }
    return false;
}

struct Weights {
    Type q, k, v, gate, up, down;
};

// A llama layer's inputs: activations and norm weights, and packed weights wq, wk, wv [K, K / 64 /
// 64], wg, wu [K, F], wd [F, K] of the given types.
struct LayerData {
    int64_t K, F, M;
    Weights types;
    std::vector<float> x, a, y, w1, w2;
    std::vector<uint8_t> wq, wk, wv, wg, wu, wd;
};
LayerData layer_data(std::mt19937& rng, const Weights& wt, int64_t K, int64_t F) {
    LayerData d;
    d.K = K;
    d.F = F;
    d.M = 0;
    d.types = wt;
    d.w1 = randn(rng, K);
    d.w2 = randn(rng, K);
    d.wq = packed_weights(rng, wt.q, K, K);
    d.wk = packed_weights(rng, wt.k, K, 64);
    d.wv = packed_weights(rng, wt.v, K, 64);
    d.wg = packed_weights(rng, wt.gate, K, F);
    d.wu = packed_weights(rng, wt.up, K, F);
    d.wd = packed_weights(rng, wt.down, F, K);
    return d;
}
void set_rows(LayerData& d, std::mt19937& rng, int64_t M) {
    d.M = M;
    d.x = randn(rng, d.K * M);
    d.a = randn(rng, d.K * M, 0.5f);
    d.y = randn(rng, d.K * M, 0.5f);
}

// One llama layer's shape: h = x + a; q, k, v of rms_norm(h) * w1; gate, up of rms_norm(h2) * w2
// with h2 = h + y; down of swiglu(gate, up); out = h2 + down. Returns the outputs to compare.
std::vector<Tensor*> build_layer(Harness& hs, const LayerData& d) {
    Graph& g = hs.g;
    const int64_t K = d.K, F = d.F, M = d.M;
    const Weights& wt = d.types;
    Tensor* x = hs.f32({K, M, 1, 1}, d.x, "x");
    Tensor* a = hs.f32({K, M, 1, 1}, d.a, "a");
    Tensor* y = hs.f32({K, M, 1, 1}, d.y, "y");
    Tensor* w1 = hs.f32({K, 1, 1, 1}, d.w1, "w1");
    Tensor* w2 = hs.f32({K, 1, 1, 1}, d.w2, "w2");
    Tensor* wq = hs.packed(wt.q, K, K, d.wq, "wq");
    Tensor* wk = hs.packed(wt.k, K, 64, d.wk, "wk");
    Tensor* wv = hs.packed(wt.v, K, 64, d.wv, "wv");
    Tensor* wg = hs.packed(wt.gate, K, F, d.wg, "wg");
    Tensor* wu = hs.packed(wt.up, K, F, d.wu, "wu");
    Tensor* wd = hs.packed(wt.down, F, K, d.wd, "wd");

    Tensor* h = g.add(x, a, "attn_residual");
    Tensor* n1 = g.mul(g.rms_norm(h, 1e-5f, "attn_norm"), w1, "attn_norm");
    Tensor* q = g.mul_mat(wq, n1, "q");
    Tensor* k = g.mul_mat(wk, n1, "k");
    Tensor* v = g.mul_mat(wv, n1, "v");
    Tensor* h2 = g.add(h, y, "ffn_residual");
    Tensor* n2 = g.mul(g.rms_norm(h2, 1e-5f, "ffn_norm"), w2, "ffn_norm");
    Tensor* gate = g.mul_mat(wg, n2, "ffn_gate");
    Tensor* up = g.mul_mat(wu, n2, "ffn_up");
    Tensor* act = g.swiglu(gate, up, "ffn_act");
    Tensor* down = g.mul_mat(wd, act, "ffn_out");
    Tensor* out = g.add(h2, down, "out");
    std::vector<Tensor*> outs = {q, k, v, h, h2, gate, up, down, out};
    for (Tensor* t : outs) g.mark_output(t);
    return outs;
}

TEST(FusedActs, LayerMatchesUnfusedBitForBit) {
    const Weights cases[] = {
        {Type::Q4_0, Type::Q4_0, Type::Q4_0, Type::Q4_0, Type::Q4_0, Type::Q4_0},
        {Type::Q4_K, Type::Q4_K, Type::Q6_K, Type::Q4_K, Type::Q4_K, Type::Q6_K},  // q, k and v: two activation formats
        {Type::Q8_0, Type::Q8_0, Type::Q8_0, Type::F16, Type::F16, Type::Q8_0},
    };
    // K: a whole number of norm chunks (256), or 3 with the last short (640: legacy formats only;
    // K-quants take whole super-blocks); F: 2 super-blocks + 64, or 3 super-blocks.
    for (const auto& wt : cases) {
        const bool k_quants = wt.v == Type::Q6_K;
        for (int64_t K : {int64_t{512}, k_quants ? int64_t{768} : int64_t{640}}) {
            const int64_t F = k_quants ? 768 : 576;
            std::mt19937 rng(21);
            LayerData data = layer_data(rng, wt, K, F);
            for (int64_t M : {1, 2, 5}) {
                set_rows(data, rng, M);
                for (MatmulPrecision prec : {MatmulPrecision::Fast, MatmulPrecision::Precise}) {
                    for (int nth : {1, 2, 3}) {
                        SCOPED_TRACE(std::string(kiln::type_name(wt.q)) + "/" + std::string(kiln::type_name(wt.v)) + "/" + std::string(kiln::type_name(wt.gate)) +
                                     " K=" + std::to_string(K) + " M=" + std::to_string(M) +
                                     (prec == MatmulPrecision::Fast ? " fast" : " precise") + " threads=" + std::to_string(nth));
                        Harness fused(nth, prec, true), plain(nth, prec, false);
                        const auto got = build_layer(fused, data);
                        const auto want = build_layer(plain, data);
                        fused.compute();
                        plain.compute();
                        for (size_t i = 0; i < got.size(); ++i) {
                            const auto gv = values(got[i]), wv = values(want[i]);
                            ASSERT_EQ(gv.size(), wv.size());
                            EXPECT_EQ(0, std::memcmp(gv.data(), wv.data(), gv.size() * sizeof(float))) << got[i]->name;
                        }
                        // The fusion happened (the q/k/v group took the norm but not the add: h is
                        // an output of its own, read by the next add too, which it fused).
                        const auto names = fused.op_names();
                        EXPECT_TRUE(has_name(names, "mul_mat q+k+v (+add,rms_norm,mul)")) << testing::PrintToString(names);
                        EXPECT_TRUE(has_name(names, "mul_mat ffn_gate+ffn_up (+add,rms_norm,mul)")) << testing::PrintToString(names);
                        EXPECT_TRUE(has_name(names, "mul_mat ffn_out (+swiglu)")) << testing::PrintToString(names);
                        EXPECT_FALSE(has_name(plain.op_names(), "mul_mat ffn_out (+swiglu)"));
                    }
                }
            }
        }
    }
}

// Results read by another node or by the caller are not fused away: the norm's weighted result
// read by an add besides the products, the norm itself marked as an output, the gated activation
// read twice. The graph computes as without fusion.
TEST(FusedActs, ResultsReadElsewhereAreNotFused) {
    std::mt19937 seed(22);
    const int64_t K = 512, N = 64, M = 1;
    for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE("variant " + std::to_string(variant));
        std::vector<float> first;
        for (bool fuse : {true, false}) {
            std::mt19937 rng = seed;
            Harness hs(2, MatmulPrecision::Auto, fuse);
            Graph& g = hs.g;
            Tensor* x = hs.f32({K, M, 1, 1}, randn(rng, K * M), "x");
            Tensor* u = hs.f32({K, M, 1, 1}, randn(rng, K * M), "u");
            Tensor* w = hs.f32({K, 1, 1, 1}, randn(rng, K), "w");
            Tensor* wm = hs.packed(Type::Q4_0, K, N, packed_weights(rng, Type::Q4_0, K, N), "wm");
            Tensor* out = nullptr;
            if (variant == 0) {
                Tensor* n = g.mul(g.rms_norm(x, 1e-6f, "norm"), w, "norm");
                Tensor* p = g.mul_mat(wm, n, "p");
                out = g.add(n, x, "other_reader");
                g.mark_output(p);
            } else if (variant == 1) {
                Tensor* r = g.rms_norm(x, 1e-6f, "norm");
                g.mark_output(r);
                out = g.mul_mat(wm, g.mul(r, w, "norm"), "p");
                g.mark_output(r);
            } else {
                Tensor* act = g.swiglu(x, u, "act");
                Tensor* p = g.mul_mat(wm, act, "p");
                out = g.mul(act, x, "other_reader");
                g.mark_output(p);
            }
            g.mark_output(out);
            hs.compute();
            const auto v = values(out);
            if (fuse) {
                first = v;
                for (const auto& name : hs.op_names()) EXPECT_EQ(name.find("(+"), std::string::npos) << name;
            } else {
                EXPECT_EQ(0, std::memcmp(first.data(), v.data(), v.size() * sizeof(float)));
            }
        }
    }
}

}  // namespace
