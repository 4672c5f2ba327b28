// The streaming read bandwidth probe (--bandwidth): how fast this machine can
// read memory with a given number of threads, the ceiling of token generation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "probe_threads.h"

namespace kiln_bench {

struct BandwidthOptions {
    size_t bytes = size_t{1} << 30;  // the buffer read (1 GiB: far beyond any cache)
    ProbePlacement threads;          // how many threads read, and on which CPUs
    int passes = 7;                  // timed passes per read pattern, after one untimed warm-up pass
};

// How a pass reads: plain loads, or loads with software prefetches running ahead of them (near:
// prefetcht0 this many bytes ahead, far: prefetcht1; 0: none). On the AMX Xeon this was built on, plain
// loads read 28-30 GiB/s where loads with prefetcht0 2 KiB and prefetcht1 4 KiB ahead read 32-37 in the
// same process, and the generation kernels, which prefetch, read more than the plain loads did: a
// probe of plain loads alone judged them against less than the machine gives.
struct ReadPattern {
    const char* name;
    size_t near = 0, far = 0;
};

struct Bandwidth {
    ProbePlacement threads;
    double best_gibs = 0;    // fastest pass of any pattern
    double median_gibs = 0;  // median pass of the pattern that made the fastest
    double plain_best_gibs = 0;  // fastest pass of plain loads
    const char* pattern = "";    // the pattern of the fastest pass
    std::vector<double> passes_gibs;  // the winning pattern's passes
    int n_patterns = 0;
    size_t bytes = 0;        // the buffer read per pass
    const char* loads = "";  // "avx512", "avx2" or "scalar"
};

// Fills a buffer of opts.bytes (each thread, placed as opts.threads says, first-touches its own slice, so
// pages sit near the thread that reads them), then times passes in which every
// thread reads its slice with the widest loads the CPU has, opts.passes per read
// pattern (kReadPatterns), the patterns taking turns so that a change in the
// machine's speed meets them all. Throws std::runtime_error when the buffer
// cannot be allocated.
Bandwidth measure_bandwidth(const BandwidthOptions& opts);

}  // namespace kiln_bench
