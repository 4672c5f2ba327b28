// Where the CPU backend's threads run and how they wait: llama.cpp's -C (CPU mask),
// --cpu-strict and --poll. On a machine shared with other work (or with SMT siblings
// and several sockets) placing the threads keeps a run's memory and caches local and
// its timings repeatable; left empty, the OS places them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cpu {

struct ThreadPlacement {
    std::vector<int> cpus = {};  // CPUs the threads may run on, ascending and distinct; empty: wherever the OS puts them
    bool strict = false;    // thread i alone on cpus[i % cpus.size()], instead of any of cpus
    int poll = 50;          // 0..100: how long an idle worker spins for the next job before it sleeps (poll_micros)
};

// The most CPUs a mask may name (glibc's cpu_set_t holds 1024).
inline constexpr int kMaxCpus = 1024;

// How long a worker spins before sleeping at a poll level: 40 us per level (50: 2 ms, the
// default; 0: it sleeps at once; 100: 4 ms). Generation's next graph comes within a fraction
// of a millisecond, and waking a sleeping thread through the kernel cost tens of microseconds
// per token on a VM; a machine shared with other work may prefer threads that yield the CPU.
inline int poll_micros(int poll) { return 40 * poll; }

// "0x3", "3", "0xFF00": bit i names CPU i, as llama.cpp's -C reads it (hexadecimal, with or
// without 0x). "0x0" (or empty) names no CPU: no placement. Throws std::invalid_argument
// naming the text for anything else, or for a CPU at or above kMaxCpus.
std::vector<int> parse_cpu_mask(std::string_view hex);
// The mask of cpus as "0x..." (lowest CPU in the lowest bit; "0x0" for none).
std::string format_cpu_mask(std::span<const int> cpus);
// "0-1,4": ranges and single CPUs, as Linux lists them (/proc/self/status).
std::string format_cpu_list(std::span<const int> cpus);

// The CPUs this process may run on (its affinity), ascending; empty where the platform cannot tell.
std::vector<int> allowed_cpus();
// Checks a placement before threads use it: poll in [0, 100], every CPU one the process may run
// on, and a platform that can place threads. Throws std::invalid_argument naming the CPU or field.
void check_placement(const ThreadPlacement& p);
// The CPUs thread ith of a placement may run on (all of p.cpus, or one when strict); empty: any.
std::vector<int> cpus_of_thread(const ThreadPlacement& p, int ith);
// Restricts the calling thread to cpus (nothing to do when empty) and returns the CPUs it could
// run on before (empty: nothing was done). Throws std::runtime_error with the system's reason
// when the OS refuses a CPU, leaving the thread as it was.
std::vector<int> bind_this_thread(std::span<const int> cpus);
// The CPUs the calling thread may run on now; empty where the platform cannot tell.
std::vector<int> this_thread_cpus();

}  // namespace kiln::cpu
