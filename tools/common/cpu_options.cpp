#include "cpu_options.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <system_error>

#include "cli_common.h"
#include "kiln.h"

#if defined(_WIN32)
#  ifndef WIN32_LEAN_AND_MEAN
#    define WIN32_LEAN_AND_MEAN
#  endif
#  ifndef NOMINMAX
#    define NOMINMAX
#  endif
#  include <windows.h>
#else
#  include <sys/resource.h>
#endif

namespace kiln_tools {

namespace {

// A mask as the engine writes it: the C API checks it, so tools and contexts read masks alike.
// make(buf, size) is one of the C API's mask writers (snprintf semantics, -1 on error).
template <class Make>
std::string engine_mask(const std::string& flag, Make make) {
    const int32_t n = make(nullptr, 0);
    if (n < 0) throw ToolError(flag + ": " + kiln_last_error());
    std::string s(static_cast<size_t>(n) + 1, '\0');
    make(s.data(), s.size());
    s.resize(static_cast<size_t>(n));
    return s;
}

}  // namespace

std::string checked_cpu_mask(const std::string& flag, const std::string& text) {
    if (text.empty()) throw ToolError(flag + ": an empty CPU mask (expected hexadecimal digits, such as 0x3 for CPUs 0 and 1)");
    return engine_mask(flag, [&](char* buf, size_t n) { return kiln_cpu_mask_normalize(text.c_str(), buf, n); });
}

std::string cpu_range_mask(const std::string& flag, const std::string& range) {
    const char* p = range.data();
    const char* end = p + range.size();
    int32_t lo = -1, hi = -1;
    auto a = std::from_chars(p, end, lo);
    bool ok = a.ec == std::errc() && a.ptr != p;
    if (ok && a.ptr != end) {
        ok = *a.ptr == '-';
        const auto b = ok ? std::from_chars(a.ptr + 1, end, hi) : a;
        ok = ok && b.ec == std::errc() && b.ptr == end;
    } else {
        hi = lo;
    }
    if (!ok) throw ToolError(flag + ": expected a CPU range lo-hi (or one CPU), got '" + range + "'");
    return engine_mask(flag, [&](char* buf, size_t n) { return kiln_cpu_range_mask(lo, hi, buf, n); });
}

bool set_process_priority(int32_t level) {
    if (level == 0) return true;
    if (level < kPrioLow || level > kPrioRealtime) throw ToolError("--prio: " + std::to_string(level) + " is out of range [-1, 3]");
#if defined(_WIN32)
    DWORD cls = NORMAL_PRIORITY_CLASS;
    switch (level) {
        case -1: cls = BELOW_NORMAL_PRIORITY_CLASS; break;
        case 1: cls = ABOVE_NORMAL_PRIORITY_CLASS; break;
        case 2: cls = HIGH_PRIORITY_CLASS; break;
        case 3: cls = REALTIME_PRIORITY_CLASS; break;
        default: break;
    }
    if (!SetPriorityClass(GetCurrentProcess(), cls)) {
        std::fprintf(stderr, "warning: cannot set the process priority to level %d (error %lu)\n", level, GetLastError());
        return false;
    }
#else
    static constexpr int kNice[] = {5, 0, -5, -10, -20};  // levels -1..3
    const int nice = kNice[level + 1];
    if (setpriority(PRIO_PROCESS, 0, nice) != 0) {
        const int err = errno;
        std::fprintf(stderr, "warning: cannot set the process priority to level %d (nice %d): %s\n", level, nice,
                     std::generic_category().message(err).c_str());
        return false;
    }
#endif
    return true;
}

}  // namespace kiln_tools
