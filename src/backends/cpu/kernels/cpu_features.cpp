// CPU feature detection and run-time choice of the kernel set.
//
// A feature counts as present only if the CPU has it AND the operating system
// saves the register state it needs (x86: XCR0 via XGETBV), so that a kernel
// set is never chosen on a machine or VM where its instructions would fault.
// Detection and the CPU's name run once each (function-local statics: initialised
// thread-safely on first use), the only state this file keeps.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "backends/cpu/kernels/kernels.h"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define KILN_CPUID_X86 1
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#include <immintrin.h>
#else
#include <cpuid.h>
#endif
#elif defined(__aarch64__) || defined(_M_ARM64)
#define KILN_CPUID_ARM64 1
#if defined(__APPLE__)
#include <sys/sysctl.h>
#elif defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>
#elif defined(__linux__) || defined(__ANDROID__)
#include <sys/auxv.h>
#endif
#endif
#if defined(KILN_CPUID_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln::cpu {

// Kernel tables, one per instruction-set file. Each returns null for a type
// its set does not accelerate. The SIMD ones may only be called once the
// matching ISA is known to be supported: their code is compiled for it.
namespace detail {
const TypeKernels* scalar_kernels(Type t);
#if defined(KILN_ARCH_X86)
const TypeKernels* avx2_kernels(Type t, const CpuFeatures& f);
const TypeKernels* avx512_kernels(Type t, const CpuFeatures& f);
#endif
#if defined(KILN_ARCH_ARM64)
const TypeKernels* neon_kernels(Type t, const CpuFeatures& f);
#endif
}  // namespace detail

namespace {

struct Detected {
    CpuFeatures f;
    // AVX-512DQ is not part of the public feature struct, but the AVX-512
    // kernel file is compiled with -mavx512dq, so the set requires it.
    bool avx512dq = false;
};

#if defined(KILN_CPUID_X86)

struct Regs {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
    Regs r;
#if defined(_MSC_VER) && !defined(__clang__)
    int v[4];
    __cpuidex(v, static_cast<int>(leaf), static_cast<int>(sub));
    r.eax = static_cast<unsigned>(v[0]);
    r.ebx = static_cast<unsigned>(v[1]);
    r.ecx = static_cast<unsigned>(v[2]);
    r.edx = static_cast<unsigned>(v[3]);
#else
    if (!__get_cpuid_count(leaf, sub, &r.eax, &r.ebx, &r.ecx, &r.edx)) return Regs{};
#endif
    return r;
}

// XCR0: which register states the OS saves on context switches. Only valid
// to execute when CPUID reports OSXSAVE.
unsigned long long xgetbv0() {
#if defined(_MSC_VER) && !defined(__clang__)
    return _xgetbv(0);
#else
    unsigned eax = 0, edx = 0;
    // Raw opcode rather than the _xgetbv intrinsic, which would need -mxsave.
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<unsigned long long>(edx) << 32) | eax;
#endif
}

inline bool bit(unsigned v, int b) { return (v >> b) & 1u; }

// CPUID leaf 1's EAX: the family (the base field, plus the extended one when the base reads 0Fh:
// AMD's Zen 5 is 1Ah) and the model (extended bits included for families 06h and 0Fh), as Linux's
// /proc/cpuinfo shows them.
unsigned cpu_family(unsigned eax) {
    const unsigned base = (eax >> 8) & 0xF;
    return base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
}
unsigned cpu_model(unsigned eax) {
    const unsigned base_family = (eax >> 8) & 0xF, model = (eax >> 4) & 0xF;
    return base_family == 0x6 || base_family == 0xF ? model | (((eax >> 16) & 0xF) << 4) : model;
}

// Reads an environment variable; empty when unset.
std::string env_string(const char* name);

// Linux hands out the AMX tile data state (8 KiB per thread) only to processes that ask for
// it; without the grant the first tile instruction faults. The grant is for the whole process,
// threads started later included. Other systems: not used (no AMX kernels there).
bool os_grants_amx_tiles() {
#if defined(__linux__)
    constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl code (asm/prctl.h, Linux 5.16)
    constexpr long kXfeatureXtiledata = 18;     // XSAVE state component 18: TILEDATA
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
}

Detected detect() {
    Detected d;
    const Regs l0 = cpuid(0, 0);
    const unsigned max_leaf = l0.eax;
    d.f.amd = l0.ebx == 0x68747541u && l0.edx == 0x69746e65u && l0.ecx == 0x444d4163u;  // "AuthenticAMD"
    if (max_leaf < 1) return d;
    const Regs l1 = cpuid(1, 0);
    const unsigned family = cpu_family(l1.eax);
    d.f.zen5 = d.f.amd && family >= 0x1A;
    d.f.zen4 = d.f.amd && family == 0x19;
    const bool osxsave = bit(l1.ecx, 27);
    const bool avx = bit(l1.ecx, 28);
    if (!osxsave || !avx) return d;
    const unsigned long long xcr0 = xgetbv0();
    const bool os_avx = (xcr0 & 0x6) == 0x6;      // XMM + YMM state
    const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
    if (!os_avx) return d;
    d.f.fma = bit(l1.ecx, 12);
    d.f.f16c = bit(l1.ecx, 29);
    if (max_leaf < 7) return d;
    const Regs l7 = cpuid(7, 0);
    d.f.avx2 = bit(l7.ebx, 5);
    if (os_avx512) {
        d.f.avx512f = bit(l7.ebx, 16);
        d.avx512dq = bit(l7.ebx, 17);
        d.f.avx512bw = bit(l7.ebx, 30);
        d.f.avx512vl = bit(l7.ebx, 31);
        d.f.avx512vnni = bit(l7.ecx, 11);
        d.f.gfni = bit(l7.ecx, 8);
        if (l7.eax >= 1) d.f.avx512bf16 = bit(cpuid(7, 1).eax, 5);
        // AMX-TILE (EDX 24), AMX-INT8 (EDX 25), AMX-BF16 (EDX 22); XCR0 bits 17-18 (TILECFG,
        // TILEDATA). The kernels also need AVX-512 VNNI / BF16 for the work around the tiles.
        const bool os_amx = (xcr0 & 0x60000) == 0x60000;
        if (bit(l7.edx, 24) && os_amx && env_string("KILN_AMX") != "0") {
            const bool int8 = d.f.avx512vnni && bit(l7.edx, 25), bf16 = d.f.avx512bf16 && bit(l7.edx, 22);
            if ((int8 || bf16) && os_grants_amx_tiles()) {
                d.f.amx_int8 = int8;
                d.f.amx_bf16 = bf16;
            }
        }
    }
    return d;
}

#elif defined(KILN_CPUID_ARM64)

Detected detect() {
    Detected d;
    d.f.neon = true;  // Advanced SIMD is mandatory in ARMv8-A (AArch64)
#if defined(__APPLE__)
    auto has = [](const char* name) {
        int v = 0;
        size_t len = sizeof(v);
        return sysctlbyname(name, &v, &len, nullptr, 0) == 0 && v != 0;
    };
    d.f.dotprod = has("hw.optional.arm.FEAT_DotProd");
    d.f.i8mm = has("hw.optional.arm.FEAT_I8MM");
#elif defined(_WIN32)
#ifndef PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE
#define PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE 43
#endif
    d.f.dotprod = IsProcessorFeaturePresent(PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE) != 0;
#elif defined(__linux__) || defined(__ANDROID__)
    // Bit values from the kernel ABI (asm/hwcap.h), spelt out so that old
    // headers without the newer names still build.
    constexpr unsigned long kHwcapAsimd = 1ul << 1, kHwcapAsimdDp = 1ul << 20, kHwcap2I8mm = 1ul << 13;
    const unsigned long hw = getauxval(AT_HWCAP);
    const unsigned long hw2 = getauxval(AT_HWCAP2);
    d.f.neon = (hw & kHwcapAsimd) != 0;
    d.f.dotprod = d.f.neon && (hw & kHwcapAsimdDp) != 0;
    d.f.i8mm = d.f.neon && (hw2 & kHwcap2I8mm) != 0;
#endif
    return d;
}

#else

Detected detect() { return Detected{}; }

#endif

const Detected& detected() {
    static const Detected d = detect();
    return d;
}

[[maybe_unused]] std::string trim(std::string s) {
    const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string describe_cpu() {
    std::string name;
#if defined(KILN_CPUID_X86)
    // Brand string: leaves 8000'0002h..8000'0004h, 16 characters each.
    if (cpuid(0x80000000u, 0).eax >= 0x80000004u) {
        char brand[49] = {};
        for (unsigned i = 0; i < 3; ++i) {
            const Regs r = cpuid(0x80000002u + i, 0);
            const unsigned v[4] = {r.eax, r.ebx, r.ecx, r.edx};
            for (int j = 0; j < 16; ++j) brand[16 * i + j] = static_cast<char>((v[j / 4] >> (8 * (j % 4))) & 0xFF);
        }
        name = trim(brand);
    }
    if (cpuid(0, 0).eax >= 1) {
        const unsigned a = cpuid(1, 0).eax;
        char buf[64];
        std::snprintf(buf, sizeof buf, "family %u model %u", cpu_family(a), cpu_model(a));
        name = name.empty() ? std::string(buf) : name + " (" + buf + ")";
    }
#elif defined(KILN_CPUID_ARM64) && defined(__APPLE__)
    char brand[256] = {};
    size_t len = sizeof brand - 1;
    if (sysctlbyname("machdep.cpu.brand_string", brand, &len, nullptr, 0) == 0) name = trim(brand);
#endif
#if defined(__linux__) || defined(__ANDROID__)
    if (name.empty()) {  // e.g. "model name" on some Arm boards, "Hardware" on Android
        std::ifstream f("/proc/cpuinfo");
        for (std::string line; name.empty() && std::getline(f, line);) {
            const size_t colon = line.find(':');
            if (colon == std::string::npos) continue;
            const std::string key = trim(line.substr(0, colon));
            if (key == "model name" || key == "Hardware") name = trim(line.substr(colon + 1));
        }
    }
#endif
    return name.empty() ? std::string("unknown") : name;
}

std::string env_string(const char* name) {
#if defined(_MSC_VER)
    char* buf = nullptr;
    size_t len = 0;
    std::string v;
    if (_dupenv_s(&buf, &len, name) == 0 && buf) {
        v = buf;
        std::free(buf);
    }
    return v;
#else
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
#endif
}

std::string env_kiln_cpu() { return env_string("KILN_CPU"); }

std::string supported_list() {
    std::string s;
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon}) {
        if (!isa_supported(isa)) continue;
        if (!s.empty()) s += ", ";
        s += isa_name(isa);
    }
    return s;
}

Isa best_isa() {
    for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Neon}) {
        if (isa_supported(isa)) return isa;
    }
    return Isa::Scalar;
}

}  // namespace

std::string_view isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Neon: return "neon";
    }
    return "unknown";
}

const CpuFeatures& cpu_features() { return detected().f; }

const std::string& cpu_description() {
    static const std::string d = describe_cpu();
    return d;
}

std::string cpu_system_info() {
    std::string kernels;
    try {
        kernels = std::string(isa_name(selected_isa()));
    } catch (const std::exception& e) {
        kernels = std::string("none (") + e.what() + ")";
    }
    const CpuFeatures& f = cpu_features();
    std::string s = "CPU: " + cpu_description() + " | kernels: " + kernels;
    const std::pair<const char*, bool> flags[] = {
        {"AVX2", f.avx2},          {"FMA", f.fma},           {"F16C", f.f16c},       {"AVX512", f.avx512f},
        {"AVX512_VNNI", f.avx512vnni}, {"AVX512_BF16", f.avx512bf16}, {"GFNI", f.gfni}, {"AMX_INT8", f.amx_int8},
        {"AMX_BF16", f.amx_bf16},  {"NEON", f.neon},         {"DOTPROD", f.dotprod}, {"I8MM", f.i8mm},
    };
    for (const auto& [name, on] : flags) s += std::string(" | ") + name + " = " + (on ? "1" : "0");
    return s;
}

bool isa_supported(Isa isa) {
    const Detected& d = detected();
    const CpuFeatures& f = d.f;
    switch (isa) {
        case Isa::Scalar: return true;
        case Isa::Avx2:
#if defined(KILN_ARCH_X86)
            return f.avx2 && f.fma && f.f16c;
#else
            return false;
#endif
        case Isa::Avx512:
            // The AVX-512 file is also compiled with AVX2/FMA/F16C enabled.
#if defined(KILN_ARCH_X86)
            return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && d.avx512dq;
#else
            return false;
#endif
        case Isa::Neon:
#if defined(KILN_ARCH_ARM64)
            return f.neon;
#else
            return false;
#endif
    }
    return false;
}

Isa selected_isa() {
    const std::string v = env_kiln_cpu();
    if (v.empty() || v == "auto") return best_isa();
    Isa isa;
    if (v == "scalar") {
        isa = Isa::Scalar;
    } else if (v == "avx2") {
        isa = Isa::Avx2;
    } else if (v == "avx512") {
        isa = Isa::Avx512;
    } else if (v == "neon") {
        isa = Isa::Neon;
    } else {
        throw std::runtime_error("KILN_CPU=" + v +
                                 ": unknown instruction set (expected auto, scalar, avx2, avx512 or neon)");
    }
    if (!isa_supported(isa)) {
        throw std::runtime_error("KILN_CPU=" + v + ": this CPU or build cannot run it (supported here: " +
                                 supported_list() + ")");
    }
    return isa;
}

FromFloatFn native_from_float(Type t, Isa isa) {
    if (t != Type::F32 && t != Type::F16 && t != Type::BF16 && t != Type::Q8_0) return nullptr;
    const TypeKernels& k = kernels(t, isa);
    return k.vec_dot_type == t ? k.from_float : nullptr;
}

const TypeKernels& kernels(Type weight_type, Isa isa) {
    if (!isa_supported(isa)) {
        throw std::runtime_error("kernels: instruction set " + std::string(isa_name(isa)) +
                                 " is not supported by this CPU or build");
    }
    [[maybe_unused]] const CpuFeatures& f = cpu_features();
    const TypeKernels* k = nullptr;
    switch (isa) {
        case Isa::Avx512:
#if defined(KILN_ARCH_X86)
            k = detail::avx512_kernels(weight_type, f);
            // Types without an AVX-512 kernel use the AVX2 one (every
            // AVX-512 CPU has AVX2; isa_supported checked it).
            if (!k) k = detail::avx2_kernels(weight_type, f);
#endif
            break;
        case Isa::Avx2:
#if defined(KILN_ARCH_X86)
            k = detail::avx2_kernels(weight_type, f);
#endif
            break;
        case Isa::Neon:
#if defined(KILN_ARCH_ARM64)
            k = detail::neon_kernels(weight_type, f);
#endif
            break;
        case Isa::Scalar: break;
    }
    if (!k) k = detail::scalar_kernels(weight_type);
    if (!k) {
        throw std::invalid_argument("kernels: no CPU matmul kernel for type " + std::string(type_name(weight_type)));
    }
    return *k;
}

}  // namespace kiln::cpu
