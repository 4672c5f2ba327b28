#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(KILN_OPENMP)
#include <omp.h>
#endif
#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <intrin.h>
#endif

namespace kiln::cpu {
namespace {
// A hint to the core that this is a spin-wait loop.
inline void cpu_relax() {
#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
    _mm_pause();
#elif defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Thrown by barrier() in the threads that did not fail, to unwind them; never escapes run().
struct Aborted {};
}  // namespace

ThreadPool::ThreadPool(int n_threads, ThreadPlacement placement)
    : n_threads_(n_threads < 1 ? 1 : n_threads),
      placement_(std::move(placement)),
      poll_(poll_micros(placement_.poll)),
      placed_(static_cast<size_t>(n_threads_)),
      go_(new Go[static_cast<size_t>(n_threads_)]) {
    check_placement(placement_);
    if (!placement_.cpus.empty()) {
        // Every thread's CPUs are tried here, on this thread (then put back), so that a CPU the
        // process may not use fails the construction, not the first run or a worker's start.
        const size_t n_distinct = placement_.strict ? std::min(placement_.cpus.size(), static_cast<size_t>(n_threads_)) : 1;
        for (size_t i = 0; i < n_distinct; ++i) bind_this_thread(bind_this_thread(cpus_of_thread(placement_, static_cast<int>(i))));
    }
#if !defined(KILN_OPENMP)  // with OpenMP, its runtime owns the workers
    threads_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
#endif
}

void ThreadPool::place_team_thread(int ith) {
    const std::thread::id me = std::this_thread::get_id();
    if (placed_[static_cast<size_t>(ith)] == me) return;
    std::vector<int> before = bind_this_thread(cpus_of_thread(placement_, ith));
    placed_[static_cast<size_t>(ith)] = me;
    const std::lock_guard<std::mutex> lock(placed_mutex_);
    const bool known = std::any_of(cpus_before_.begin(), cpus_before_.end(), [&](const auto& e) { return e.first == me; });
    if (!known) cpus_before_.emplace_back(me, std::move(before));  // the first placement knows the thread's own CPUs
}

ThreadPool::~ThreadPool() {
#if defined(KILN_OPENMP)
    // Give the runtime's threads this pool placed their CPUs back. A team of the same size gets
    // the same threads in practice; one the runtime left out of it keeps this pool's CPUs.
    if (!cpus_before_.empty()) {
#pragma omp parallel num_threads(n_threads_)
        {
            const std::thread::id me = std::this_thread::get_id();
            for (const auto& [id, cpus] : cpus_before_) {
                if (id != me) continue;
                try {
                    bind_this_thread(cpus);
                } catch (const std::exception&) {  // those CPUs are gone: it stays where it is
                }
            }
        }
    }
#endif
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int ith) {
    // The constructor tried these CPUs; should the OS refuse them now, the thread runs unplaced.
    try {
        bind_this_thread(cpus_of_thread(placement_, ith));
    } catch (const std::exception&) {
    }
    std::atomic<uint64_t>& mine = go_[static_cast<size_t>(ith)].jobs;  // jobs given to this thread
    uint64_t seen = 0;
    for (;;) {
        // Poll first (the next job usually follows soon), then sleep.
        const auto poll_end = std::chrono::steady_clock::now() + poll_;
        for (int i = 0; poll_.count() > 0 && mine.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_acquire); ++i) {
            cpu_relax();
            if (i % 256 == 255 && std::chrono::steady_clock::now() > poll_end) break;
        }
        const std::function<void(int, int)>* job = nullptr;
        int team = 0;
        if (const uint64_t g = mine.load(std::memory_order_acquire); g != seen) {
            seen = g;
            job = job_;
            team = job_team_;
        } else {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_.load() || mine.load() != seen; });
            if (stop_) return;
            seen = mine.load();
            job = job_;
            team = job_team_;
        }
        try {
            (*job)(ith, team);
        } catch (const Aborted&) {
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
            aborted_.store(true, std::memory_order_release);
        }
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run(const std::function<void(int, int)>& fn, int n_active) {
    const int team = n_active > 0 && n_active < n_threads_ ? n_active : n_threads_;
    error_ = nullptr;
    aborted_.store(false, std::memory_order_relaxed);
    barrier_count_.store(0, std::memory_order_relaxed);
    // The caller computes as thread 0: placed for this run (unless it already runs there), and its
    // own CPUs put back when the run ends, so that placing a context's threads does not move the
    // application's thread for good.
    struct CallerCpus {
        std::vector<int> before;  // empty: not moved
        ~CallerCpus() {
            try {
                bind_this_thread(before);
            } catch (const std::exception&) {  // the CPUs it had are gone: it stays where it is
            }
        }
    } caller;
    auto place_caller = [&] {
        if (placement_.cpus.empty()) return;
        const std::vector<int> mine = cpus_of_thread(placement_, 0);
        if (this_thread_cpus() != mine) caller.before = bind_this_thread(mine);
    };
#if !defined(KILN_OPENMP)
    place_caller();
#endif
    auto call = [&](int ith, int nth) {
        try {
#if defined(KILN_OPENMP)
            // Inside the parallel region: the runtime makes its threads at the first one, and a
            // new thread starts with its creator's CPUs, which must still be the caller's own.
            if (ith == 0) place_caller();
            else if (!placement_.cpus.empty()) place_team_thread(ith);
#endif
            fn(ith, nth);
        } catch (const Aborted&) {
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
            aborted_.store(true, std::memory_order_release);
        }
    };
#if defined(KILN_OPENMP)
#pragma omp parallel num_threads(team)
    {
#pragma omp single
        team_.store(omp_get_num_threads(), std::memory_order_release);  // implicit barrier after single
        call(omp_get_thread_num(), omp_get_num_threads());
    }
#else
    team_.store(team, std::memory_order_release);
    if (team > 1) {
        pending_.store(team - 1, std::memory_order_release);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = &fn;
            job_team_ = team;
            for (int i = 1; i < team; ++i) go_[static_cast<size_t>(i)].jobs.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
    }
    call(0, team);
    while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
#endif
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::barrier(IdlePrefetch* idle) {
    const int team = team_.load(std::memory_order_acquire);
    if (team == 1) return;
    const uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
    if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == team - 1) {
        barrier_count_.store(0, std::memory_order_relaxed);
        barrier_phase_.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    // Spin briefly (phases are short), then yield so an oversubscribed machine still progresses.
    int spins = 0;
    while (barrier_phase_.load(std::memory_order_acquire) == phase) {
        if (aborted_.load(std::memory_order_acquire)) throw Aborted{};
        if (idle && idle->step()) continue;
        if (++spins > 2000) std::this_thread::yield();
    }
}

int physical_cores() {
#if defined(__linux__)
    // Count distinct (physical id, core id) pairs.
    std::ifstream f("/proc/cpuinfo");
    std::set<std::pair<std::string, std::string>> cores;
    std::string line, phys = "0";
    while (std::getline(f, line)) {
        if (line.rfind("physical id", 0) == 0) phys = line.substr(line.find(':') + 1);
        if (line.rfind("core id", 0) == 0) cores.emplace(phys, line.substr(line.find(':') + 1));
    }
    if (!cores.empty()) return static_cast<int>(cores.size());
#endif
    const unsigned n = std::thread::hardware_concurrency();
    return n ? static_cast<int>(n) : 1;
}

}  // namespace kiln::cpu
