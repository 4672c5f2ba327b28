#include "model/tokenizer/special.h"

#include <algorithm>
#include <map>

namespace kiln::tok {
namespace {

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

SpecialMatcher::SpecialMatcher(const Vocab& vocab) {
    root_.fill(-1);
    rank_.assign(vocab.n_tokens(), -1);
    // Build with ordered maps, then flatten into sorted edge lists.
    struct BuildNode {
        int32_t token = -1;
        std::map<uint8_t, int32_t> kids;
    };
    std::vector<BuildNode> build(1);  // node 0: root (its edges go to root_)
    for (size_t r = 0; r < vocab.special_tokens.size(); ++r) {
        const int32_t id = vocab.special_tokens[r];
        rank_[id] = static_cast<int32_t>(r);
        int32_t node = 0;
        for (char c : vocab.text(id)) {
            const uint8_t b = static_cast<uint8_t>(c);
            auto it = build[node].kids.find(b);
            if (it == build[node].kids.end()) {
                build.emplace_back();
                it = build[node].kids.emplace(b, static_cast<int32_t>(build.size() - 1)).first;
            }
            node = it->second;
        }
        build[node].token = id;
    }
    nodes_.resize(build.size());
    for (size_t i = 0; i < build.size(); ++i) {
        nodes_[i].token = build[i].token;
        nodes_[i].edge_begin = static_cast<uint32_t>(edges_.size());
        for (const auto& [b, kid] : build[i].kids) {
            if (i == 0) root_[b] = kid;
            edges_.push_back({b, kid});
        }
        nodes_[i].edge_end = static_cast<uint32_t>(edges_.size());
    }
}

int32_t SpecialMatcher::child(int32_t node, uint8_t byte) const {
    const Node& n = nodes_[node];
    for (uint32_t e = n.edge_begin; e < n.edge_end; ++e) {
        if (edges_[e].byte == byte) return edges_[e].child;
        if (edges_[e].byte > byte) break;
    }
    return -1;
}

void SpecialMatcher::partition(const Vocab& vocab, std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
    out.clear();
    const uint32_t n = static_cast<uint32_t>(text.size());
    if (n == 0) return;

    // Every occurrence of every eligible special text, as (rank, position).
    std::vector<std::pair<int32_t, uint32_t>> occ;
    for (uint32_t p = 0; p < n; ++p) {
        int32_t node = root_[static_cast<uint8_t>(text[p])];
        uint32_t q = p + 1;
        while (node >= 0) {
            const int32_t id = nodes_[node].token;
            if (id >= 0 && (parse_special || !vocab.has(id, token_attr::Control | token_attr::Unknown))) {
                occ.emplace_back(rank_[id], p);
            }
            if (q >= n) break;
            node = child(node, static_cast<uint8_t>(text[q++]));
        }
    }
    if (occ.empty()) {
        out.push_back({kNoToken, 0, n});
        return;
    }
    std::sort(occ.begin(), occ.end());

    // Claim occurrences in llama.cpp's order. mark: -2 free, -1 swallowed
    // whitespace or token interior, >= 0 token starting here.
    constexpr int32_t kFree = -2, kTaken = -1;
    std::vector<int32_t> mark(n, kFree);
    for (const auto& [rank, p] : occ) {
        const int32_t id = vocab.special_tokens[rank];
        const uint32_t len = static_cast<uint32_t>(vocab.text(id).size());
        bool free = true;
        for (uint32_t k = p; k < p + len && free; ++k) free = mark[k] == kFree;
        if (!free) continue;  // overlaps text already claimed
        for (uint32_t k = p; k < p + len; ++k) mark[k] = kTaken;
        mark[p] = id;
        if (vocab.has(id, token_attr::LStrip)) {
            for (uint32_t k = p; k > 0 && mark[k - 1] == kFree && is_ascii_space(text[k - 1]); --k) mark[k - 1] = kTaken;
        }
        if (vocab.has(id, token_attr::RStrip)) {
            for (uint32_t k = p + len; k < n && mark[k] == kFree && is_ascii_space(text[k]); ++k) mark[k] = kTaken;
        }
    }

    for (uint32_t i = 0; i < n;) {
        if (mark[i] >= 0) {
            out.push_back({mark[i], i, i + static_cast<uint32_t>(vocab.text(mark[i]).size())});
            i = out.back().end;
        } else if (mark[i] == kTaken) {
            ++i;
        } else {
            uint32_t j = i;
            while (j < n && mark[j] == kFree) ++j;
            out.push_back({kNoToken, i, j});
            i = j;
        }
    }
}

}  // namespace kiln::tok
