// Memo of word -> token ids for the span of one tokenize() call.
//
// BPE merges each pre-tokenized word (SPM each segment) independently, so the
// ids of a word depend on its bytes alone; natural text repeats a small set of
// words, so remembering them skips most merging. The cache lives in the
// call's workspace: nothing is shared between calls or threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/piece_map.h"

namespace kiln::tok {

class WordCache {
public:
    static constexpr size_t kMaxWordBytes = 64;       // longer words are rare; not worth storing
    static constexpr size_t kMaxEntries = size_t{1} << 18;

    // On a hit, appends the word's ids to `out` and returns true.
    bool get(std::string_view word, std::vector<int32_t>& out) const {
        if (slots_.empty() || word.size() > kMaxWordBytes) return false;
        const uint64_t h = hash_bytes(word.data(), word.size());
        for (size_t pos = h & mask_;; pos = (pos + 1) & mask_) {
            const Slot& s = slots_[pos];
            if (s.key_len == kEmpty) return false;
            if (s.hash == h && key(s) == word) {
                out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
                return true;
            }
        }
    }

    void put(std::string_view word, std::span<const int32_t> ids) {
        if (word.size() > kMaxWordBytes || count_ >= kMaxEntries) return;
        if ((count_ + 1) * 2 > slots_.size()) grow();
        const uint64_t h = hash_bytes(word.data(), word.size());
        size_t pos = h & mask_;
        while (slots_[pos].key_len != kEmpty) {
            if (slots_[pos].hash == h && key(slots_[pos]) == word) return;
            pos = (pos + 1) & mask_;
        }
        slots_[pos] = Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                           static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(ids.size())};
        keys_.append(word);
        ids_.insert(ids_.end(), ids.begin(), ids.end());
        ++count_;
    }

private:
    static constexpr uint32_t kEmpty = UINT32_MAX;
    struct Slot {
        uint64_t hash;
        uint32_t key_off, key_len;
        uint32_t ids_off, ids_len;
    };

    std::string_view key(const Slot& s) const { return std::string_view(keys_).substr(s.key_off, s.key_len); }

    void grow() {
        const size_t cap = slots_.empty() ? 1024 : slots_.size() * 2;
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(cap, Slot{0, 0, kEmpty, 0, 0});
        mask_ = cap - 1;
        for (const Slot& s : old) {
            if (s.key_len == kEmpty) continue;
            size_t pos = s.hash & mask_;
            while (slots_[pos].key_len != kEmpty) pos = (pos + 1) & mask_;
            slots_[pos] = s;
        }
    }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t count_ = 0;
    std::string keys_;
    std::vector<int32_t> ids_;
};

}  // namespace kiln::tok
