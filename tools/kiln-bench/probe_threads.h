// The threads of kiln-bench's machine probes (--bandwidth, --peak), placed as a test's
// compute threads are (-C / --cpu-strict): a row is judged against what its own CPUs do.
#pragma once

#include <compare>
#include <functional>
#include <string>

namespace kiln_bench {

struct ProbePlacement {
    int threads = 1;
    std::string cpu_mask = "0x0";  // as the tests' contexts get it; 0x0: wherever the OS puts the threads
    bool cpu_strict = false;

    auto operator<=>(const ProbePlacement&) const = default;
    // "2 threads", "2 threads on CPUs 0x3", "1 threads on CPUs 0x3, strict"
    std::string describe() const;
};

// Runs fn(tid) for tid 0..p.threads-1, each on a thread of its own placed as a context's compute
// thread tid (kiln_cpu_bind_thread), and waits for all. The caller's thread stays where it is.
// Throws std::runtime_error naming the mask when a thread cannot be placed (then no fn runs).
void run_probe_threads(const ProbePlacement& p, const std::function<void(int)>& fn);

}  // namespace kiln_bench
