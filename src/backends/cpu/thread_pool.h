// The engine's own thread pool: persistent workers that run one function on
// every thread at once (the caller is thread 0) with a barrier between phases.
// Graph compute runs all nodes inside one run() call, so threads are woken
// once per graph rather than once per op. Built with KILN_OPENMP, run() is an
// OpenMP parallel region instead (the OpenMP runtime keeps the workers), with
// the same barrier and exception handling.
//
// With a ThreadPlacement, thread i runs on the CPUs cpus_of_thread gives it: the
// workers from their start (OpenMP's from their first run), the caller for the
// length of each run() (its own affinity is put back when run() returns).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/idle_prefetch.h"
#include "backends/cpu/thread_placement.h"

namespace kiln::cpu {

class ThreadPool {
public:
    // Throws std::invalid_argument / std::runtime_error when the placement is bad or a thread
    // cannot be placed (the message names the CPUs).
    explicit ThreadPool(int n_threads, ThreadPlacement placement = {});
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(ith, nth) on the first nth threads (n_active; 0 or more than size(): every thread)
    // and returns when all are done; the others stay idle. The first exception thrown by any
    // thread is rethrown here (the other threads finish their call first).
    void run(const std::function<void(int ith, int nth)>& fn, int n_active = 0);
    // Waits until every thread of the current run() has reached the barrier. If another thread
    // threw, it unwinds this one too (so one failing op cannot leave the others waiting forever).
    // idle: what this thread asks the memory system for while it waits (null: nothing).
    void barrier(IdlePrefetch* idle = nullptr);

private:
    void worker(int ith);
    // Places the calling thread as thread ith unless it already is (OpenMP's workers).
    void place_team_thread(int ith);
    int n_threads_;
    ThreadPlacement placement_;
    std::chrono::microseconds poll_;  // how long an idle worker spins before it sleeps
    // OpenMP: the thread last placed as thread i (each slot written only by thread i of a run).
    std::vector<std::thread::id> placed_;
    // OpenMP: the CPUs each runtime thread had before this pool first placed it, put back when
    // the pool goes (the runtime's threads outlive it and serve the next, maybe unplaced, pool).
    std::mutex placed_mutex_;
    std::vector<std::pair<std::thread::id, std::vector<int>>> cpus_before_;
    std::vector<std::thread> threads_;
    std::mutex mutex_;
    std::condition_variable wake_;
    // job_ and job_team_ are written under mutex_ before the go counters of the job's workers
    // are bumped (release); a worker that sees its counter move (acquire) may read them without
    // the lock. Each worker has its own counter, so a run on fewer threads leaves the others
    // asleep, and run() waits (pending_) only for its own workers before the next job is written.
    const std::function<void(int, int)>* job_ = nullptr;
    int job_team_ = 1;
    struct alignas(64) Go {
        std::atomic<uint64_t> jobs{0};  // jobs given to this worker (written under mutex_)
    };
    std::unique_ptr<Go[]> go_;                 // [n_threads_]; slot 0 unused (the caller)
    std::atomic<int> pending_{0};              // threads still inside the current job
    std::atomic<bool> stop_{false};            // written under mutex_
    // Sense-reversing barrier.
    std::atomic<int> barrier_count_{0};
    std::atomic<int> team_{1};  // threads in the current run() (OpenMP may grant fewer than asked)
    std::atomic<uint32_t> barrier_phase_{0};
    std::atomic<bool> aborted_{false};  // a thread threw: barriers release everyone
    std::exception_ptr error_;
    std::mutex error_mutex_;
};

// Physical cores of this machine (logical CPUs when it cannot tell).
int physical_cores();

}  // namespace kiln::cpu
