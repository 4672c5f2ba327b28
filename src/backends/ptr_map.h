// A map from pointers to small values with open addressing (linear probing, power-of-two
// table). The scheduler plans every graph again for every token, looking nodes up a few
// thousand times per plan; std::unordered_map's bucket lists and modulo hashing made that
// planning about 15% of a small model's time per generated token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

template <class K, class V>
class PtrMap {
    static_assert(std::is_pointer_v<K>, "PtrMap keys are pointers");

public:
    // Removes every entry and makes room for n without growing.
    void clear_for(size_t n) {
        size_t cap = 16;
        while (cap < 2 * n) cap *= 2;
        slots_.assign(cap, Slot{});
        size_ = 0;
    }
    size_t size() const { return size_; }

    // The value of key, or nullptr.
    V* find(K key) {
        if (slots_.empty()) return nullptr;
        for (size_t i = home(key);; i = (i + 1) & mask()) {
            if (slots_[i].key == key) return &slots_[i].value;
            if (slots_[i].key == nullptr) return nullptr;
        }
    }
    const V* find(K key) const { return const_cast<PtrMap*>(this)->find(key); }
    bool contains(K key) const { return find(key) != nullptr; }

    // The value of key, inserted value-initialised if absent. key must not be null.
    V& operator[](K key) {
        if (2 * (size_ + 1) > slots_.size()) grow();
        for (size_t i = home(key);; i = (i + 1) & mask()) {
            if (slots_[i].key == key) return slots_[i].value;
            if (slots_[i].key == nullptr) {
                slots_[i].key = key;
                ++size_;
                return slots_[i].value;
            }
        }
    }

private:
    struct Slot {
        K key = nullptr;
        V value{};
    };
    size_t mask() const { return slots_.size() - 1; }
    // Fibonacci hashing of the address (its low bits are alignment).
    size_t home(K key) const {
        const auto h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(key)) * 0x9E3779B97F4A7C15ull;
        return static_cast<size_t>(h >> 32) & mask();
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        clear_for(old.empty() ? 8 : old.size());
        for (Slot& s : old) {
            if (s.key) (*this)[s.key] = std::move(s.value);
        }
    }
    std::vector<Slot> slots_;
    size_t size_ = 0;
};

}  // namespace kiln
