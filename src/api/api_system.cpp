// C API: what build and machine this is (benchmark records, logs), and its CPU masks.
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/thread_placement.h"

namespace kiln {
const char* build_commit();  // generated at build time (cmake/BuildInfo.cmake)
int build_number();
}

using kiln::api::copy_out;
using kiln::api::guarded;

extern "C" {

const char* kiln_build_commit(void) { return kiln::build_commit(); }

int32_t kiln_build_number(void) { return kiln::build_number(); }

const char* kiln_cpu_description(void) { return kiln::cpu::cpu_description().c_str(); }

const char* kiln_cpu_kernels(void) {
    // isa_name's views are of string literals: NUL-terminated, and they outlive the call.
    return guarded([] { return kiln::cpu::isa_name(kiln::cpu::selected_isa()).data(); }, static_cast<const char*>(nullptr));
}

const char* kiln_system_info(void) {
    thread_local std::string info;  // per thread, so concurrent callers do not overwrite each other
    info = kiln::cpu::cpu_system_info();
    return info.c_str();
}

int32_t kiln_cpu_mask_normalize(const char* mask, char* buf, size_t buf_size) {
    return guarded([&] { return copy_out(kiln::cpu::format_cpu_mask(kiln::cpu::parse_cpu_mask(mask ? mask : "")), buf, buf_size); },
                   int32_t{-1});
}

int32_t kiln_cpu_range_mask(int32_t first, int32_t last, char* buf, size_t buf_size) {
    return guarded(
        [&] {
            if (first < 0 || last < first || last >= kiln::cpu::kMaxCpus) {
                throw std::invalid_argument("CPU range " + std::to_string(first) + "-" + std::to_string(last) + ": expected 0 <= first <= last <= " +
                                            std::to_string(kiln::cpu::kMaxCpus - 1));
            }
            std::vector<int> cpus(static_cast<size_t>(last - first + 1));
            std::iota(cpus.begin(), cpus.end(), first);
            return copy_out(kiln::cpu::format_cpu_mask(cpus), buf, buf_size);
        },
        int32_t{-1});
}

int32_t kiln_cpu_bind_thread(const char* cpu_mask, bool cpu_strict, int32_t ith) {
    return guarded(
        [&] {
            namespace cpu = kiln::cpu;
            const cpu::ThreadPlacement p{.cpus = cpu::parse_cpu_mask(cpu_mask ? cpu_mask : ""), .strict = cpu_strict};
            cpu::check_placement(p);
            cpu::bind_this_thread(cpu::cpus_of_thread(p, std::max(ith, 0)));
            return int32_t{0};
        },
        int32_t{-1});
}

}  // extern "C"
