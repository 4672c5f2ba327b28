// The scheduler: memory reuse by liveness, outputs and aliases, splitting a
// graph between backends (with a fake "device" backend whose memory the
// scheduler may only reach through Buffer::read/write), and the graph
// builders' shape checks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/kernels/activations.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/ptr_map.h"
#include "backends/scheduler.h"
#include "core/graph.h"
#include "core/quant.h"
#include "core/types.h"

namespace {
// SiLU exactly as the CPU backend computes it (its activation kernels for the selected
// instruction set), so results can be compared bit for bit.
float silu_ref(float x) {
    float y;
    kiln::cpu::activation_kernels().silu(&x, &y, 1);
    return y;
}
}  // namespace

namespace {

using kiln::AttentionParams;
using kiln::Backend;
using kiln::Buffer;
using kiln::DeviceMemory;
using kiln::Graph;
using kiln::MatmulPrecision;
using kiln::Op;
using kiln::RopeMode;
using kiln::Scheduler;
using kiln::Tensor;
using kiln::Type;
using kiln::cpu::CpuBackend;
using kiln::cpu::CpuBackendOptions;

std::vector<float> randn(std::mt19937& rng, size_t n) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

std::vector<float> read_f32(const Tensor* t) {
    std::vector<float> out(static_cast<size_t>(t->nelements()));
    size_t o = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
                const auto* r = reinterpret_cast<const float*>(t->row(i1, i2, i3));
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) out[o++] = r[i0];
            }
    return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- a fake device backend ----------------------------------------------------------------

// Memory ranges owned by a fake device.
struct Regions {
    std::set<std::pair<uintptr_t, uintptr_t>> ranges;  // [begin, end)
    bool contains(const void* p, size_t n) const {
        const auto b = reinterpret_cast<uintptr_t>(p);
        for (auto [lo, hi] : ranges) {
            if (b >= lo && b + n <= hi) return true;
        }
        return false;
    }
    bool overlaps(const void* p, size_t n) const {
        const auto b = reinterpret_cast<uintptr_t>(p);
        for (auto [lo, hi] : ranges) {
            if (b < hi && b + n > lo) return true;
        }
        return false;
    }
};

// "Device" memory: a separate host allocation (so the inner CPU backend can compute on it), but the
// scheduler must only touch it through write()/read(), which count and bounds-check every call.
class DeviceBuffer final : public Buffer {
public:
    DeviceBuffer(size_t bytes, Regions& regions, size_t& writes, size_t& reads, size_t& bytes_moved)
        : mem_(bytes + 64), size_(bytes), regions_(regions), writes_(writes), reads_(reads), moved_(bytes_moved) {
        range_ = {reinterpret_cast<uintptr_t>(base()), reinterpret_cast<uintptr_t>(base()) + bytes};
        regions_.ranges.insert(range_);
    }
    ~DeviceBuffer() override { regions_.ranges.erase(range_); }
    void* base() override {
        auto p = reinterpret_cast<uintptr_t>(mem_.data());
        return reinterpret_cast<void*>((p + 63) / 64 * 64);
    }
    size_t size() const override { return size_; }
    void write(size_t off, const void* src, size_t n) override {
        if (off > size_ || n > size_ - off) {
            throw std::out_of_range("fake device: write of " + std::to_string(n) + " bytes at offset " +
                                    std::to_string(off) + " of a " + std::to_string(size_) + "-byte buffer");
        }
        std::memcpy(static_cast<uint8_t*>(base()) + off, src, n);
        ++writes_;
        moved_ += n;
    }
    void read(size_t off, void* dst, size_t n) const override {
        if (off > size_ || n > size_ - off) {
            throw std::out_of_range("fake device: read of " + std::to_string(n) + " bytes at offset " +
                                    std::to_string(off) + " of a " + std::to_string(size_) + "-byte buffer");
        }
        std::memcpy(dst, static_cast<const uint8_t*>(const_cast<DeviceBuffer*>(this)->base()) + off, n);
        ++reads_;
        moved_ += n;
    }

private:
    std::vector<uint8_t> mem_;
    size_t size_;
    std::pair<uintptr_t, uintptr_t> range_;
    Regions& regions_;
    size_t& writes_;
    size_t& reads_;
    size_t& moved_;
};

// Every tensor a node touches (itself and its sources), for memory-placement checks.
template <typename F>
void for_each_touched(std::span<Tensor* const> nodes, F f) {
    for (const Tensor* n : nodes) {
        if (n->op == Op::None) continue;
        f(*n, *n);
        for (const Tensor* s : n->src) {
            if (s) f(*n, *s);
        }
    }
}

// A device that is not the host: computes with an inner CPU backend, but checks that every tensor
// of every node it runs lies in its own memory (as a GPU could only address that).
class FakeDevice final : public Backend {
public:
    explicit FakeDevice(int n_threads) : inner_(CpuBackendOptions{.n_threads = n_threads, .matmul_precision = MatmulPrecision::Fast}) {}
    std::string_view name() const override { return "FAKE"; }
    bool is_host() const override { return false; }
    bool supports_op(const Tensor& node) const override {
        return !refused.count(node.op) && inner_.supports_op(node);
    }
    std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override {
        return std::make_unique<DeviceBuffer>(bytes, regions, writes, reads, bytes_moved);
    }
    void compute(std::span<Tensor* const> nodes) override {
        ++computes;
        for_each_touched(nodes, [&](const Tensor& n, const Tensor& t) {
            if (!regions.contains(t.data, t.nbytes())) {
                violations.push_back(std::string(kiln::op_name(n.op)) + " '" + n.name + "' touches '" + t.name +
                                     "' outside device memory");
            }
        });
        nodes_run += nodes.size();
        inner_.compute(nodes);
    }
    DeviceMemory memory() const override { return {1u << 30, 1u << 30}; }

    Regions regions;
    std::set<Op> refused;  // ops this device claims not to support
    size_t writes = 0, reads = 0, bytes_moved = 0, computes = 0, nodes_run = 0;
    std::vector<std::string> violations;
    void reset_counts() { writes = reads = bytes_moved = computes = nodes_run = 0; }

private:
    CpuBackend inner_;
};

// The host backend, checking that it never touches the fake device's memory directly.
class HostSpy final : public Backend {
public:
    HostSpy(int n_threads, const FakeDevice* dev) : inner_(CpuBackendOptions{.n_threads = n_threads, .matmul_precision = MatmulPrecision::Fast}), dev_(dev) {}
    std::string_view name() const override { return inner_.name(); }
    bool is_host() const override { return true; }
    bool supports_op(const Tensor& node) const override { return inner_.supports_op(node); }
    std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override { return inner_.alloc_buffer(bytes); }
    void compute(std::span<Tensor* const> nodes) override {
        ++computes;
        if (dev_) {
            for_each_touched(nodes, [&](const Tensor& n, const Tensor& t) {
                if (dev_->regions.overlaps(t.data, t.nbytes())) {
                    violations.push_back(std::string(kiln::op_name(n.op)) + " '" + n.name + "' touches '" + t.name +
                                         "' in device memory");
                }
            });
        }
        inner_.compute(nodes);
    }
    DeviceMemory memory() const override { return inner_.memory(); }
    std::vector<std::string> violations;
    size_t computes = 0;

private:
    CpuBackend inner_;
    const FakeDevice* dev_;
};

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += "  " + x + "\n";
    return s;
}

// ---- a small layered model -------------------------------------------------------------------

// x [d, T] -> per layer: x += silu(W_l * rms_norm(x)) -> logits = W_out * x.
struct TinyModel {
    int n_layers = 6;
    int64_t d = 64, T = 3, vocab = 40;
    Type wtype = Type::Q8_0;
    std::vector<std::vector<uint8_t>> w;  // quantized layer weights, then W_out
    std::vector<float> x;

    explicit TinyModel(int layers = 6, Type t = Type::Q8_0) : n_layers(layers), wtype(t) {
        std::mt19937 rng(42);
        for (int l = 0; l <= n_layers; ++l) {
            const int64_t rows = l < n_layers ? d : vocab;
            auto f = randn(rng, static_cast<size_t>(rows * d));
            for (auto& v : f) v *= 0.2f;
            std::vector<uint8_t> q(kiln::row_size(wtype, d) * static_cast<size_t>(rows));
            kiln::quantize(wtype, f.data(), q.data(), rows, d);
            w.push_back(std::move(q));
        }
        x = randn(rng, static_cast<size_t>(d * T));
    }

    struct Built {
        Tensor* input = nullptr;
        Tensor* out = nullptr;
        std::vector<Tensor*> weights;
    };

    // Weights in host memory unless place(l) says otherwise: then they are copied into a buffer of
    // `dev` (through Buffer::write, as a loader would) and declared with place_leaf.
    Built build(Graph& g, Scheduler* sched = nullptr, Backend* dev = nullptr, std::function<bool(int)> place = nullptr,
                std::vector<std::unique_ptr<Buffer>>* keep = nullptr) {
        Built b;
        b.input = g.input(Type::F32, {d, T, 1, 1}, "x_in");
        for (int l = 0; l <= n_layers; ++l) {
            const int64_t rows = l < n_layers ? d : vocab;
            Tensor* wt = g.leaf(wtype, {d, rows, 1, 1}, "w" + std::to_string(l), w[static_cast<size_t>(l)].data());
            if (place && place(l)) {
                auto buf = dev->alloc_buffer(w[static_cast<size_t>(l)].size());
                buf->write(0, w[static_cast<size_t>(l)].data(), w[static_cast<size_t>(l)].size());
                wt->data = buf->base();
                sched->place_leaf(wt, 0);
                keep->push_back(std::move(buf));
            }
            b.weights.push_back(wt);
        }
        Tensor* x = b.input;
        for (int l = 0; l < n_layers; ++l) {
            g.set_layer(l);
            Tensor* h = g.rms_norm(x, 1e-5f, "norm" + std::to_string(l));
            Tensor* y = g.mul_mat(b.weights[static_cast<size_t>(l)], h, "mm" + std::to_string(l));
            y = g.silu(y, "act" + std::to_string(l));
            x = g.add(x, y, "res" + std::to_string(l));
        }
        g.set_layer(-1);
        b.out = g.mul_mat(b.weights.back(), x, "logits");
        g.mark_output(b.out);
        return b;
    }
};

std::vector<float> single_backend_logits(const TinyModel& m, int n_threads) {
    TinyModel copy = m;
    CpuBackend cpu(CpuBackendOptions{.n_threads = n_threads, .matmul_precision = MatmulPrecision::Fast});
    Scheduler sched({&cpu}, nullptr);
    Graph g;
    auto b = copy.build(g);
    sched.allocate(g);
    EXPECT_EQ(sched.n_splits(), 1u);
    std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
    sched.compute(g);
    return read_f32(b.out);
}

// ---- liveness -----------------------------------------------------------------------------------

TEST(SchedulerMemory, LongChainReusesMemory) {
    CpuBackend cpu(CpuBackendOptions{.n_threads = 2, .matmul_precision = MatmulPrecision::Fast});
    Scheduler sched({&cpu}, nullptr);
    Graph g;
    const int64_t n = 1024, rows = 4;
    const size_t node_bytes = n * rows * sizeof(float);
    Tensor* x = g.input(Type::F32, {n, rows, 1, 1}, "x");
    Tensor* t = x;
    constexpr int kNodes = 64;
    for (int i = 0; i < kNodes; ++i) t = i % 2 ? g.scale(t, 1.0f + 1.0f / (i + 1)) : g.silu(t);
    g.mark_output(t);
    sched.allocate(g);
    const size_t arena = sched.buffer_sizes().at(0);
    // The input plus two live results at a time (a node's source and itself), 64-byte aligned.
    EXPECT_LE(arena, 3 * node_bytes + 3 * 64) << "sum of node sizes " << kNodes * node_bytes;
    EXPECT_GE(arena, 2 * node_bytes);
    std::mt19937 rng(1);
    const auto xv = randn(rng, static_cast<size_t>(n * rows));
    std::memcpy(x->data, xv.data(), node_bytes);
    sched.compute(g);
    // Same float ops in the same order: the exact same bits.
    std::vector<float> want = xv;
    for (int i = 0; i < kNodes; ++i) {
        for (float& v : want) v = i % 2 ? v * (1.0f + 1.0f / (i + 1)) : silu_ref(v);
    }
    EXPECT_TRUE(same_bits(read_f32(t), want));
    // The input is still intact (inputs live through the whole graph).
    EXPECT_EQ(0, std::memcmp(x->data, xv.data(), node_bytes));
    // Re-planning a graph of the same size keeps the arena.
    sched.allocate(g);
    EXPECT_EQ(sched.buffer_sizes().at(0), arena);
}

TEST(SchedulerMemory, OutputsStayValidAfterCompute) {
    CpuBackend cpu(CpuBackendOptions{.n_threads = 3, .matmul_precision = MatmulPrecision::Fast});
    Scheduler sched({&cpu}, nullptr);
    Graph g;
    const int64_t n = 300;
    Tensor* x = g.input(Type::F32, {n, 2, 1, 1}, "x");
    std::vector<Tensor*> outs;
    std::vector<float> scales;
    Tensor* t = x;
    for (int i = 0; i < 40; ++i) {
        const float s = 1.0f + 0.01f * static_cast<float>(i);
        t = g.scale(t, s, "s" + std::to_string(i));
        scales.push_back(s);
        if (i % 7 == 3) {
            g.mark_output(t);
            outs.push_back(t);
        }
    }
    // A far-away reader keeps an early result alive too.
    Tensor* early = g.silu(x, "early");
    for (int i = 0; i < 10; ++i) t = g.scale(t, 0.5f);
    Tensor* last = g.add(t, early, "last");
    g.mark_output(last);
    sched.allocate(g);
    std::set<const void*> distinct;
    for (Tensor* o : outs) distinct.insert(o->data);
    EXPECT_EQ(distinct.size(), outs.size()) << "outputs share memory";
    std::mt19937 rng(2);
    const auto xv = randn(rng, static_cast<size_t>(2 * n));
    std::memcpy(x->data, xv.data(), xv.size() * sizeof(float));
    sched.compute(g);
    std::vector<float> v = xv;
    size_t k = 0;
    for (int i = 0; i < 40; ++i) {
        for (float& f : v) f *= scales[static_cast<size_t>(i)];
        if (i % 7 == 3) {
            EXPECT_TRUE(same_bits(read_f32(outs[k++]), v)) << "output after node " << i;
        }
    }
    for (int i = 0; i < 10; ++i) {
        for (float& f : v) f *= 0.5f;
    }
    for (size_t i = 0; i < v.size(); ++i) v[i] += silu_ref(xv[i]);
    EXPECT_TRUE(same_bits(read_f32(last), v));
}

// An output that is a view of an intermediate result (e.g. the last token's row of the final norm,
// or a reshape of the logits) must keep the viewed memory alive.
TEST(SchedulerMemory, OutputViewKeepsItsSourceAlive) {
    CpuBackend cpu(CpuBackendOptions{.n_threads = 1, .matmul_precision = MatmulPrecision::Fast});
    Scheduler sched({&cpu}, nullptr);
    Graph g;
    const int64_t n = 64;
    Tensor* x = g.input(Type::F32, {n, 4, 1, 1}, "x");
    Tensor* b = g.silu(x, "b");
    Tensor* whole = g.reshape(b, {n * 4, 1, 1, 1}, "b_flat");
    Tensor* last_row = g.view(b, {n, 1, 1, 1}, {4, n * 4, n * 4, n * 4}, 3 * n * sizeof(float), "b_last");
    g.mark_output(whole);
    g.mark_output(last_row);
    // Later nodes of the same size that would happily take b's memory once it is free.
    Tensor* t = g.scale(x, 3.0f, "c");
    for (int i = 0; i < 4; ++i) t = g.scale(t, 2.0f);
    g.mark_output(t);
    sched.allocate(g);
    std::vector<float> xv(static_cast<size_t>(n * 4));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.01f * static_cast<float>(i) - 1.0f;
    std::memcpy(x->data, xv.data(), xv.size() * sizeof(float));
    sched.compute(g);
    std::vector<float> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = silu_ref(xv[i]);
    EXPECT_TRUE(same_bits(read_f32(whole), want)) << "reshape output was overwritten";
    EXPECT_TRUE(same_bits(read_f32(last_row), std::vector<float>(want.end() - n, want.end())))
        << "view output was overwritten";
}

TEST(SchedulerMemory, ViewsAndStoreRowsAlias) {
    CpuBackend cpu(CpuBackendOptions{.n_threads = 2, .matmul_precision = MatmulPrecision::Fast});
    Scheduler sched({&cpu}, nullptr);
    Graph g;
    const int64_t n = 32, cells = 6;
    Tensor* x = g.input(Type::F32, {n, 4, 1, 1}, "x");
    Tensor* a = g.scale(x, 2.0f, "a");
    Tensor* v = g.view(a, {n / 2, 2, 1, 1}, {4, n * 4 * 2, n * 4 * 4, n * 4 * 4}, n * 4 + 8, "a_view");
    Tensor* r = g.reshape(a, {n * 2, 2, 1, 1}, "a_reshape");
    Tensor* vv = g.view(v, {n / 2, 1, 1, 1}, {4, 64, 64, 64}, 0, "view_of_view");
    Tensor* out = g.add(v, v, "twice");
    std::vector<uint16_t> cache(static_cast<size_t>(n * cells), 0);
    Tensor* c = g.leaf(Type::F16, {n, cells, 1, 1}, "cache", cache.data());
    Tensor* ids = g.input(Type::I32, {4, 1, 1, 1}, "ids");
    Tensor* st = g.store_rows(c, a, ids, "store");
    Tensor* got = g.get_rows(st, ids, "reread");  // reads the cache through the store node
    g.mark_output(out);
    g.mark_output(got);
    sched.allocate(g);
    EXPECT_EQ(v->data, static_cast<uint8_t*>(a->data) + n * 4 + 8);
    EXPECT_EQ(r->data, a->data);
    EXPECT_EQ(vv->data, v->data);
    EXPECT_EQ(st->data, c->data);
    EXPECT_EQ(st->data, cache.data());
    std::vector<float> xv(static_cast<size_t>(n * 4));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i) * 0.25f;
    std::memcpy(x->data, xv.data(), xv.size() * sizeof(float));
    const int32_t idv[4] = {5, 1, 3, 0};
    std::memcpy(ids->data, idv, sizeof idv);
    sched.compute(g);
    const auto o = read_f32(out);
    for (int64_t i1 = 0; i1 < 2; ++i1)
        for (int64_t i0 = 0; i0 < n / 2; ++i0) {
            const float av = 2.0f * xv[static_cast<size_t>(n + 2 + i1 * 2 * n + i0)];
            EXPECT_EQ(o[static_cast<size_t>(i1 * n / 2 + i0)], av + av);
        }
    // Values are exact in f16 (multiples of 0.5 below 2048).
    const auto back = read_f32(got);
    for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i], 2.0f * xv[i]) << i;
    EXPECT_EQ(cache[2 * n], 0) << "cell 2 was not in ids";
}

// ---- splits between backends -------------------------------------------------------------

constexpr int kThreadsSplit = 2;

TEST(SchedulerSplit, SomeLayersOnADevice) {
    TinyModel m;
    const auto want = single_backend_logits(m, kThreadsSplit);
    FakeDevice dev(kThreadsSplit);
    HostSpy cpu(kThreadsSplit, &dev);
    std::vector<std::unique_ptr<Buffer>> weights;
    Scheduler sched({&dev, &cpu}, [](int l) { return l == 2 || l == 3 ? 0 : 1; });
    Graph g;
    auto b = m.build(g, &sched, &dev, [](int l) { return l == 2 || l == 3; }, &weights);
    sched.allocate(g);
    // cpu (layers 0-1) | device (layers 2-3) | cpu (layers 4-5 and the output)
    EXPECT_EQ(sched.n_splits(), 3u);
    for (Tensor* n : g.nodes()) {
        const int expect = n->layer == 2 || n->layer == 3 ? 0 : 1;
        EXPECT_EQ(sched.backend_of(n), expect) << n->name;
    }
    for (int run = 1; run <= 2; ++run) {
        dev.reset_counts();
        std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
        sched.compute(g);
        EXPECT_TRUE(same_bits(read_f32(b.out), want)) << "run " << run;
        // One copy in (the residual stream entering layer 2, shared by its two readers), one out.
        EXPECT_EQ(dev.writes, 1u);
        EXPECT_EQ(dev.reads, 1u);
        EXPECT_EQ(dev.bytes_moved, 2 * m.x.size() * sizeof(float));
        EXPECT_EQ(dev.computes, 1u);
        EXPECT_EQ(dev.nodes_run, 8u);
    }
    EXPECT_EQ(cpu.computes, 4u);
    EXPECT_TRUE(dev.violations.empty()) << join(dev.violations);
    EXPECT_TRUE(cpu.violations.empty()) << join(cpu.violations);
    EXPECT_GT(sched.buffer_sizes().at(0), 0u);
}

TEST(SchedulerSplit, HostWeightsAreCopiedToTheDevice) {
    TinyModel m;
    const auto want = single_backend_logits(m, kThreadsSplit);
    FakeDevice dev(kThreadsSplit);
    HostSpy cpu(kThreadsSplit, &dev);
    Scheduler sched({&dev, &cpu}, [](int l) { return l == 2 || l == 3 ? 0 : 1; });
    Graph g;
    auto b = m.build(g);  // weights stay in host memory
    sched.allocate(g);
    EXPECT_EQ(sched.n_splits(), 3u);
    std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
    sched.compute(g);
    EXPECT_TRUE(same_bits(read_f32(b.out), want));
    EXPECT_EQ(dev.writes, 3u);  // the residual stream and the two layers' weights
    EXPECT_EQ(dev.reads, 1u);
    EXPECT_TRUE(dev.violations.empty()) << join(dev.violations);
    EXPECT_TRUE(cpu.violations.empty()) << join(cpu.violations);
}

TEST(SchedulerSplit, AlternatingLayers) {
    TinyModel m;
    const auto want = single_backend_logits(m, kThreadsSplit);
    FakeDevice dev(kThreadsSplit);
    HostSpy cpu(kThreadsSplit, &dev);
    std::vector<std::unique_ptr<Buffer>> weights;
    auto on_dev = [](int l) { return l >= 0 && l % 2 == 1; };
    Scheduler sched({&dev, &cpu}, [&](int l) { return on_dev(l) ? 0 : 1; });
    Graph g;
    auto b = m.build(g, &sched, &dev, [&](int l) { return on_dev(l) || l == 6; }, &weights);
    dev.reset_counts();  // the weight uploads
    sched.allocate(g);
    // cpu L0 | dev L1 | cpu L2 | dev L3 | cpu L4 | dev L5 + output (which follows its input)
    EXPECT_EQ(sched.n_splits(), 6u);
    EXPECT_EQ(sched.backend_of(b.out), 0);
    std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
    sched.compute(g);
    EXPECT_EQ(dev.writes, 3u);  // into L1, L3, L5
    EXPECT_EQ(dev.reads, 3u);   // out of L1, L3, and the output copied back to host memory
    EXPECT_TRUE(same_bits(read_f32(b.out), want));
    EXPECT_TRUE(dev.violations.empty()) << join(dev.violations);
    EXPECT_TRUE(cpu.violations.empty()) << join(cpu.violations);
}

// A device that refuses an op: those nodes fall back to the CPU (more splits, same result).
TEST(SchedulerSplit, UnsupportedOpsFallBackToTheCpu) {
    TinyModel m;
    const auto want = single_backend_logits(m, kThreadsSplit);
    FakeDevice dev(kThreadsSplit);
    dev.refused.insert(Op::Silu);
    HostSpy cpu(kThreadsSplit, &dev);
    Scheduler sched({&dev, &cpu}, [](int l) { return l >= 0 ? 0 : 1; });  // every layer on the device
    Graph g;
    auto b = m.build(g);
    sched.allocate(g);
    for (Tensor* n : g.nodes()) {
        if (n->op == Op::Silu) {
            EXPECT_EQ(sched.backend_of(n), 1) << n->name;
        }
        if (n->op == Op::MulMat && n->layer >= 0) {
            EXPECT_EQ(sched.backend_of(n), 0) << n->name;
        }
    }
    // per layer: device (norm, mm) | cpu (silu) | device (add) ..., then logits follow the last add
    EXPECT_EQ(sched.n_splits(), 2u * 6u + 1u);
    std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
    sched.compute(g);
    EXPECT_TRUE(same_bits(read_f32(b.out), want));
    EXPECT_TRUE(dev.violations.empty()) << join(dev.violations);
    EXPECT_TRUE(cpu.violations.empty()) << join(cpu.violations);
}

// Weights uploaded to the device but read by a CPU node (here: the device refuses mul_mat) must be
// copied from the buffer that holds them, or refused with a clear error when the graph is planned.
// Scheduler::compute instead reads a device-resident leaf through the scheduler's own arena of that
// backend (scheduler.cpp, the copy loop of compute()): an offset from an unrelated allocation.
TEST(SchedulerSplit, DeviceLeafReadByTheCpu) {
    TinyModel m;
    const auto want = single_backend_logits(m, kThreadsSplit);
    FakeDevice dev(kThreadsSplit);
    dev.refused.insert(Op::MulMat);
    HostSpy cpu(kThreadsSplit, &dev);
    std::vector<std::unique_ptr<Buffer>> weights;
    Scheduler sched({&dev, &cpu}, [](int l) { return l >= 0 ? 0 : 1; });
    Graph g;
    auto b = m.build(g, &sched, &dev, [](int l) { return l < 6; }, &weights);
    try {
        sched.allocate(g);
    } catch (const std::runtime_error& e) {
        // Acceptable: refused at planning time, naming the weight.
        EXPECT_NE(std::string(e.what()).find("w0"), std::string::npos) << e.what();
        return;
    }
    std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
    ASSERT_NO_THROW(sched.compute(g));
    EXPECT_TRUE(same_bits(read_f32(b.out), want));
    EXPECT_TRUE(cpu.violations.empty()) << join(cpu.violations);
}

// The KV cache in device memory with the layer on the device: store_rows runs there, and its row
// ids (a graph input in host memory) must be copied like any other source.
TEST(SchedulerSplit, StoreRowsIntoDeviceCacheCopiesItsSources) {
    FakeDevice dev(kThreadsSplit);
    HostSpy cpu(kThreadsSplit, &dev);
    Scheduler sched({&dev, &cpu}, [](int l) { return l == 0 ? 0 : 1; });
    const int64_t n = 32, cells = 8;
    auto cache_buf = dev.alloc_buffer(kiln::row_size(Type::F16, n) * cells);
    std::vector<uint8_t> zeros(cache_buf->size(), 0);
    cache_buf->write(0, zeros.data(), zeros.size());
    Graph g;
    Tensor* x = g.input(Type::F32, {n, 2, 1, 1}, "x");
    Tensor* ids = g.input(Type::I32, {2, 1, 1, 1}, "ids");
    Tensor* cache = g.leaf(Type::F16, {n, cells, 1, 1}, "k_cache", cache_buf->base());
    sched.place_leaf(cache, 0);
    g.set_layer(0);
    Tensor* k = g.scale(x, 2.0f, "k");
    Tensor* st = g.store_rows(cache, k, ids, "k_store");
    Tensor* kview = g.view(st, {n, cells, 1, 1}, st->nb, 0, "k_view");  // as the model views its cache
    Tensor* rows = g.get_rows(kview, ids, "k_back");
    g.set_layer(-1);
    Tensor* out = g.scale(rows, 1.0f, "out");
    g.set_layer(1);
    Tensor* host_out = g.add(out, out, "host_out");  // forces the result back to the CPU
    g.mark_output(host_out);
    sched.allocate(g);
    EXPECT_EQ(sched.backend_of(st), 0);
    // The view of the device cache lives on the device too: readers there must not get a copy (which
    // would be taken before the split runs, i.e. before store_rows wrote this batch's rows).
    EXPECT_EQ(sched.backend_of(kview), 0);
    std::vector<float> xv(static_cast<size_t>(2 * n));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
    std::memcpy(x->data, xv.data(), xv.size() * sizeof(float));
    const int32_t idv[2] = {6, 3};
    std::memcpy(ids->data, idv, sizeof idv);
    ASSERT_NO_THROW(sched.compute(g));
    const auto got = read_f32(host_out);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 4.0f * xv[i]) << i;
    EXPECT_TRUE(dev.violations.empty()) << join(dev.violations);
    EXPECT_TRUE(cpu.violations.empty()) << join(cpu.violations);
}

// The other direction: the cache in host memory, the layer on the device. store_rows runs where the
// cache is (the CPU), so the K rows computed on the device must be copied back first.
TEST(SchedulerSplit, StoreRowsIntoHostCacheFromDeviceRows) {
    FakeDevice dev(kThreadsSplit);
    HostSpy cpu(kThreadsSplit, &dev);
    Scheduler sched({&dev, &cpu}, [](int l) { return l == 0 ? 0 : 1; });
    const int64_t n = 32, cells = 8;
    std::vector<float> cache_mem(static_cast<size_t>(n * cells), 0.0f);
    Graph g;
    Tensor* x = g.input(Type::F32, {n, 2, 1, 1}, "x");
    Tensor* ids = g.input(Type::I32, {2, 1, 1, 1}, "ids");
    Tensor* cache = g.leaf(Type::F32, {n, cells, 1, 1}, "k_cache", cache_mem.data());
    g.set_layer(0);
    Tensor* k = g.scale(x, 2.0f, "k");
    Tensor* st = g.store_rows(cache, k, ids, "k_store");
    g.mark_output(st);
    sched.allocate(g);
    EXPECT_EQ(sched.backend_of(k), 0);
    EXPECT_EQ(sched.backend_of(st), 1);
    std::vector<float> xv(static_cast<size_t>(2 * n));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
    std::memcpy(x->data, xv.data(), xv.size() * sizeof(float));
    const int32_t idv[2] = {6, 3};
    std::memcpy(ids->data, idv, sizeof idv);
    ASSERT_NO_THROW(sched.compute(g));
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(cache_mem[static_cast<size_t>(6 * n + i)], 2.0f * xv[static_cast<size_t>(i)]);
        EXPECT_EQ(cache_mem[static_cast<size_t>(3 * n + i)], 2.0f * xv[static_cast<size_t>(n + i)]);
    }
    EXPECT_TRUE(dev.violations.empty()) << join(dev.violations);
    EXPECT_TRUE(cpu.violations.empty()) << join(cpu.violations);
}

// Outputs the caller reads after compute (Context copies logits with memcpy from Tensor::data) must
// end up in host memory even when the nodes producing them run on a device.
TEST(SchedulerSplit, OutputsComputedOnTheDeviceAreHostReadable) {
    TinyModel m(2);
    FakeDevice dev(kThreadsSplit);
    HostSpy cpu(kThreadsSplit, &dev);
    std::vector<std::unique_ptr<Buffer>> weights;
    Scheduler sched({&dev, &cpu}, [](int l) { return l >= 0 ? 0 : 1; });  // all layers offloaded
    Graph g;
    auto b = m.build(g, &sched, &dev, [](int) { return true; }, &weights);
    sched.allocate(g);
    const uint64_t plan = sched.plan_id();
    // Run twice with different inputs, as Context runs a graph again for a batch of the same shape:
    // the second run must compute into device memory again, not into the first run's host copy.
    TinyModel other = m;
    for (float& v : other.x) v = -0.5f * v + 0.25f;
    for (const TinyModel* run : {&m, &other}) {
        std::memcpy(b.input->data, run->x.data(), run->x.size() * sizeof(float));
        sched.compute(g);
        EXPECT_FALSE(dev.regions.overlaps(b.out->data, b.out->nbytes()))
            << "output '" << b.out->name << "' is left in device memory";
        EXPECT_TRUE(same_bits(read_f32(b.out), single_backend_logits(*run, kThreadsSplit))) << (run == &m ? "first run" : "second run");
    }
    EXPECT_TRUE(dev.violations.empty()) << join(dev.violations);
    EXPECT_EQ(sched.plan_id(), plan) << "compute() must not change the plan";
    Graph g2;
    m.build(g2, &sched, &dev, [](int) { return true; }, &weights);
    sched.allocate(g2);
    EXPECT_NE(sched.plan_id(), plan) << "allocate() must change the plan";
}

TEST(SchedulerSplit, LayerPlacementOutOfRangeMeansCpu) {
    TinyModel m(3);
    const auto want = single_backend_logits(m, kThreadsSplit);
    FakeDevice dev(kThreadsSplit);
    HostSpy cpu(kThreadsSplit, &dev);
    Scheduler sched({&dev, &cpu}, [](int l) { return l == 0 ? -5 : 7; });
    Graph g;
    auto b = m.build(g);
    sched.allocate(g);
    EXPECT_EQ(sched.n_splits(), 1u);
    for (Tensor* n : g.nodes()) EXPECT_EQ(sched.backend_of(n), 1) << n->name;
    std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
    sched.compute(g);
    EXPECT_TRUE(same_bits(read_f32(b.out), want));
    EXPECT_EQ(dev.computes, 0u);
}

TEST(SchedulerSplit, LastBackendMustBeHost) {
    FakeDevice dev(1);
    EXPECT_THROW(Scheduler({&dev}, nullptr), std::invalid_argument);
    EXPECT_THROW(Scheduler({}, nullptr), std::invalid_argument);
}

// ---- backend plans ------------------------------------------------------------------------------

// The CPU backend with its plans counted (Backend::make_plan / compute_planned).
class PlanSpy final : public Backend {
public:
    explicit PlanSpy(int n_threads) : inner(CpuBackendOptions{.n_threads = n_threads, .matmul_precision = MatmulPrecision::Fast}) {}
    std::string_view name() const override { return inner.name(); }
    bool is_host() const override { return true; }
    bool supports_op(const Tensor& node) const override { return inner.supports_op(node); }
    std::unique_ptr<Buffer> alloc_buffer(size_t bytes) override { return inner.alloc_buffer(bytes); }
    void compute(std::span<Tensor* const> nodes) override {
        ++unplanned;
        inner.compute(nodes);
    }
    std::unique_ptr<kiln::BackendPlan> make_plan(std::span<Tensor* const> nodes) override {
        ++made;
        return inner.make_plan(nodes);
    }
    void compute_planned(std::span<Tensor* const> nodes, const kiln::BackendPlan* plan) override {
        given.push_back(plan);
        inner.compute_planned(nodes, plan);
    }
    DeviceMemory memory() const override { return inner.memory(); }

    CpuBackend inner;
    size_t made = 0, unplanned = 0;
    std::vector<const kiln::BackendPlan*> given;
};

TEST(SchedulerPlans, OnePlanPerAllocationKeptWhileTheGraphRunsAgain) {
    TinyModel m;
    const auto want = single_backend_logits(m, kThreadsSplit);
    PlanSpy cpu(kThreadsSplit);
    Scheduler sched({&cpu}, nullptr);
    Graph g;
    auto b = m.build(g);
    sched.allocate(g);
    for (int run = 1; run <= 3; ++run) {
        std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
        sched.compute(g);
        EXPECT_TRUE(same_bits(read_f32(b.out), want)) << "run " << run;
    }
    EXPECT_EQ(cpu.made, 1u);
    EXPECT_EQ(cpu.unplanned, 0u);
    ASSERT_EQ(cpu.given.size(), 3u);
    EXPECT_NE(cpu.given[0], nullptr);
    EXPECT_EQ(cpu.given[1], cpu.given[0]);
    EXPECT_EQ(cpu.given[2], cpu.given[0]);
    // A new allocation (a new plan id) makes a new plan.
    sched.allocate(g);
    std::memcpy(b.input->data, m.x.data(), m.x.size() * sizeof(float));
    sched.compute(g);
    EXPECT_TRUE(same_bits(read_f32(b.out), want));
    EXPECT_EQ(cpu.made, 2u);
}

// A plan handed back with other nodes, or for fewer threads than now run, is not used: the
// backend plans those nodes again (with the first plan's scratch for one thread, two threads
// would write past it: ASan in the debug preset).
TEST(SchedulerPlans, APlanForOtherNodesOrThreadsIsNotUsed) {
    TinyModel big(6), small(3);
    const auto want_big = single_backend_logits(big, 2);
    const auto want_small = single_backend_logits(small, 2);
    CpuBackend cpu(CpuBackendOptions{.n_threads = 2, .matmul_precision = MatmulPrecision::Fast});
    Scheduler sched_big({&cpu}, nullptr), sched_small({&cpu}, nullptr);
    Graph gb, gs;
    auto bb = big.build(gb);
    auto bs = small.build(gs);
    sched_big.allocate(gb);
    sched_small.allocate(gs);
    cpu.set_active_threads(1);
    const std::unique_ptr<kiln::BackendPlan> plan_small = cpu.make_plan(gs.nodes());
    cpu.set_active_threads(2);
    std::memcpy(bb.input->data, big.x.data(), big.x.size() * sizeof(float));
    cpu.compute_planned(gb.nodes(), plan_small.get());
    EXPECT_TRUE(same_bits(read_f32(bb.out), want_big));
    std::memcpy(bs.input->data, small.x.data(), small.x.size() * sizeof(float));
    cpu.compute_planned(gs.nodes(), plan_small.get());
    EXPECT_TRUE(same_bits(read_f32(bs.out), want_small));
}

// ---- graph builders reject bad shapes ---------------------------------------------------------

// Runs f, expecting std::invalid_argument whose message names op.
::testing::AssertionResult rejects(const std::function<void()>& f, const std::string& op) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        if (std::string(e.what()).find(op) == std::string::npos) {
            return ::testing::AssertionFailure() << "message does not name " << op << ": " << e.what();
        }
        return ::testing::AssertionSuccess();
    } catch (const std::exception& e) {
        return ::testing::AssertionFailure() << "threw something else: " << e.what();
    }
    return ::testing::AssertionFailure() << op << ": nothing thrown";
}

TEST(GraphBuilders, RejectBadShapes) {
    Graph g;
    Tensor* a = g.leaf(Type::F32, {8, 4, 1, 1}, "a");
    Tensor* b = g.leaf(Type::F32, {8, 3, 1, 1}, "b");
    Tensor* f16 = g.leaf(Type::F16, {8, 4, 1, 1}, "h");
    Tensor* ids = g.leaf(Type::I32, {4, 1, 1, 1}, "ids");
    Tensor* ids2d = g.leaf(Type::I32, {4, 2, 1, 1}, "ids2d");
    Tensor* w3d = g.leaf(Type::F32, {8, 4, 2, 1}, "w3d");
    Tensor* q = g.leaf(Type::F32, {16, 4, 3, 1}, "q");
    Tensor* k = g.leaf(Type::F16, {16, 2, 10, 1}, "k");
    Tensor* v = g.leaf(Type::F16, {16, 2, 10, 1}, "v");
    Tensor* mask = g.leaf(Type::F32, {10, 3, 1, 1}, "mask");
    Tensor* pos = g.leaf(Type::I32, {3, 1, 1, 1}, "pos");

    EXPECT_TRUE(rejects([&] { g.get_rows(a, a); }, "get_rows"));
    EXPECT_TRUE(rejects([&] { g.get_rows(a, ids2d); }, "get_rows"));
    EXPECT_TRUE(rejects([&] { g.get_rows(w3d, ids); }, "get_rows"));
    EXPECT_TRUE(rejects([&] { g.mul_mat(a, g.leaf(Type::F32, {7, 2, 1, 1}, "x7")); }, "mul_mat"));
    EXPECT_TRUE(rejects([&] { g.mul_mat(w3d, a); }, "mul_mat"));
    EXPECT_TRUE(rejects([&] { g.mul_mat(a, f16); }, "mul_mat"));
    EXPECT_TRUE(rejects([&] { g.add(a, b); }, "add"));
    EXPECT_TRUE(rejects([&] { g.add(a, f16); }, "add"));
    EXPECT_TRUE(rejects([&] { g.add(a, g.leaf(Type::F32, {3, 1, 1, 1}, "b3")); }, "add"));
    EXPECT_TRUE(rejects([&] { g.mul(a, b); }, "mul"));
    EXPECT_TRUE(rejects([&] { g.mul(f16, a); }, "mul"));
    EXPECT_TRUE(rejects([&] { g.rms_norm(f16, 1e-5f); }, "rms_norm"));
    EXPECT_TRUE(rejects([&] { g.rope(q, g.leaf(Type::I32, {4, 1, 1, 1}, "pos4"), 16, RopeMode::Neox, 1e4f, 1); }, "rope"));
    EXPECT_TRUE(rejects([&] { g.rope(q, g.leaf(Type::F32, {3, 1, 1, 1}, "posf"), 16, RopeMode::Neox, 1e4f, 1); }, "rope"));
    EXPECT_TRUE(rejects([&] { g.rope(q, pos, 15, RopeMode::Normal, 1e4f, 1); }, "rope"));
    EXPECT_TRUE(rejects([&] { g.rope(q, pos, 18, RopeMode::Normal, 1e4f, 1); }, "rope"));
    EXPECT_TRUE(rejects([&] { g.rope(q, pos, 0, RopeMode::Normal, 1e4f, 1); }, "rope"));
    EXPECT_TRUE(rejects([&] { g.swiglu(a, b); }, "swiglu"));
    EXPECT_TRUE(rejects([&] { g.geglu(a, b); }, "geglu"));
    EXPECT_TRUE(rejects([&] { g.soft_max(f16, nullptr, 1); }, "soft_max"));
    EXPECT_TRUE(rejects([&] { g.soft_max(a, b, 1); }, "soft_max"));
    EXPECT_TRUE(rejects([&] { g.soft_max(a, f16, 1); }, "soft_max"));
    EXPECT_TRUE(rejects([&] { g.store_rows(k, g.leaf(Type::F32, {15, 4, 1, 1}, "x15"), ids); }, "store_rows"));
    EXPECT_TRUE(rejects([&] { g.store_rows(a, f16, ids); }, "store_rows"));
    EXPECT_TRUE(rejects([&] { g.store_rows(a, a, g.leaf(Type::I32, {3, 1, 1, 1}, "ids3")); }, "store_rows"));
    EXPECT_TRUE(rejects([&] { g.store_rows(a, a, g.leaf(Type::F32, {4, 1, 1, 1}, "idsf")); }, "store_rows"));
    const AttentionParams p{};
    EXPECT_TRUE(rejects([&] { g.attention(g.leaf(Type::F16, {16, 4, 3, 1}, "qh"), k, v, mask, p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(g.leaf(Type::F32, {8, 4, 3, 1}, "q8"), k, v, mask, p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(g.leaf(Type::F32, {16, 3, 3, 1}, "q3h"), k, v, mask, p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(q, k, g.leaf(Type::F16, {16, 1, 10, 1}, "v1"), mask, p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(q, k, g.leaf(Type::F16, {16, 2, 9, 1}, "v9"), mask, p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(q, k, v, nullptr, p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(q, k, v, g.leaf(Type::F32, {9, 3, 1, 1}, "m9"), p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(q, k, v, g.leaf(Type::F32, {10, 2, 1, 1}, "m2"), p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.attention(q, k, v, g.leaf(Type::F16, {10, 3, 1, 1}, "mh"), p); }, "attention"));
    EXPECT_TRUE(rejects([&] { g.view(a, {8, 5, 1, 1}, {4, 32, 160, 160}, 0); }, "view"));
    EXPECT_TRUE(rejects([&] { g.view(a, {8, 4, 1, 1}, {4, 32, 128, 128}, 4); }, "view"));
    EXPECT_TRUE(rejects([&] { g.reshape(a, {5, 6, 1, 1}); }, "reshape"));
    Tensor* strided = g.view(a, {4, 4, 1, 1}, {4, 32, 128, 128}, 0);
    EXPECT_TRUE(rejects([&] { g.reshape(strided, {16, 1, 1, 1}); }, "reshape"));
    // Valid calls still pass.
    EXPECT_NO_THROW(g.mul_mat(a, g.leaf(Type::F32, {8, 2, 3, 1}, "x3")));
    EXPECT_NO_THROW(g.attention(q, k, v, mask, p));
    EXPECT_NO_THROW(g.rope(q, pos, 16, RopeMode::Neox, 1e4f, 1));
}

// Ops whose CPU kernels read their inputs as float rows (scale, silu, gelu_tanh, swiglu, geglu) must
// reject other input types: an F16 input would be read as float32, past the end of its data.
TEST(GraphBuilders, FloatOnlyOpsRejectOtherTypes) {
    Graph g;
    Tensor* h = g.leaf(Type::F16, {8, 4, 1, 1}, "h");
    Tensor* q = g.leaf(Type::Q8_0, {32, 4, 1, 1}, "q");
    Tensor* a = g.leaf(Type::F32, {8, 4, 1, 1}, "a");
    EXPECT_TRUE(rejects([&] { g.scale(h, 2.0f); }, "scale"));
    EXPECT_TRUE(rejects([&] { g.silu(q); }, "silu"));
    EXPECT_TRUE(rejects([&] { g.gelu_tanh(h); }, "gelu_tanh"));
    EXPECT_TRUE(rejects([&] { g.swiglu(h, a); }, "swiglu"));
    EXPECT_TRUE(rejects([&] { g.geglu(a, h); }, "geglu"));
}

// Rows of a block type must hold whole blocks: row_size() truncates otherwise, and the CPU ops then
// call quantize/dequantize_row with a length they reject, throwing inside a pool thread while the
// other threads wait at the next barrier (a hang with more than one thread). A model with head_dim
// 80 and a Q8_0 KV cache builds exactly such a view. The graph must refuse these shapes up front.
TEST(GraphBuilders, BlockTypesNeedWholeBlocksPerRow) {
    Graph g;
    EXPECT_THROW(g.leaf(Type::Q8_0, {48, 4, 1, 1}, "bad_cache"), std::invalid_argument);
    EXPECT_THROW(g.leaf(Type::Q4_K, {128, 2, 1, 1}, "bad_weight"), std::invalid_argument);
    EXPECT_THROW(g.input(Type::Q8_0, {40, 1, 1, 1}, "bad_input"), std::invalid_argument);
    // A Q8_0 cache of 2 KV heads x 80 = 160 values per cell (5 whole blocks), viewed per head.
    Tensor* kc = g.leaf(Type::Q8_0, {160, 8, 1, 1}, "k_cache");
    const size_t k_head = kiln::row_size(Type::Q8_0, 80);  // truncated to 2 blocks
    EXPECT_TRUE(rejects([&] { g.view(kc, {80, 2, 8, 1}, {kc->nb[0], k_head, kc->nb[1], kc->nb[1] * 8}, 0, "k_view"); },
                        "view"));
    EXPECT_NO_THROW(g.leaf(Type::Q8_0, {64, 4, 1, 1}, "good"));
}

}  // namespace

// PtrMap (the scheduler's pointer-keyed tables) against std::unordered_map: random inserts,
// look-ups of present and absent keys across several growths, and keys that share low bits
// (tensors of one graph sit at a fixed stride).
TEST(PtrMap, MatchesUnorderedMap) {
    std::vector<int64_t> pool(70000);
    std::mt19937 rng(7);
    for (int round = 0; round < 3; ++round) {
        kiln::PtrMap<const int64_t*, int> map;
        std::unordered_map<const int64_t*, int> ref;
        if (round == 1) map.clear_for(100);  // start small and grow
        for (int i = 0; i < 20000; ++i) {
            const size_t idx = round == 2 ? (static_cast<size_t>(i) * 3) % pool.size() : rng() % pool.size();
            const int64_t* key = &pool[idx];
            const int v = static_cast<int>(rng() % 1000);
            map[key] += v;
            ref[key] += v;
            const int64_t* probe = &pool[rng() % pool.size()];
            const int* got = map.find(probe);
            auto it = ref.find(probe);
            ASSERT_EQ(got != nullptr, it != ref.end()) << "round " << round << " step " << i;
            if (got) {
                ASSERT_EQ(*got, it->second);
            }
        }
        EXPECT_EQ(map.size(), ref.size());
        for (const auto& [k, v] : ref) {
            const int* got = map.find(k);
            ASSERT_NE(got, nullptr);
            EXPECT_EQ(*got, v);
        }
        map.clear_for(10);
        EXPECT_EQ(map.size(), 0u);
        EXPECT_FALSE(map.contains(ref.begin()->first));
    }
}
