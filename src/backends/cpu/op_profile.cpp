#include "backends/cpu/op_profile.h"

#include <algorithm>
#include <cctype>

namespace kiln::cpu {
namespace {

// "ffn_gate-12" -> "ffn_gate": graph builders name per-layer nodes "<role>-<layer>".
std::string role_of(const std::string& name) {
    const size_t dash = name.rfind('-');
    if (dash == std::string::npos || dash + 1 == name.size()) return name;
    for (size_t i = dash + 1; i < name.size(); ++i) {
        if (!std::isdigit(static_cast<unsigned char>(name[i]))) return name;
    }
    return name.substr(0, dash);
}

}  // namespace

void OpProfile::begin_graph(std::span<Tensor* const> nodes, std::span<const uint8_t> group, std::span<const FusedActs> fused, int nth) {
    row_of_node_.assign(nodes.size(), 0);
    bytes_of_node_.assign(nodes.size(), 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
        if (group[i] == 0) continue;  // inside a group: never recorded
        const Tensor& n = *nodes[i];
        const bool matmul = n.op == Op::MulMat;
        std::string name = matmul ? "mul_mat " + role_of(n.name) : std::string(op_name(n.op));
        if (matmul) bytes_of_node_[i] = n.src[0]->nbytes();
        for (size_t j = 1; j < group[i]; ++j) {
            name += "+" + role_of(nodes[i + j]->name);
            bytes_of_node_[i] += nodes[i + j]->src[0]->nbytes();
        }
        if (i < fused.size() && fused[i].fused()) {
            const auto n_fused = static_cast<size_t>(fused[i].n_nodes);
            for (size_t j = i - n_fused; j < i; ++j) name += std::string(j == i - n_fused ? " (+" : ",") + std::string(op_name(nodes[j]->op));
            name += ")";
        }
        auto [it, added] = row_of_name_.try_emplace(name, static_cast<int>(names_.size()));
        if (added) names_.push_back(std::move(name));
        row_of_node_[i] = it->second;
    }
    if (per_thread_.size() < static_cast<size_t>(nth)) per_thread_.resize(static_cast<size_t>(nth));
    for (auto& slots : per_thread_) slots.resize(names_.size());
}

std::vector<OpTime> OpProfile::rows() const {
    std::vector<OpTime> out;
    for (size_t r = 0; r < names_.size(); ++r) {
        OpTime t{.name = names_[r]};
        int threads = 0;
        for (const auto& slots : per_thread_) {
            if (r >= slots.size() || slots[r].calls == 0) continue;
            const Slot& s = slots[r];
            ++threads;
            t.calls = std::max(t.calls, s.calls);
            t.op_ms += static_cast<double>(s.op_ns) * 1e-6;
            t.op_max_ms = std::max(t.op_max_ms, static_cast<double>(s.op_ns) * 1e-6);
            t.wait_ms += static_cast<double>(s.wait_ns) * 1e-6;
            t.weight_bytes += s.weight_bytes;
        }
        if (threads == 0) continue;
        t.op_ms /= threads;
        t.wait_ms /= threads;
        out.push_back(std::move(t));
    }
    std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.op_ms + a.wait_ms > b.op_ms + b.wait_ms; });
    return out;
}

void OpProfile::clear() {
    for (auto& slots : per_thread_) std::fill(slots.begin(), slots.end(), Slot{});
}

}  // namespace kiln::cpu
