#include "cpu_options.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <system_error>
#include <vector>

#include "cli_common.h"

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

constexpr int kMaxCpus = 1024;  // the engine's limit (cpu_set_t's size)

// Nibbles, lowest CPUs first, as "0x..." without leading zeros.
std::string mask_text(const std::vector<int>& nibbles) {
    size_t top = nibbles.size();
    while (top > 0 && nibbles[top - 1] == 0) --top;
    if (top == 0) return "0x0";
    std::string s = "0x";
    for (size_t k = top; k-- > 0;) s += "0123456789abcdef"[nibbles[k]];
    return s;
}

}  // namespace

std::string checked_cpu_mask(const std::string& flag, const std::string& text) {
    std::string_view hex = text;
    if (hex.size() >= 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
    if (hex.empty()) throw ToolError(flag + ": '" + text + "' is not a CPU mask (expected hexadecimal digits, such as 0x3 for CPUs 0 and 1)");
    std::vector<int> nibbles(hex.size());
    for (size_t k = 0; k < hex.size(); ++k) {
        const char ch = hex[hex.size() - 1 - k];
        int v = -1;
        if (ch >= '0' && ch <= '9') v = ch - '0';
        else if (ch >= 'a' && ch <= 'f') v = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') v = ch - 'A' + 10;
        if (v < 0) throw ToolError(flag + ": '" + text + "' is not a CPU mask ('" + std::string(1, ch) + "' is not a hexadecimal digit)");
        if (v != 0 && 4 * k >= static_cast<size_t>(kMaxCpus)) {  // nibble k holds CPUs 4k..4k+3
            throw ToolError(flag + ": '" + text + "' names CPUs above " + std::to_string(kMaxCpus - 1));
        }
        nibbles[k] = v;
    }
    return mask_text(nibbles);
}

std::string cpu_range_mask(const std::string& flag, const std::string& range) {
    const char* p = range.data();
    const char* end = p + range.size();
    int lo = -1, hi = -1;
    auto a = std::from_chars(p, end, lo);
    bool ok = a.ec == std::errc() && lo >= 0;
    if (ok && a.ptr != end) {
        ok = *a.ptr == '-';
        const auto b = ok ? std::from_chars(a.ptr + 1, end, hi) : a;
        ok = ok && b.ec == std::errc() && b.ptr == end;
    } else {
        hi = lo;
    }
    if (!ok || hi < lo || hi >= kMaxCpus) {
        throw ToolError(flag + ": expected a CPU range lo-hi (or one CPU) within 0-" + std::to_string(kMaxCpus - 1) + ", got '" + range + "'");
    }
    std::vector<int> nibbles(static_cast<size_t>(hi / 4 + 1), 0);
    for (int c = lo; c <= hi; ++c) nibbles[static_cast<size_t>(c / 4)] |= 1 << (c % 4);
    return mask_text(nibbles);
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
