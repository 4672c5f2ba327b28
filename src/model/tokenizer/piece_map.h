// Storage for token texts and the text -> id lookup every tokenizer hammers.
// All texts live in one buffer (no per-token allocations); the lookup is an
// open-addressing table probed with a string_view, so no temporary strings are
// built during tokenization.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tok {

inline uint64_t hash_bytes(const char* p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(n) * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        h = (h ^ v) * 0x9FB21C651E98DF25ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x9FB21C651E98DF25ull;
    h ^= h >> 32;
    return h;
}

class TextPool {
public:
    void reserve(size_t count, size_t bytes) {
        data_.reserve(bytes);
        offsets_.reserve(count + 1);
    }
    void add(std::string_view s) {
        if (offsets_.empty()) offsets_.push_back(0);
        data_.append(s);
        offsets_.push_back(static_cast<uint64_t>(data_.size()));
    }
    size_t size() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
    std::string_view get(size_t i) const {
        return std::string_view(data_.data() + offsets_[i], static_cast<size_t>(offsets_[i + 1] - offsets_[i]));
    }

private:
    std::string data_;
    std::vector<uint64_t> offsets_;
};

class PieceMap {
public:
    // Indexes pool entries [0, pool.size()). Returns -1 on success or the
    // first id whose text repeats an earlier one.
    int64_t build(const TextPool& pool) {
        size_t cap = 16;
        while (cap < pool.size() * 2) cap <<= 1;
        slots_.assign(cap, Slot{0, -1});
        mask_ = cap - 1;
        for (size_t i = 0; i < pool.size(); ++i) {
            const std::string_view s = pool.get(i);
            const uint64_t h = hash_bytes(s.data(), s.size());
            size_t pos = h & mask_;
            while (slots_[pos].id >= 0) {
                if (slots_[pos].hash == static_cast<uint32_t>(h) && pool.get(slots_[pos].id) == s) {
                    return static_cast<int64_t>(i);
                }
                pos = (pos + 1) & mask_;
            }
            slots_[pos] = Slot{static_cast<uint32_t>(h), static_cast<int32_t>(i)};
        }
        return -1;
    }

    int32_t find(const TextPool& pool, std::string_view s) const {
        if (slots_.empty()) return -1;
        const uint64_t h = hash_bytes(s.data(), s.size());
        size_t pos = h & mask_;
        while (true) {
            const Slot& slot = slots_[pos];
            if (slot.id < 0) return -1;
            if (slot.hash == static_cast<uint32_t>(h) && pool.get(slot.id) == s) return slot.id;
            pos = (pos + 1) & mask_;
        }
    }

private:
    struct Slot {
        uint32_t hash;
        int32_t id;
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

}  // namespace kiln::tok
