// The CPU backend's thread pool: run() reaches every thread, barrier() separates
// phases, exceptions come back to the caller, and many short runs neither
// deadlock nor lose work.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "backends/cpu/work_regions.h"

namespace {

using kiln::cpu::ThreadPool;

class ThreadPoolSizes : public ::testing::TestWithParam<int> {};

TEST_P(ThreadPoolSizes, RunExecutesOnEveryThread) {
    const int n = GetParam();
    ThreadPool pool(n);
    ASSERT_EQ(pool.size(), n);
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
    std::vector<std::thread::id> ids(static_cast<size_t>(n));
    std::atomic<int> bad_nth{0};
    const auto caller = std::this_thread::get_id();
    for (int rep = 0; rep < 3; ++rep) {
        pool.run([&](int ith, int nth) {
            if (nth != n || ith < 0 || ith >= n) {
                bad_nth.fetch_add(1);
                return;
            }
            calls[static_cast<size_t>(ith)].fetch_add(1);
            ids[static_cast<size_t>(ith)] = std::this_thread::get_id();
        });
        // run() returns only when every thread is done: the counts are final here.
        for (int i = 0; i < n; ++i) EXPECT_EQ(calls[static_cast<size_t>(i)].load(), rep + 1) << "thread " << i;
    }
    EXPECT_EQ(bad_nth.load(), 0);
    // The caller is thread 0, the others are distinct threads.
    EXPECT_EQ(ids[0], caller);
    std::set<std::thread::id> distinct(ids.begin(), ids.end());
    EXPECT_EQ(distinct.size(), static_cast<size_t>(n));
}

// Every thread adds to a counter in each phase. Before the barrier of phase p no
// thread may have started phase p+1 (counter < n*(p+1) when a phase-p increment
// happens); after it every thread has finished phase p (counter >= n*(p+1)).
TEST_P(ThreadPoolSizes, BarrierOrdersPhases) {
    const int n = GetParam();
    ThreadPool pool(n);
    constexpr int kPhases = 200;
    std::atomic<int> counter{0};
    std::atomic<int> early{0}, late{0};
    pool.run([&](int, int nth) {
        for (int p = 0; p < kPhases; ++p) {
            const int before = counter.fetch_add(1, std::memory_order_acq_rel);
            if (before >= nth * (p + 1)) late.fetch_add(1);  // someone ran ahead into phase p+1
            pool.barrier();
            if (counter.load(std::memory_order_acquire) < nth * (p + 1)) early.fetch_add(1);  // left too soon
        }
    });
    EXPECT_EQ(counter.load(), n * kPhases);
    EXPECT_EQ(early.load(), 0);
    EXPECT_EQ(late.load(), 0);
}

// Data written before a barrier by one thread is visible to the others after it
// (plain, non-atomic memory: the barrier must synchronise), also in the phases where a waiting
// thread asks for memory meanwhile (IdlePrefetch, as the CPU backend's generation does).
TEST_P(ThreadPoolSizes, BarrierPublishesPlainWrites) {
    const int n = GetParam();
    ThreadPool pool(n);
    constexpr int kPhases = 100;
    std::vector<int> slots(static_cast<size_t>(n), 0);
    std::vector<uint8_t> weights(size_t{1} << 20);
    std::atomic<int> wrong{0};
    pool.run([&](int ith, int nth) {
        kiln::cpu::IdlePrefetch idle;
        for (int p = 1; p <= kPhases; ++p) {
            slots[static_cast<size_t>(ith)] = p;
            idle = kiln::cpu::IdlePrefetch{};
            if (p % 2) {
                idle.ranges[0] = {weights.data(), weights.data() + weights.size()};
                idle.n = 1;
            }
            pool.barrier(&idle);
            for (int j = 0; j < nth; ++j) {
                if (slots[static_cast<size_t>(j)] != p) wrong.fetch_add(1);
            }
            pool.barrier();  // nobody overwrites a slot while another thread still reads it
        }
    });
    EXPECT_EQ(wrong.load(), 0);
}

TEST_P(ThreadPoolSizes, ExceptionInAWorkerIsRethrown) {
    const int n = GetParam();
    ThreadPool pool(n);
    for (int thrower = 0; thrower < n; ++thrower) {
        std::atomic<int> finished{0};
        try {
            pool.run([&](int ith, int) {
                if (ith == thrower) throw std::runtime_error("boom from " + std::to_string(ith));
                finished.fetch_add(1);
            });
            ADD_FAILURE() << "run() did not rethrow the exception of thread " << thrower;
        } catch (const std::runtime_error& e) {
            EXPECT_EQ(std::string(e.what()), "boom from " + std::to_string(thrower));
        }
        // The other threads finished their call before run() returned.
        EXPECT_EQ(finished.load(), n - 1);
    }
    // Every thread throwing: exactly one exception comes back.
    EXPECT_THROW(pool.run([](int, int) { throw std::logic_error("all"); }), std::logic_error);
    // The pool still works (and does not rethrow a stale error).
    std::atomic<int> calls{0};
    EXPECT_NO_THROW(pool.run([&](int, int) { calls.fetch_add(1); }));
    EXPECT_EQ(calls.load(), n);
}

TEST_P(ThreadPoolSizes, ManyShortRunsDoNotDeadlock) {
    const int n = GetParam();
    ThreadPool pool(n);
    // Fewer under sanitizers would still be meaningful; 3000 runs take well under a second.
    constexpr int kRuns = 3000;
    std::atomic<long> sum{0};
    for (int r = 0; r < kRuns; ++r) {
        pool.run([&](int ith, int) {
            sum.fetch_add(ith + 1, std::memory_order_relaxed);
            if (r % 3 == 0) pool.barrier();  // some runs with a barrier, some without
        });
    }
    EXPECT_EQ(sum.load(), static_cast<long>(kRuns) * n * (n + 1) / 2);
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadPoolSizes, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return "n" + std::to_string(p.param); });

TEST(ThreadPool, OneThreadRunsOnTheCaller) {
    ThreadPool pool(1);
    EXPECT_EQ(pool.size(), 1);
    const auto caller = std::this_thread::get_id();
    int calls = 0;
    pool.run([&](int ith, int nth) {
        EXPECT_EQ(ith, 0);
        EXPECT_EQ(nth, 1);
        EXPECT_EQ(std::this_thread::get_id(), caller);
        pool.barrier();  // a no-op with one thread
        ++calls;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_THROW(pool.run([](int, int) { throw std::runtime_error("x"); }), std::runtime_error);
}

TEST(ThreadPool, NonPositiveSizeMeansOneThread) {
    ThreadPool a(0), b(-3);
    EXPECT_EQ(a.size(), 1);
    EXPECT_EQ(b.size(), 1);
    int calls = 0;
    a.run([&](int, int) { ++calls; });
    EXPECT_EQ(calls, 1);
}

TEST(ThreadPool, CreateAndDestroyRepeatedly) {
    // Pools that never ran, and pools destroyed right after a run, shut down cleanly.
    for (int i = 0; i < 50; ++i) {
        ThreadPool idle(3);
        ThreadPool used(3);
        std::atomic<int> calls{0};
        used.run([&](int, int) { calls.fetch_add(1); });
        EXPECT_EQ(calls.load(), 3);
    }
}

TEST(ThreadPool, MoreThreadsThanCores) {
    // Oversubscription: the barrier must yield rather than spin forever.
    const int n = static_cast<int>(std::thread::hardware_concurrency()) * 2 + 3;
    ThreadPool pool(n);
    std::atomic<int> counter{0};
    std::atomic<int> early{0};
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 20; ++r) {
        pool.run([&](int, int nth) {
            for (int p = 0; p < 10; ++p) {
                counter.fetch_add(1);
                pool.barrier();
                if (counter.load() < nth * (p + 1) + r * nth * 10) early.fetch_add(1);
            }
        });
    }
    EXPECT_EQ(counter.load(), 20 * 10 * n);
    EXPECT_EQ(early.load(), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

TEST(ThreadPool, PhysicalCoresIsPositive) {
    const int n = kiln::cpu::physical_cores();
    EXPECT_GE(n, 1);
    const unsigned logical = std::thread::hardware_concurrency();
    if (logical) {
        EXPECT_LE(n, static_cast<int>(logical));
    }
}

// WorkRegions (the matmul's work split): every item is handed out exactly once, whatever the
// thread count, item count and chunk; a thread that does nothing still lets the others finish
// its region (stealing); and a region's owner takes it front to back.
TEST(WorkRegions, EveryItemClaimedOnceAndSlowThreadsAreHelped) {
    for (int nth : {1, 2, 3, 8}) {
        for (int64_t n_items : {0, 1, 5, 64, 1000}) {
            for (int64_t chunk : {1, 4, 32}) {
                ThreadPool pool(nth);
                kiln::cpu::WorkRegions work(nth);
                std::vector<std::atomic<int>> seen(static_cast<size_t>(n_items));
                std::atomic<int> owner_order_broken{0};
                pool.run([&](int ith, int n) {
                    if (ith == 0) work.reset(n_items, n);
                    pool.barrier();
                    // Thread 1 claims nothing until the others are done with everything: its
                    // region must be taken by them.
                    if (ith == 1) return;
                    const int64_t per = (n_items + n - 1) / n, own0 = std::min(n_items, per * ith);
                    int64_t next_own = own0;
                    for (int64_t i0, i1; work.claim(ith, chunk, i0, i1);) {
                        ASSERT_LT(i0, i1);
                        if (i0 >= own0 && i0 < own0 + per) {  // from its own region: in order
                            if (i0 != next_own) owner_order_broken.fetch_add(1);
                            next_own = i1;
                        }
                        for (int64_t i = i0; i < i1; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
                    }
                });
                for (int64_t i = 0; i < n_items; ++i) {
                    ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "item " << i << " of " << n_items << ", " << nth << " threads, chunk " << chunk;
                }
                EXPECT_EQ(owner_order_broken.load(), 0);
            }
        }
    }
}

// An owner claims at most half of what is left of its region (at least one item), so a thread
// done with its own region early still finds items there while the owner works through its
// claim; it takes them one at a time from the back.
TEST(WorkRegions, OwnersLeaveHalfTheirRegionForTheOthers) {
    kiln::cpu::WorkRegions work(2);
    work.reset(64, 2);  // regions [0, 32) and [32, 64)
    int64_t i0 = 0, i1 = 0;
    std::vector<std::pair<int64_t, int64_t>> owner;
    while (work.claim(0, 32, i0, i1) && i0 < 32) owner.emplace_back(i0, i1);
    // Thread 0's region: 16, 8, 4, 2, 1, 1; then it steals from thread 1's back.
    const std::vector<std::pair<int64_t, int64_t>> halves{{0, 16}, {16, 24}, {24, 28}, {28, 30}, {30, 31}, {31, 32}};
    EXPECT_EQ(owner, halves);
    EXPECT_EQ(i0, 63);
    EXPECT_EQ(i1, 64);
    // Thread 1 now: half of the 31 left (15), from the front.
    ASSERT_TRUE(work.claim(1, 32, i0, i1));
    EXPECT_EQ(i0, 32);
    EXPECT_EQ(i1, 47);
    // A claim smaller than half is taken whole.
    ASSERT_TRUE(work.claim(1, 4, i0, i1));
    EXPECT_EQ(i0, 47);
    EXPECT_EQ(i1, 51);
}

}  // namespace

namespace {

// run(fn, n): only the first n threads run fn, with nth = n, and barriers count only them; runs of
// different sizes alternate without losing or doubling work (one pool serves prompts with
// n_threads_batch threads and generation with n_threads).
TEST(ThreadPoolTeams, FewerThreadsThanThePool) {
    constexpr int kPool = 4;
    ThreadPool pool(kPool);
    std::mt19937 rng(11);
    for (int rep = 0; rep < 400; ++rep) {
        const int n = 1 + static_cast<int>(rng() % (kPool + 1));  // kPool + 1: more than the pool, so all
        const int team = std::min(n, kPool);
        std::vector<std::atomic<int>> calls(kPool);
        std::atomic<int> bad_nth{0}, counter{0}, early{0};
        pool.run(
            [&](int ith, int nth) {
                if (nth != team) bad_nth.fetch_add(1);
                calls[static_cast<size_t>(ith)].fetch_add(1);
                counter.fetch_add(1);
                pool.barrier();  // every member arrived: the counter holds the whole team
                if (counter.load() != team) early.fetch_add(1);
            },
            n);
        for (int i = 0; i < kPool; ++i) ASSERT_EQ(calls[static_cast<size_t>(i)].load(), i < team ? 1 : 0) << "thread " << i << ", team " << team;
        ASSERT_EQ(bad_nth.load(), 0);
        ASSERT_EQ(early.load(), 0) << "team " << team;
        if (rep % 100 == 99) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let idle workers sleep
    }
}

}  // namespace
