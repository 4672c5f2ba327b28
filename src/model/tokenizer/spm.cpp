#include "model/tokenizer/spm.h"

#include <algorithm>

#include "model/tokenizer/unicode.h"

namespace kiln::tok {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

}  // namespace

SpmModel::SpmModel(const Vocab& vocab) {
    for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
        const std::string_view t = vocab.text(id);
        for (size_t k = t.find(kSpaceMarker, 1); k != std::string_view::npos; k = t.find(kSpaceMarker, k + 1)) {
            joins_space_[static_cast<uint8_t>(t[k - 1])] = true;
        }
    }
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char hex[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
        int32_t id = vocab.find(std::string_view(hex, 6));
        if (id < 0) {  // llama.cpp falls back to the byte itself as a token
            const char c = static_cast<char>(b);
            id = vocab.find(std::string_view(&c, 1));
        }
        // A byte with no token at all: llama.cpp throws; emit <unk> instead.
        byte_token_[b] = id >= 0 ? id : vocab.unk;
    }
}

void SpmModel::encode(const Vocab& vocab, std::string_view text, Workspace& ws, std::vector<int32_t>& out) const {
    const auto segment = [&](std::string_view seg) {
        if (ws.cache.get(seg, out)) return;
        const size_t before = out.size();
        encode_segment(vocab, seg, ws, out);
        ws.cache.put(seg, std::span<const int32_t>(out).subspan(before));
    };
    // Walk the characters the way the merger splits them (by lead byte), so a
    // cut always falls on a symbol boundary even in malformed UTF-8.
    size_t seg_start = 0;
    for (size_t pos = 0; pos < text.size();) {
        const size_t len = std::min(unicode::utf8_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
        if (pos > seg_start && len == kSpaceMarker.size() && text.compare(pos, len, kSpaceMarker) == 0 &&
            !joins_space_[static_cast<uint8_t>(text[pos - 1])]) {
            segment(text.substr(seg_start, pos - seg_start));
            seg_start = pos;
        }
        pos += len;
    }
    if (seg_start < text.size()) segment(text.substr(seg_start));
}

// Both merge loops apply llama.cpp's order: the adjacent pair forming the
// highest-scoring token first, the leftmost among equal scores. The linear one
// rescans the (few) pairs of a short segment each step instead of keeping a heap.
void SpmModel::merge_linear(const Vocab& vocab, std::string_view seg, Workspace& ws) const {
    auto& syms = ws.syms;
    auto& score = ws.pair_score;
    auto& token = ws.pair_token;
    score.resize(syms.size());
    token.resize(syms.size());
    // token[l]: the token (l, next(l)) would form, -1 if none.
    const auto set_pair = [&](int32_t l) {
        token[l] = -1;
        const int32_t r = syms[l].next;
        if (r < 0) return;
        const int32_t id = vocab.find(seg.substr(syms[l].begin, syms[l].len + syms[r].len));
        if (id < 0) return;
        token[l] = id;
        score[l] = vocab.scores[id];
    };
    for (int32_t i = 0; i < static_cast<int32_t>(syms.size()); ++i) set_pair(i);
    while (true) {
        int32_t l = -1;
        for (int32_t i = 0; i >= 0; i = syms[i].next) {
            if (token[i] >= 0 && (l < 0 || score[i] > score[l])) l = i;
        }
        if (l < 0) return;
        Workspace::Sym& left = syms[l];
        Workspace::Sym& right = syms[left.next];
        left.id = token[l];
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (right.next >= 0) syms[right.next].prev = l;
        set_pair(l);
        if (left.prev >= 0) set_pair(left.prev);
    }
}

void SpmModel::merge_heap(const Vocab& vocab, std::string_view seg, Workspace& ws) const {
    auto& syms = ws.syms;
    // Max-heap: highest score first, then leftmost.
    auto& heap = ws.heap;
    heap.clear();
    const auto lower = [](const Workspace::Cand& a, const Workspace::Cand& b) {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    const auto try_pair = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const uint32_t size = syms[l].len + syms[r].len;
        const int32_t id = vocab.find(seg.substr(syms[l].begin, size));
        if (id < 0) return;
        heap.push_back({vocab.scores[id], l, r, id, size});
        std::push_heap(heap.begin(), heap.end(), lower);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_pair(i, i + 1);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), lower);
        const Workspace::Cand c = heap.back();
        heap.pop_back();
        Workspace::Sym& l = syms[c.left];
        Workspace::Sym& r = syms[c.right];
        // Stale: a side was merged away or grew (llama.cpp's size check).
        if (l.len == 0 || r.len == 0 || l.len + r.len != c.size) continue;
        l.len += r.len;
        l.id = c.id;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = c.left;
        try_pair(l.prev, c.left);
        try_pair(c.left, l.next);
    }
}

void SpmModel::encode_segment(const Vocab& vocab, std::string_view seg, Workspace& ws, std::vector<int32_t>& out) const {
    auto& syms = ws.syms;
    syms.clear();
    for (size_t pos = 0; pos < seg.size();) {
        const size_t len = std::min(unicode::utf8_len(static_cast<uint8_t>(seg[pos])), seg.size() - pos);
        const int32_t n = static_cast<int32_t>(syms.size());
        syms.push_back({vocab.find(seg.substr(pos, len)), n - 1, n + 1, static_cast<uint32_t>(pos), static_cast<uint32_t>(len)});
        pos += len;
    }
    if (syms.empty()) return;
    syms.back().next = -1;

    if (syms.size() <= kLinearMax) {
        merge_linear(vocab, seg, ws);
    } else {
        merge_heap(vocab, seg, ws);
    }

    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        const Workspace::Sym& s = syms[i];
        if (s.id >= 0) {
            out.push_back(s.id);
            continue;
        }
        for (uint32_t k = 0; k < s.len; ++k) {
            const int32_t id = byte_token_[static_cast<uint8_t>(seg[s.begin + k])];
            if (id >= 0) out.push_back(id);
        }
    }
}

}  // namespace kiln::tok
