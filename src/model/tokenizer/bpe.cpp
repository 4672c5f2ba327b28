#include "model/tokenizer/bpe.h"

#include <algorithm>
#include <unordered_map>

#include "model/gguf.h"
#include "model/tokenizer/unicode.h"

namespace kiln::tok {
namespace {

constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";
constexpr uint64_t kEmptyKey = ~uint64_t{0};

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

// Printable bytes map to themselves; the rest (controls, space, DEL, NBSP,
// soft hyphen) to U+0100 onwards in byte order.
bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) unicode::append_utf8(t[b], byte_is_printable(b) ? static_cast<uint32_t>(b) : next++);
        return t;
    }();
    return table;
}

int unicode_to_byte(uint32_t cp) {
    // Inverse of byte_to_unicode(): the mapped code points all lie below U+0144.
    static const std::array<int16_t, 0x144> table = [] {
        std::array<int16_t, 0x144> t;
        t.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) t[byte_is_printable(b) ? static_cast<uint32_t>(b) : next++] = static_cast<int16_t>(b);
        return t;
    }();
    return cp < table.size() ? table[cp] : -1;
}

BpeModel::BpeModel(const gguf::File& file, const Vocab& vocab) {
    const gguf::Array* merges = file.get_array(kKeyMerges);
    static const gguf::Array kNone{gguf::ValueType::STRING, {}};
    if (!merges && vocab.pre == "kimi-k2") merges = &kNone;  // llama.cpp accepts Kimi-K2 files without merges
    if (!merges) throw TokenizerError(vocab.source + ": metadata key '" + std::string(kKeyMerges) + "': missing (needed by BPE)");
    if (merges->elem_type != gguf::ValueType::STRING) {
        throw TokenizerError(vocab.source + ": metadata key '" + std::string(kKeyMerges) + "': expected an array of strings");
    }

    std::unordered_map<std::string, int32_t> extras;
    std::vector<std::string> extra_list;
    const auto sym = [&](std::string_view text) -> int32_t {
        const int32_t id = vocab.find(text);
        if (id >= 0) return id;
        auto [it, added] = extras.try_emplace(std::string(text), vocab.n_tokens() + static_cast<int32_t>(extra_list.size()));
        if (added) extra_list.emplace_back(text);
        return it->second;
    };

    size_t cap = 16;
    while (cap < merges->items.size() * 2) cap <<= 1;
    merges_.assign(cap, Merge{kEmptyKey, 0, 0});
    merge_mask_ = cap - 1;
    std::string joined;
    for (size_t i = 0; i < merges->items.size(); ++i) {
        const std::string& m = merges->items[i].as_string(kKeyMerges);
        // "left right"; the split is at the first space after the first byte.
        const size_t sp = m.find(' ', 1);
        if (sp == std::string::npos) continue;  // llama.cpp stores an ("", "") pair that never applies
        const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
        if (right.empty()) continue;
        const int32_t a = sym(left), b = sym(right);
        joined.assign(left);
        joined.append(right);
        const int32_t r = sym(joined);
        const uint64_t key = pair_key(a, b);
        size_t pos = mix(key) & merge_mask_;
        while (merges_[pos].key != kEmptyKey && merges_[pos].key != key) pos = (pos + 1) & merge_mask_;
        if (merges_[pos].key == key) continue;  // the first rank of a repeated pair wins
        merges_[pos] = Merge{key, static_cast<int32_t>(i), r};
    }
    extra_texts_.reserve(extra_list.size(), 0);
    for (const std::string& s : extra_list) extra_texts_.add(s);
    extra_index_.build(extra_texts_);

    for (int b = 0; b < 256; ++b) byte_symbol_[b] = symbol(vocab, byte_to_unicode()[b]);
}

int32_t BpeModel::symbol(const Vocab& vocab, std::string_view text) const {
    const int32_t id = vocab.find(text);
    if (id >= 0) return id;
    const int32_t extra = extra_index_.find(extra_texts_, text);
    return extra >= 0 ? vocab.n_tokens() + extra : -1;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    size_t pos = mix(key) & merge_mask_;
    while (true) {
        const Merge& m = merges_[pos];
        if (m.key == key) return &m;
        if (m.key == kEmptyKey) return nullptr;
        pos = (pos + 1) & merge_mask_;
    }
}

// A piece that is no token: llama.cpp emits the single-byte tokens found in
// its text byte by byte (byte-level: bytes of the encoded text, so most
// non-ASCII bytes vanish; raw UTF-8 models: <0xXX> tokens).
void BpeModel::emit_fallback(const Vocab& vocab, std::string_view raw, std::vector<int32_t>& out) const {
    if (vocab.byte_encode) {
        for (char c : raw) {
            for (char e : byte_to_unicode()[static_cast<uint8_t>(c)]) {
                const int32_t id = vocab.find(std::string_view(&e, 1));
                if (id >= 0) out.push_back(id);
            }
        }
    } else {
        static constexpr char kHex[] = "0123456789ABCDEF";
        for (char c : raw) {
            const uint8_t b = static_cast<uint8_t>(c);
            const char buf[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
            const int32_t id = vocab.find(std::string_view(buf, 6));
            if (id >= 0) out.push_back(id);
        }
    }
}

// Both merge loops apply llama.cpp's order: the adjacent pair with the lowest
// merge rank first, the leftmost among equal ranks. The linear one rescans the
// (few) pairs of a short word each step, which beats heap upkeep there.
void BpeModel::merge_linear(Workspace& ws) const {
    auto& syms = ws.syms;
    auto& rank = ws.pair_rank;
    auto& result = ws.pair_result;
    rank.resize(syms.size());
    result.resize(syms.size());
    // rank[l]: rank of the pair (l, next(l)), INT32_MAX if it cannot merge.
    const auto set_pair = [&](int32_t l) {
        rank[l] = INT32_MAX;
        const int32_t r = syms[l].next;
        if (r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
        if (const Merge* m = find_merge(syms[l].id, syms[r].id)) {
            rank[l] = m->rank;
            result[l] = m->result;
        }
    };
    for (int32_t i = 0; i < static_cast<int32_t>(syms.size()); ++i) set_pair(i);
    while (true) {
        int32_t best = INT32_MAX, l = -1;
        for (int32_t i = 0; i >= 0; i = syms[i].next) {
            if (rank[i] < best) {
                best = rank[i];
                l = i;
            }
        }
        if (l < 0) return;
        Workspace::Sym& left = syms[l];
        Workspace::Sym& right = syms[left.next];
        left.id = result[l];
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (right.next >= 0) syms[right.next].prev = l;
        set_pair(l);
        if (left.prev >= 0) set_pair(left.prev);
    }
}

void BpeModel::merge_heap(Workspace& ws) const {
    auto& syms = ws.syms;
    auto& heap = ws.heap;
    heap.clear();
    const auto later = [](const Workspace::Cand& x, const Workspace::Cand& y) {
        return x.rank != y.rank ? x.rank > y.rank : x.left > y.left;
    };
    const auto try_pair = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
        const Merge* m = find_merge(syms[l].id, syms[r].id);
        if (!m) return;
        heap.push_back({m->rank, l, r, syms[l].id, syms[r].id, m->result});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_pair(i, i + 1);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Workspace::Cand c = heap.back();
        heap.pop_back();
        Workspace::Sym& l = syms[c.left];
        Workspace::Sym& r = syms[c.right];
        // Stale: one side was merged away or changed since the pair was queued.
        if (l.len == 0 || r.len == 0 || l.id != c.left_id || r.id != c.right_id || l.next != c.right) continue;
        l.id = c.result;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = c.left;
        try_pair(l.prev, c.left);
        try_pair(c.left, l.next);
    }
}

void BpeModel::encode_word(const Vocab& vocab, std::string_view word, Workspace& ws, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    std::string_view as_token = word;
    if (vocab.byte_encode && vocab.ignore_merges) {
        ws.encoded.clear();
        for (char c : word) ws.encoded += byte_to_unicode()[static_cast<uint8_t>(c)];
        as_token = ws.encoded;
    }
    const bool newline_run = vocab.pre_spec && vocab.pre_spec->newline_runs_whole &&
                             word.find_first_not_of('\n') == std::string_view::npos;
    if (vocab.ignore_merges || newline_run) {
        const int32_t id = vocab.find(as_token);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }

    auto& syms = ws.syms;
    syms.clear();
    if (vocab.byte_encode) {
        for (size_t i = 0; i < word.size(); ++i) {
            const int32_t n = static_cast<int32_t>(syms.size());
            syms.push_back({byte_symbol_[static_cast<uint8_t>(word[i])], n - 1, n + 1, static_cast<uint32_t>(i), 1});
        }
    } else {
        for (size_t i = 0; i < word.size();) {
            const size_t len = std::min(unicode::utf8_len(static_cast<uint8_t>(word[i])), word.size() - i);
            const int32_t n = static_cast<int32_t>(syms.size());
            syms.push_back({symbol(vocab, word.substr(i, len)), n - 1, n + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
            i += len;
        }
    }
    syms.back().next = -1;

    if (syms.size() <= kLinearMax) {
        merge_linear(ws);
    } else {
        merge_heap(ws);
    }

    for (int32_t i = 0; i >= 0; i = syms[i].next) {
        const Workspace::Sym& s = syms[i];
        if (s.id >= 0 && s.id < vocab.n_tokens()) {
            out.push_back(s.id);
        } else {
            emit_fallback(vocab, word.substr(s.begin, s.len), out);
        }
    }
}

}  // namespace kiln::tok
