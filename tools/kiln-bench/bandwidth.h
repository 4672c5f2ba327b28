// The streaming read bandwidth probe (--bandwidth): how fast this machine can
// read memory with a given number of threads, the ceiling of token generation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln_bench {

struct BandwidthOptions {
    size_t bytes = size_t{1} << 30;  // the buffer read (1 GiB: far beyond any cache)
    int threads = 1;
    int passes = 7;                  // timed passes, after one untimed warm-up pass
};

struct Bandwidth {
    int threads = 0;
    double best_gibs = 0;    // fastest pass
    double median_gibs = 0;
    std::vector<double> passes_gibs;
    size_t bytes = 0;        // the buffer read per pass
    const char* loads = "";  // "avx512", "avx2" or "scalar"
};

// Fills a buffer of opts.bytes (each thread first-touches its own slice, so
// pages sit near the thread that reads them), then times passes in which every
// thread reads its slice with the widest loads the CPU has. Throws
// std::runtime_error when the buffer cannot be allocated.
Bandwidth measure_bandwidth(const BandwidthOptions& opts);

}  // namespace kiln_bench
