// Handing out the items of one op (the 16-row weight groups of a matmul) to the threads of the
// pool: each thread owns one contiguous region and claims it front to back in small chunks; a
// thread whose region is done takes single items from the back of the region with the most left.
//
// Why: a static split leaves every thread waiting for the slowest (on a VM one vCPU is often
// slower for a while); one shared counter of fixed chunks leaves threads up to a whole chunk
// apart at the end (a chunk of 16 ffn groups is 288 KiB of Q4_0: ~25 us per matmul in
// generation) and breaks each thread's stream of weights into scattered pieces, so its
// prefetches ahead (kernels/gemm.h) land in groups another thread computes. Here the owner's
// stream stays contiguous and threads end within one item of each other.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace kiln::cpu {

class WorkRegions {
public:
    explicit WorkRegions(int max_threads) : n_(std::max(max_threads, 1)), r_(new Region[static_cast<size_t>(n_)]) {}

    // Splits items [0, n_items) into nth contiguous regions; called by one thread before a
    // barrier that the claiming threads pass afterwards. nth <= max_threads.
    void reset(int64_t n_items, int nth) {
        nth_ = std::clamp(nth, 1, n_);
        const int64_t per = (n_items + nth_ - 1) / nth_;
        for (int i = 0; i < nth_; ++i) {
            const int64_t b = std::min(n_items, per * i), e = std::min(n_items, b + per);
            r_[i].range.store(pack(b, e), std::memory_order_relaxed);
        }
    }

    // The next items [i0, i1) for thread ith; false when every region is done. own_chunk: items
    // per claim from the thread's own region, at most half of what is left there (at least one):
    // what an owner has claimed no other thread can take, so its last claims shrink and a thread
    // done early still finds items to take while the owner works through its own.
    bool claim(int ith, int64_t own_chunk, int64_t& i0, int64_t& i1) {
        if (ith < nth_ && take(r_[ith], own_chunk, false, i0, i1)) return true;
        for (;;) {  // steal one item from the back of the region with the most left
            int best = -1;
            int64_t most = 0;
            for (int i = 0; i < nth_; ++i) {
                const uint64_t v = r_[i].range.load(std::memory_order_relaxed);
                const int64_t left = back(v) - front(v);
                if (left > most) {
                    most = left;
                    best = i;
                }
            }
            if (best < 0) return false;
            if (take(r_[best], 1, true, i0, i1)) return true;
        }
    }

private:
    struct alignas(64) Region {  // one cache line each: owners claim without sharing a line
        std::atomic<uint64_t> range{0};  // unclaimed items [front, back): front low 32 bits, back high
    };
    static uint64_t pack(int64_t f, int64_t b) { return static_cast<uint64_t>(f) | (static_cast<uint64_t>(b) << 32); }
    static int64_t front(uint64_t v) { return static_cast<int64_t>(v & 0xFFFFFFFFu); }
    static int64_t back(uint64_t v) { return static_cast<int64_t>(v >> 32); }

    static bool take(Region& r, int64_t n, bool from_back, int64_t& i0, int64_t& i1) {
        uint64_t v = r.range.load(std::memory_order_relaxed);
        for (;;) {
            const int64_t f = front(v), b = back(v);
            if (f >= b) return false;
            if (!from_back) n = std::min(n, std::max<int64_t>(1, (b - f) / 2));  // see claim
            const int64_t f2 = from_back ? f : std::min(b, f + n), b2 = from_back ? std::max(f, b - n) : b;
            if (r.range.compare_exchange_weak(v, pack(f2, b2), std::memory_order_relaxed)) {
                i0 = from_back ? b2 : f;
                i1 = from_back ? b : f2;
                return true;
            }
        }
    }

    int n_;
    int nth_ = 1;
    std::unique_ptr<Region[]> r_;
};

}  // namespace kiln::cpu
