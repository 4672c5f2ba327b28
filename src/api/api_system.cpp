// C API: what build and machine this is (benchmark records, logs).
#include <string>

#include "api/api_internal.h"
#include "backends/cpu/kernels/kernels.h"

namespace kiln {
const char* build_commit();  // generated at build time (cmake/BuildInfo.cmake)
}

using kiln::api::guarded;

extern "C" {

const char* kiln_build_commit(void) { return kiln::build_commit(); }

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

}  // extern "C"
