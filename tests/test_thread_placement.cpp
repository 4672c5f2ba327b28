// Thread placement (llama.cpp's -C / --cpu-strict / --poll): CPU masks parse as
// llama.cpp reads them, the pool's threads run on the CPUs they were given (read back
// from the OS), the caller gets its own CPUs back after each run, and a CPU the
// process may not use is refused when the pool is made, naming the CPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/thread_placement.h"
#include "backends/cpu/thread_pool.h"
#include "kiln.h"

namespace {

using kiln::cpu::ThreadPlacement;
using kiln::cpu::ThreadPool;
using Cpus = std::vector<int>;

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

TEST(CpuMask, ParsesHexadecimalMasksAsLlamaCpp) {
    using kiln::cpu::parse_cpu_mask;
    EXPECT_EQ(parse_cpu_mask("0x3"), (Cpus{0, 1}));
    EXPECT_EQ(parse_cpu_mask("3"), (Cpus{0, 1}));  // llama.cpp's -C is hexadecimal with or without 0x
    EXPECT_EQ(parse_cpu_mask("0XF0"), (Cpus{4, 5, 6, 7}));
    EXPECT_EQ(parse_cpu_mask("0xa5"), (Cpus{0, 2, 5, 7}));
    EXPECT_EQ(parse_cpu_mask("10"), (Cpus{4}));
    EXPECT_EQ(parse_cpu_mask("0x0001"), (Cpus{0}));
    EXPECT_EQ(parse_cpu_mask("0x0"), Cpus{});
    EXPECT_EQ(parse_cpu_mask(""), Cpus{});
    // The last CPU a mask may name, and one past it.
    EXPECT_EQ(parse_cpu_mask("0x8" + std::string(255, '0')), (Cpus{1023}));
    EXPECT_NE(error_of([] { parse_cpu_mask("0x1" + std::string(256, '0')); }).find("CPU 1024"), std::string::npos);
    // Zeros above the last CPU are fine.
    EXPECT_EQ(parse_cpu_mask("0x" + std::string(300, '0') + "2"), (Cpus{1}));
    for (const char* bad : {"0x", "0xg", "0x3 ", "-1", "0x1.0", "1,2"}) {
        const std::string e = error_of([bad] { parse_cpu_mask(bad); });
        EXPECT_NE(e.find(std::string("cpu_mask '") + bad + "'"), std::string::npos) << bad << ": " << e;
    }
}

TEST(CpuMask, FormatsRoundTripAndLists) {
    using namespace kiln::cpu;
    EXPECT_EQ(format_cpu_mask(Cpus{}), "0x0");
    EXPECT_EQ(format_cpu_mask(Cpus{0, 1}), "0x3");
    EXPECT_EQ(format_cpu_mask(Cpus{4, 9}), "0x210");
    EXPECT_EQ(format_cpu_list(Cpus{0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
    EXPECT_EQ(format_cpu_list(Cpus{3}), "3");
    EXPECT_EQ(format_cpu_list(Cpus{}), "");
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        Cpus cpus;
        const int density = 1 + static_cast<int>(rng() % 8);
        const int top = static_cast<int>(rng() % kMaxCpus);
        for (int c = 0; c <= top; ++c)
            if (static_cast<int>(rng() % 8) < density) cpus.push_back(c);
        ASSERT_EQ(parse_cpu_mask(format_cpu_mask(cpus)), cpus) << format_cpu_mask(cpus);
    }
}

// The C API's mask writers, which the tools check -C and -Cr with before a model loads.
TEST(CpuMask, CApiNormalizesMasksAndRanges) {
    const auto normalized = [](const char* mask) {
        char buf[300];
        const int32_t n = kiln_cpu_mask_normalize(mask, buf, sizeof buf);
        return n < 0 ? std::string("error: ") + kiln_last_error() : std::string(buf, static_cast<size_t>(n));
    };
    EXPECT_EQ(normalized("0X00F0"), "0xf0");
    EXPECT_EQ(normalized("3"), "0x3");
    EXPECT_EQ(normalized("0x000"), "0x0");
    EXPECT_EQ(normalized(""), "0x0");
    EXPECT_EQ(normalized(nullptr), "0x0");
    EXPECT_EQ(normalized(("0x8" + std::string(255, '0')).c_str()), "0x8" + std::string(255, '0'));
    EXPECT_EQ(normalized("0xzz"), "error: cpu_mask '0xzz': 'z' is not a hexadecimal digit (expected a mask such as 0x3 for CPUs 0 and 1)");
    EXPECT_NE(normalized(("0x1" + std::string(256, '0')).c_str()).find("names CPU 1024"), std::string::npos);

    const auto range = [](int32_t first, int32_t last) {
        char buf[300];
        const int32_t n = kiln_cpu_range_mask(first, last, buf, sizeof buf);
        return n < 0 ? std::string("error: ") + kiln_last_error() : std::string(buf, static_cast<size_t>(n));
    };
    EXPECT_EQ(range(0, 0), "0x1");
    EXPECT_EQ(range(4, 9), "0x3f0");
    EXPECT_EQ(range(1023, 1023), "0x8" + std::string(255, '0'));
    EXPECT_EQ(range(3, 1), "error: CPU range 3-1: expected 0 <= first <= last <= 1023");
    EXPECT_NE(range(-1, 2).find("error: CPU range -1-2"), std::string::npos);
    EXPECT_NE(range(0, 1024).find("error:"), std::string::npos);
    // Every range agrees with the engine's parser; a short buffer gets the length and a prefix.
    std::mt19937 rng(11);
    for (int trial = 0; trial < 100; ++trial) {
        const int32_t a = static_cast<int32_t>(rng() % kiln::cpu::kMaxCpus), b = static_cast<int32_t>(rng() % kiln::cpu::kMaxCpus);
        const std::string m = range(std::min(a, b), std::max(a, b));
        Cpus want(static_cast<size_t>(std::max(a, b) - std::min(a, b) + 1));
        for (size_t i = 0; i < want.size(); ++i) want[i] = std::min(a, b) + static_cast<int>(i);
        ASSERT_EQ(kiln::cpu::parse_cpu_mask(m), want) << m;
    }
    char small[4];
    EXPECT_EQ(kiln_cpu_range_mask(4, 11, small, sizeof small), 5);  // "0xff0"
    EXPECT_STREQ(small, "0xf");
    EXPECT_EQ(kiln_cpu_mask_normalize("0xff0", nullptr, 0), 5);
}

TEST(CpuMask, StrictPlacementCyclesThroughTheMask) {
    using kiln::cpu::cpus_of_thread;
    const ThreadPlacement loose{.cpus = {2, 5, 9}, .strict = false};
    const ThreadPlacement strict{.cpus = {2, 5, 9}, .strict = true};
    EXPECT_EQ(cpus_of_thread(loose, 4), (Cpus{2, 5, 9}));
    EXPECT_EQ(cpus_of_thread(strict, 0), (Cpus{2}));
    EXPECT_EQ(cpus_of_thread(strict, 2), (Cpus{9}));
    EXPECT_EQ(cpus_of_thread(strict, 4), (Cpus{5}));
    EXPECT_EQ(cpus_of_thread(ThreadPlacement{.cpus = {}, .strict = true}, 3), Cpus{});
}

TEST(CpuMask, BadPlacementsAreRefused) {
    using kiln::cpu::check_placement;
    EXPECT_NE(error_of([] { check_placement(ThreadPlacement{.poll = 101}); }).find("poll: 101 is out of range"), std::string::npos);
    EXPECT_NE(error_of([] { check_placement(ThreadPlacement{.poll = -1}); }).find("poll: -1"), std::string::npos);
    EXPECT_NE(error_of([] { check_placement(ThreadPlacement{.cpus = {1, 0}}); }).find("ascending"), std::string::npos);
    EXPECT_NE(error_of([] { ThreadPool pool(2, ThreadPlacement{.poll = 500}); }).find("poll: 500"), std::string::npos);
}

// The rest reads placements back from the OS: Linux only (elsewhere this_thread_cpus cannot tell).
class PlacedPool : public ::testing::Test {
protected:
    void SetUp() override {
        allowed_ = kiln::cpu::allowed_cpus();
        if (allowed_.empty() || kiln::cpu::this_thread_cpus().empty()) GTEST_SKIP() << "this platform does not report thread affinity";
    }
    // Each thread's CPUs as the OS reports them from inside a run.
    static std::vector<Cpus> cpus_in_run(ThreadPool& pool) {
        std::vector<Cpus> seen(static_cast<size_t>(pool.size()));
        pool.run([&](int ith, int) { seen[static_cast<size_t>(ith)] = kiln::cpu::this_thread_cpus(); });
        return seen;
    }
    Cpus allowed_;
};

TEST_F(PlacedPool, StrictThreadsRunOnTheirOwnCpu) {
    const Cpus caller_before = kiln::cpu::this_thread_cpus();
    // One thread more than CPUs: the last one shares the first CPU (cycling).
    const int n = static_cast<int>(allowed_.size()) + 1;
    ThreadPool pool(n, ThreadPlacement{.cpus = allowed_, .strict = true});
    for (int rep = 0; rep < 3; ++rep) {
        const std::vector<Cpus> seen = cpus_in_run(pool);
        for (int i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], Cpus{allowed_[static_cast<size_t>(i) % allowed_.size()]}) << "thread " << i;
        // The caller computed as thread 0 on the first CPU, and has its own CPUs back.
        EXPECT_EQ(kiln::cpu::this_thread_cpus(), caller_before);
    }
}

TEST_F(PlacedPool, LooseThreadsShareTheMask) {
    const Cpus caller_before = kiln::cpu::this_thread_cpus();
    const Cpus one{allowed_.back()};
    ThreadPool pool(3, ThreadPlacement{.cpus = one, .strict = false});
    for (const Cpus& c : cpus_in_run(pool)) EXPECT_EQ(c, one);
    EXPECT_EQ(kiln::cpu::this_thread_cpus(), caller_before);
    // Every allowed CPU, not strict: each thread may run on all of them.
    ThreadPool all(2, ThreadPlacement{.cpus = allowed_, .strict = false});
    for (const Cpus& c : cpus_in_run(all)) EXPECT_EQ(c, allowed_);
}

TEST_F(PlacedPool, ACpuTheProcessMayNotUseIsRefusedByName) {
    const Cpus caller_before = kiln::cpu::this_thread_cpus();
    int outside = -1;
    for (int c = 0; c < kiln::cpu::kMaxCpus && outside < 0; ++c)
        if (!std::binary_search(allowed_.begin(), allowed_.end(), c)) outside = c;
    ASSERT_GE(outside, 0);
    // Alone (the OS refuses the call) and next to an allowed CPU (the OS would quietly drop it).
    for (const bool strict : {true, false}) {
        Cpus cpus{allowed_.front(), outside};
        std::sort(cpus.begin(), cpus.end());
        const std::string e = error_of([&] { ThreadPool pool(2, ThreadPlacement{.cpus = cpus, .strict = strict}); });
        EXPECT_NE(e.find("CPU " + std::to_string(outside)), std::string::npos) << e;
        EXPECT_EQ(kiln::cpu::this_thread_cpus(), caller_before);
    }
}

// kiln_cpu_bind_thread places a tool's own thread as a context places its thread ith.
TEST_F(PlacedPool, CApiBindsAThreadAsTheContextWould) {
    const std::string mask = kiln::cpu::format_cpu_mask(allowed_);
    const auto run_on_new_thread = [](const std::string& m, bool strict, int ith) {
        std::pair<int32_t, Cpus> out;
        std::thread([&] {
            out.first = kiln_cpu_bind_thread(m.c_str(), strict, ith);
            out.second = kiln::cpu::this_thread_cpus();
        }).join();
        return out;
    };
    for (int ith = 0; ith < static_cast<int>(allowed_.size()) + 1; ++ith) {
        EXPECT_EQ(run_on_new_thread(mask, true, ith), std::make_pair(int32_t{0}, Cpus{allowed_[static_cast<size_t>(ith) % allowed_.size()]}));
    }
    EXPECT_EQ(run_on_new_thread(kiln::cpu::format_cpu_mask(Cpus{allowed_.back()}), false, 3), std::make_pair(int32_t{0}, Cpus{allowed_.back()}));
    EXPECT_EQ(run_on_new_thread("0x0", true, 0).first, 0);
    EXPECT_EQ(run_on_new_thread("0x0", true, 0).second, kiln::cpu::this_thread_cpus());  // left where it was
    int outside = -1;
    for (int c = 0; c < kiln::cpu::kMaxCpus && outside < 0; ++c)
        if (!std::binary_search(allowed_.begin(), allowed_.end(), c)) outside = c;
    std::string error;
    std::thread([&] {
        if (kiln_cpu_bind_thread(kiln::cpu::format_cpu_mask(Cpus{outside}).c_str(), false, 0) != 0) error = kiln_last_error();
    }).join();
    EXPECT_NE(error.find("CPU " + std::to_string(outside)), std::string::npos) << error;
    EXPECT_EQ(run_on_new_thread("0xq", false, 0).first, -1);
}

// The next pool in the process runs where the OS puts it, even where (OpenMP builds) it gets the
// runtime's threads that an earlier, placed pool moved.
TEST_F(PlacedPool, ThreadsOfTheNextUnplacedPoolRunAnywhere) {
    for (const bool strict : {true, false}) {
        {
            ThreadPool placed(3, ThreadPlacement{.cpus = Cpus{allowed_.back()}, .strict = strict});
            for (const Cpus& c : cpus_in_run(placed)) ASSERT_EQ(c, Cpus{allowed_.back()});
        }
        ThreadPool unplaced(3);
        const std::vector<Cpus> seen = cpus_in_run(unplaced);
        for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], allowed_) << "thread " << i;
    }
}

TEST_F(PlacedPool, NoPollingWorkersSleepAndWake) {
    // poll 0: workers sleep as soon as a job is done; every run must still reach them all.
    ThreadPool pool(3, ThreadPlacement{.cpus = allowed_, .strict = true, .poll = 0});
    std::atomic<int> calls{0};
    for (int rep = 0; rep < 300; ++rep) {
        pool.run([&](int, int) { calls.fetch_add(1); });
        if (rep % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(calls.load(), 900);
}

}  // namespace
