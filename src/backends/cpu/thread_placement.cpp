#include "backends/cpu/thread_placement.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <system_error>

#if defined(__linux__)
#include <sched.h>
#elif defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#endif

namespace kiln::cpu {

namespace {

#if defined(_WIN32)
// Windows places a thread within one processor group of at most 64 CPUs.
constexpr int kWindowsGroupCpus = 64;

DWORD_PTR windows_mask(std::span<const int> cpus) {
    DWORD_PTR m = 0;
    for (int c : cpus) {
        if (c >= kWindowsGroupCpus) {
            throw std::invalid_argument("cpu_mask: CPU " + std::to_string(c) + " is outside the first processor group (CPUs 0-63), which is all kiln places threads in on Windows");
        }
        m |= DWORD_PTR{1} << c;
    }
    return m;
}

std::vector<int> cpus_of_windows_mask(DWORD_PTR m) {
    std::vector<int> cpus;
    for (int c = 0; c < kWindowsGroupCpus; ++c)
        if (m & (DWORD_PTR{1} << c)) cpus.push_back(c);
    return cpus;
}
#endif

// "CPU 2" or "CPUs 0-3,8".
std::string cpus_text(std::span<const int> cpus) { return (cpus.size() == 1 ? "CPU " : "CPUs ") + format_cpu_list(cpus); }

#if defined(__linux__)
std::vector<int> cpus_of_set(const cpu_set_t& set) {
    std::vector<int> cpus;
    for (int c = 0; c < kMaxCpus && c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
}
#endif

}  // namespace

std::vector<int> parse_cpu_mask(std::string_view text) {
    const std::string shown(text);
    std::string_view hex = text;
    if (hex.size() >= 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
    if (hex.empty() && text.size() > 0) throw std::invalid_argument("cpu_mask '" + shown + "': no hexadecimal digits after 0x");
    std::vector<int> cpus;
    // The last digit holds CPUs 0-3, the one before it 4-7, and so on.
    for (size_t k = 0; k < hex.size(); ++k) {
        const char ch = hex[hex.size() - 1 - k];
        int v;
        if (ch >= '0' && ch <= '9') v = ch - '0';
        else if (ch >= 'a' && ch <= 'f') v = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') v = ch - 'A' + 10;
        else throw std::invalid_argument("cpu_mask '" + shown + "': '" + std::string(1, ch) + "' is not a hexadecimal digit (expected a mask such as 0x3 for CPUs 0 and 1)");
        for (int bit = 0; bit < 4; ++bit) {
            if (!(v & (1 << bit))) continue;
            const size_t cpu = 4 * k + static_cast<size_t>(bit);
            if (cpu >= static_cast<size_t>(kMaxCpus)) {
                throw std::invalid_argument("cpu_mask '" + shown + "': names CPU " + std::to_string(cpu) + "; kiln places threads on CPUs 0-" + std::to_string(kMaxCpus - 1));
            }
            cpus.push_back(static_cast<int>(cpu));
        }
    }
    std::sort(cpus.begin(), cpus.end());
    return cpus;
}

std::string format_cpu_mask(std::span<const int> cpus) {
    if (cpus.empty()) return "0x0";
    const int top = *std::max_element(cpus.begin(), cpus.end());
    std::string digits(static_cast<size_t>(top / 4 + 1), '\0');
    std::vector<int> nibble(digits.size(), 0);
    for (int c : cpus) nibble[static_cast<size_t>(c / 4)] |= 1 << (c % 4);
    for (size_t k = 0; k < digits.size(); ++k) digits[digits.size() - 1 - k] = "0123456789abcdef"[nibble[k]];
    return "0x" + digits;
}

std::string format_cpu_list(std::span<const int> cpus) {
    std::string s;
    for (size_t i = 0; i < cpus.size();) {
        size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
        if (!s.empty()) s += ',';
        s += std::to_string(cpus[i]);
        if (j > i) s += '-' + std::to_string(cpus[j]);
        i = j + 1;
    }
    return s;
}

std::vector<int> allowed_cpus() {
#if defined(__linux__)
    return this_thread_cpus();
#elif defined(_WIN32)
    DWORD_PTR process = 0, system = 0;
    if (!GetProcessAffinityMask(GetCurrentProcess(), &process, &system)) return {};
    return cpus_of_windows_mask(process);
#else
    return {};
#endif
}

void check_placement(const ThreadPlacement& p) {
    if (p.poll < 0 || p.poll > 100) throw std::invalid_argument("poll: " + std::to_string(p.poll) + " is out of range [0, 100]");
    if (p.cpus.empty()) return;
    for (size_t i = 0; i < p.cpus.size(); ++i) {
        if (p.cpus[i] < 0 || p.cpus[i] >= kMaxCpus || (i > 0 && p.cpus[i] <= p.cpus[i - 1])) {
            throw std::invalid_argument("cpu_mask: the CPUs must be distinct, ascending and in [0, " + std::to_string(kMaxCpus - 1) + "]");
        }
    }
#if !defined(__linux__) && !defined(_WIN32)
    throw std::invalid_argument("cpu_mask " + format_cpu_mask(p.cpus) + ": this platform has no way to place threads on CPUs");
#endif
}

std::vector<int> cpus_of_thread(const ThreadPlacement& p, int ith) {
    if (p.cpus.empty() || !p.strict) return p.cpus;
    return {p.cpus[static_cast<size_t>(ith) % p.cpus.size()]};
}

std::vector<int> bind_this_thread(std::span<const int> cpus) {
    if (cpus.empty()) return {};
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) {
        if (c < 0 || c >= CPU_SETSIZE) throw std::invalid_argument("cpu_mask: CPU " + std::to_string(c) + " is out of range");
        CPU_SET(c, &set);
    }
    const std::vector<int> before = this_thread_cpus();
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        const int err = errno;
        throw std::runtime_error("cannot place a thread on " + cpus_text(cpus) + " (this thread may run on " + format_cpu_list(before) +
                                 "): " + std::generic_category().message(err));
    }
    // The kernel keeps the CPUs its cpuset allows and drops the others without an error: a thread
    // that got fewer CPUs than asked for is put back and the placement refused.
    const std::vector<int> now = this_thread_cpus();
    if (!std::equal(now.begin(), now.end(), cpus.begin(), cpus.end())) {
        cpu_set_t old;
        CPU_ZERO(&old);
        for (int c : before) CPU_SET(c, &old);
        if (!before.empty()) sched_setaffinity(0, sizeof old, &old);
        std::vector<int> missing;
        std::set_difference(cpus.begin(), cpus.end(), now.begin(), now.end(), std::back_inserter(missing));
        throw std::runtime_error("cannot place a thread on " + cpus_text(cpus) + ": " + cpus_text(missing) + (missing.size() == 1 ? " is" : " are") +
                                 " not available to this process");
    }
    return before;
#elif defined(_WIN32)
    const DWORD_PTR before = SetThreadAffinityMask(GetCurrentThread(), windows_mask(cpus));
    if (before == 0) {
        throw std::runtime_error("cannot place a thread on " + cpus_text(cpus) + " (this process may run on " + format_cpu_list(allowed_cpus()) +
                                 "): SetThreadAffinityMask failed with error " + std::to_string(GetLastError()));
    }
    return cpus_of_windows_mask(before);
#else
    throw std::runtime_error("cannot place a thread on " + cpus_text(cpus) + ": this platform has no way to place threads");
#endif
}

std::vector<int> this_thread_cpus() {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return {};
    return cpus_of_set(set);
#else
    return {};
#endif
}

}  // namespace kiln::cpu
