// Where the tools' compute threads run and at what priority: llama.cpp's -C / -Cr /
// --cpu-strict / --poll / --prio, checked and converted before anything is loaded.
// The engine places the threads (kiln_context_params::cpu_mask); the process priority
// is the tool's to set.
#pragma once

#include <cstdint>
#include <string>

namespace kiln_tools {

// Checks a hexadecimal CPU mask ("0x3", "ff00"; bit i = CPU i) and returns it as "0x..." in
// lower case without leading zeros ("0x0": no CPU named, no placement). The engine checks it
// (kiln_cpu_mask_normalize), so a tool reads masks as contexts do; throws ToolError naming the
// flag and the engine's reason for an empty mask, a bad digit or a CPU above 1023.
std::string checked_cpu_mask(const std::string& flag, const std::string& text);

// llama.cpp's -Cr "lo-hi" (or one CPU "n"): the mask of CPUs lo..hi (kiln_cpu_range_mask), as
// checked_cpu_mask writes it.
std::string cpu_range_mask(const std::string& flag, const std::string& range);

// llama.cpp's --prio levels: -1 low, 0 normal (left as it is), 1 medium, 2 high, 3 realtime.
inline constexpr int32_t kPrioLow = -1, kPrioRealtime = 3;

// Sets the process's scheduling priority for a --prio level (POSIX nice 5 / 0 / -5 / -10 / -20,
// Windows priority classes). Level 0 leaves it as it is. A refusal (raising the priority needs
// privileges) is a warning on stderr, as in llama.cpp; returns false then.
bool set_process_priority(int32_t level);

}  // namespace kiln_tools
