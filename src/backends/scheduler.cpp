#include "backends/scheduler.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace kiln {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// First-fit allocator over one arena, with coalescing of freed ranges.
class ArenaPlan {
public:
    size_t alloc(size_t bytes) {
        bytes = align_up(std::max<size_t>(bytes, 1));
        for (auto it = free_.begin(); it != free_.end(); ++it) {
            if (it->second >= bytes) {
                const size_t off = it->first;
                const size_t rest = it->second - bytes;
                free_.erase(it);
                if (rest) free_.emplace(off + bytes, rest);
                return off;
            }
        }
        // Grow at the end, merging a trailing free range.
        size_t off = end_;
        if (!free_.empty()) {
            auto last = std::prev(free_.end());
            if (last->first + last->second == end_) {
                off = last->first;
                free_.erase(last);
            }
        }
        end_ = off + bytes;
        peak_ = std::max(peak_, end_);
        return off;
    }
    void release(size_t off, size_t bytes) {
        bytes = align_up(std::max<size_t>(bytes, 1));
        auto [it, ok] = free_.emplace(off, bytes);
        if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
            it->second += next->second;
            free_.erase(next);
        }
        if (it != free_.begin()) {
            auto prev = std::prev(it);
            if (prev->first + prev->second == it->first) {
                prev->second += it->second;
                free_.erase(it);
            }
        }
    }
    size_t peak() const { return peak_; }

private:
    std::map<size_t, size_t> free_;  // offset -> size
    size_t end_ = 0;
    size_t peak_ = 0;
};

// The tensor whose memory an aliasing node (view, in-place store) uses.
Tensor* memory_root(Tensor* t) {
    while (op_aliases_src0(t->op)) t = t->src[0];
    return t;
}

}  // namespace

Scheduler::Scheduler(std::vector<Backend*> backends, std::function<int(int)> layer_backend)
    : backends_(std::move(backends)), layer_backend_(std::move(layer_backend)) {
    if (backends_.empty() || !backends_.back()->is_host()) {
        throw std::invalid_argument("scheduler: the last backend must be a host (CPU) backend");
    }
    arenas_.resize(backends_.size());
}

void Scheduler::place_leaf(const Tensor* leaf, int backend) { leaf_backend_[leaf] = backend; }

int Scheduler::backend_of(const Tensor* node) const {
    const int* b = node_backend_.find(node);
    return b ? *b : -1;
}

int Scheduler::home_backend(const Tensor* t) const {
    const Tensor* root = memory_root(const_cast<Tensor*>(t));
    if (root->op == Op::None) {
        const int* b = leaf_backend_.find(root);
        return b ? *b : static_cast<int>(backends_.size()) - 1;
    }
    const int* b = node_backend_.find(root);
    return b ? *b : static_cast<int>(backends_.size()) - 1;
}

void Scheduler::allocate(Graph& g) {
    ++plan_id_;
    device_outputs_.clear();
    const int cpu = static_cast<int>(backends_.size()) - 1;
    const size_t n_nodes = g.nodes().size();
    node_backend_.clear_for(n_nodes);
    splits_.clear();
    shadows_.clear();

    // 0. Readers of every node's result, for backends that fuse an op into its one reader's. Leaves
    // (weights, shared by every context of a model) are not counted: they are never fused.
    for (Tensor* n : g.nodes()) n->readers = 0;
    for (Tensor* n : g.nodes()) {
        for (Tensor* s : n->src) {
            if (s && s->op != Op::None) ++s->readers;
        }
    }

    // 1. Assign every node to a backend.
    for (Tensor* n : g.nodes()) {
        int b;
        if (op_aliases_src0(n->op)) {
            b = home_backend(n->src[0]);  // aliases live (and in-place ops run) where their source lives
        } else if (n->layer >= 0) {
            b = layer_backend_ ? layer_backend_(n->layer) : cpu;
        } else {
            b = cpu;
            for (Tensor* s : n->src) {
                if (s && s->op != Op::None) {
                    b = home_backend(s);
                    break;
                }
            }
        }
        if (b < 0 || b > cpu) b = cpu;
        if (!backends_[static_cast<size_t>(b)]->supports_op(*n)) b = cpu;
        if (!backends_[static_cast<size_t>(b)]->supports_op(*n)) {
            throw std::runtime_error("scheduler: no backend supports " + std::string(op_name(n->op)) + " node '" +
                                     n->name + "'");
        }
        node_backend_[n] = b;
    }

    // 2. Cut into splits and plan copies of sources whose memory the split's backend cannot address.
    PtrMap<const Tensor*, Tensor*> shadow_of;  // per split
    for (Tensor* n : g.nodes()) {
        const int b = node_backend_[n];
        if (splits_.empty() || splits_.back().backend != b) {
            splits_.push_back(Split{b, {}, {}, {}, nullptr, false});
            if (shadow_of.size()) shadow_of.clear_for(0);
        }
        Split& sp = splits_.back();
        sp.nodes.push_back(n);
        for (auto& slot : n->src) {
            if (!slot) continue;
            if (op_aliases_src0(n->op) && &slot == &n->src[0]) continue;
            const int hb = home_backend(slot);
            const bool reachable = hb == b || (backends_[static_cast<size_t>(b)]->is_host() && backends_[static_cast<size_t>(hb)]->is_host());
            if (reachable) continue;
            if (memory_root(slot)->op == Op::None && !backends_[static_cast<size_t>(hb)]->is_host()) {
                throw std::runtime_error("scheduler: " + std::string(op_name(n->op)) + " '" + n->name + "' on " +
                                         std::string(backends_[static_cast<size_t>(b)]->name()) + " reads '" + slot->name +
                                         "', which was placed in the memory of " + std::string(backends_[static_cast<size_t>(hb)]->name()));
            }
            Tensor*& sh = shadow_of[slot];
            if (!sh) {
                auto copy = std::make_unique<Tensor>(*slot);
                copy->op = Op::None;
                copy->src = {};
                copy->name = slot->name + " (copy to " + std::string(backends_[static_cast<size_t>(b)]->name()) + ")";
                set_contiguous_strides(*copy);
                if (!slot->is_contiguous()) {
                    throw std::runtime_error("scheduler: cannot copy non-contiguous '" + slot->name + "' between backends");
                }
                sh = copy.get();
                sp.copies.push_back(Copy{slot, sh});
                shadows_.push_back(std::move(copy));
            }
            sp.src_rewrites.emplace_back(&slot, sh);
        }
    }

    // 3. Liveness: the last split/node index at which each memory root is read.
    PtrMap<const Tensor*, size_t> last_use;
    last_use.clear_for(n_nodes + g.inputs().size());
    size_t step = 0;
    for (const Split& sp : splits_) {
        for (const Copy& c : sp.copies) last_use[memory_root(c.from)] = step;
        for (Tensor* n : sp.nodes) {
            for (Tensor* s : n->src) {
                if (s) last_use[memory_root(s)] = step;
            }
            ++step;
        }
        for (const Copy& c : sp.copies) last_use[c.shadow] = step;  // shadows live through their split
    }

    // 4. Plan offsets per backend arena, then allocate and set data pointers.
    std::vector<ArenaPlan> plans(backends_.size());
    std::vector<std::pair<Tensor*, std::pair<int, size_t>>> placed;  // tensor -> (backend, offset)
    PtrMap<const Tensor*, std::pair<int, size_t>> where;
    where.clear_for(n_nodes);
    for (Tensor* in : g.inputs()) {  // inputs stay alive for the whole graph
        const size_t off = plans[static_cast<size_t>(cpu)].alloc(in->nbytes());
        placed.push_back({in, {cpu, off}});
    }
    PtrMap<const Tensor*, bool> keep;  // memory roots of outputs (views of them included)
    for (Tensor* n : g.nodes()) {
        if (n->is_output) keep[memory_root(n)] = true;
    }
    std::vector<std::pair<size_t, Tensor*>> frees;  // (step, tensor) pending releases
    auto release_done = [&](size_t now) {
        for (auto it = frees.begin(); it != frees.end();) {
            if (it->first < now) {
                auto [b, off] = where[it->second];
                plans[static_cast<size_t>(b)].release(off, it->second->nbytes());
                it = frees.erase(it);
            } else {
                ++it;
            }
        }
    };
    step = 0;
    for (const Split& sp : splits_) {
        for (const Copy& c : sp.copies) {
            const size_t off = plans[static_cast<size_t>(sp.backend)].alloc(c.shadow->nbytes());
            where[c.shadow] = {sp.backend, off};
            placed.push_back({c.shadow, {sp.backend, off}});
            frees.emplace_back(last_use[c.shadow], c.shadow);
        }
        for (Tensor* n : sp.nodes) {
            release_done(step);
            if (!op_aliases_src0(n->op)) {
                const size_t off = plans[static_cast<size_t>(sp.backend)].alloc(n->nbytes());
                where[n] = {sp.backend, off};
                placed.push_back({n, {sp.backend, off}});
                const size_t* lu = last_use.find(n);
                if (!n->is_output && !keep.contains(n)) frees.emplace_back(lu ? *lu : step, n);
            }
            ++step;
        }
    }
    for (size_t b = 0; b < backends_.size(); ++b) {
        const size_t need = plans[b].peak();
        if (need && (!arenas_[b] || arenas_[b]->size() < need)) {
            arenas_[b].reset();
            arenas_[b] = backends_[b]->alloc_buffer(need);
        }
    }
    for (auto& [t, loc] : placed) {
        t->data = static_cast<uint8_t*>(arenas_[static_cast<size_t>(loc.first)]->base()) + loc.second;
    }
    // Aliases point into their source (in node order, so chains of views resolve).
    for (Tensor* n : g.nodes()) {
        if (n->op == Op::View) n->data = static_cast<uint8_t*>(n->src[0]->data) + n->view_offset;
        if (n->op == Op::StoreRows) n->data = n->src[0]->data;
    }
}

void Scheduler::compute(Graph& g) {
    for (auto& [n, device] : device_outputs_) n->data = device;  // a graph run again
    device_outputs_.clear();
    std::vector<uint8_t> staging;
    for (Split& sp : splits_) {
        Backend& be = *backends_[static_cast<size_t>(sp.backend)];
        for (const Copy& c : sp.copies) {
            // Through host memory: read from the source backend's buffer, write into the split's.
            const int from_b = home_backend(c.from);
            const size_t bytes = c.from->nbytes();
            staging.resize(bytes);
            if (backends_[static_cast<size_t>(from_b)]->is_host()) {
                std::copy_n(static_cast<const uint8_t*>(c.from->data), bytes, staging.data());
            } else {
                Buffer& src_buf = *arenas_[static_cast<size_t>(from_b)];
                src_buf.read(static_cast<size_t>(static_cast<uint8_t*>(c.from->data) - static_cast<uint8_t*>(src_buf.base())),
                             staging.data(), bytes);
            }
            Buffer& dst_buf = *arenas_[static_cast<size_t>(sp.backend)];
            dst_buf.write(static_cast<size_t>(static_cast<uint8_t*>(c.shadow->data) - static_cast<uint8_t*>(dst_buf.base())),
                          staging.data(), bytes);
        }
        for (auto& [slot, shadow] : sp.src_rewrites) std::swap(*slot, shadow);
        try {
            if (observer_.wants && observer_.observe && be.is_host()) {
                // Sub-spans ending just before each observed node, so its sources are ready.
                const std::span<Tensor* const> nodes(sp.nodes);
                size_t begin = 0;
                for (size_t i = 0; i < nodes.size(); ++i) {
                    if (!observer_.wants(*nodes[i])) continue;
                    if (i > begin) be.compute(nodes.subspan(begin, i - begin));
                    observer_.observe(*nodes[i]);
                    begin = i;
                }
                if (begin < nodes.size()) be.compute(nodes.subspan(begin));
            } else {
                if (!sp.planned) {
                    sp.plan = be.make_plan(sp.nodes);
                    sp.planned = true;
                }
                be.compute_planned(sp.nodes, sp.plan.get());
            }
        } catch (...) {
            for (auto& [slot, shadow] : sp.src_rewrites) std::swap(*slot, shadow);
            throw;
        }
        for (auto& [slot, shadow] : sp.src_rewrites) std::swap(*slot, shadow);
    }
    // Results the caller reads must be in host memory.
    host_outputs_.clear();
    for (Tensor* n : g.nodes()) {
        if (!n->is_output) continue;
        const int b = home_backend(n);
        if (backends_[static_cast<size_t>(b)]->is_host()) continue;
        if (!n->is_contiguous()) throw std::runtime_error("scheduler: output '" + n->name + "' on a device is not contiguous");
        Buffer& buf = *arenas_[static_cast<size_t>(b)];
        auto& host = host_outputs_.emplace_back(n->nbytes());
        buf.read(static_cast<size_t>(static_cast<uint8_t*>(n->data) - static_cast<uint8_t*>(buf.base())), host.data(), host.size());
        device_outputs_.emplace_back(n, n->data);
        n->data = host.data();
    }
}

std::vector<size_t> Scheduler::buffer_sizes() const {
    std::vector<size_t> out;
    for (const auto& a : arenas_) out.push_back(a ? a->size() : 0);
    return out;
}

}  // namespace kiln
