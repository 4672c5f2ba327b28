// What a thread asks the memory system for while it waits at a barrier: the first weights of
// the next matrix product it will compute (CpuBackend::compute sets it, ThreadPool::barrier
// consumes it a few cache lines at a time between its polls).
//
// Why: generation streams every weight once per token, and between two products the memory
// bus idles: the small ops of one token row (norms, rope, the residual adds) run on one thread
// while the other waits, and a thread that finished its share of a product waits for the
// other. Weights asked for into L2 then are weights the next product reads from L2 instead of
// memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/kernels.h"

namespace kiln::cpu {

struct IdlePrefetch {
    static constexpr size_t kMaxRanges = 4;  // one per product of a group (kMaxMulMatGroup)
    struct Range {
        const uint8_t* p = nullptr;
        const uint8_t* end = nullptr;
    };
    std::array<Range, kMaxRanges> ranges{};
    size_t n = 0;        // ranges in use
    size_t cur = 0;      // the range being requested
    const void* key = nullptr;  // what the ranges are of (the product's first weights); null: nothing

    void clear() {
        n = cur = 0;
        key = nullptr;
    }
    // Asks for the next few lines; false when every range is done.
    bool step() {
        while (cur < n) {
            Range& r = ranges[cur];
            if (r.p < r.end) {
                for (int i = 0; i < kLinesPerStep && r.p < r.end; ++i, r.p += 64) prefetch_l2(r.p);
                return true;
            }
            ++cur;
        }
        return false;
    }

private:
    static constexpr int kLinesPerStep = 4;
};

}  // namespace kiln::cpu
