#include "probe_threads.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kiln.h"

namespace kiln_bench {

std::string ProbePlacement::describe() const {
    std::string s = std::to_string(threads) + " threads";  // as the tool's other lines say it
    if (cpu_mask != "0x0") s += " on CPUs " + cpu_mask + (cpu_strict ? ", strict" : "");
    return s;
}

void run_probe_threads(const ProbePlacement& p, const std::function<void(int)>& fn) {
    const int n = std::max(1, p.threads);
    // Every thread places itself first; if any could not, none runs the probe (a probe on the
    // wrong CPUs would be a wrong number, not a slow one).
    std::atomic<bool> placed{true};
    std::mutex error_mutex;
    std::string error;
    std::barrier start(n);
    auto body = [&](int tid) {
        if (kiln_cpu_bind_thread(p.cpu_mask.c_str(), p.cpu_strict, tid) != 0) {
            const std::lock_guard lock(error_mutex);
            if (error.empty()) error = kiln_last_error();
            placed = false;
        }
        start.arrive_and_wait();
        if (placed) fn(tid);
    };
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) threads.emplace_back(body, t);
    for (std::thread& t : threads) t.join();
    if (!placed) throw std::runtime_error("probe threads on CPUs " + p.cpu_mask + ": " + error);
}

}  // namespace kiln_bench
