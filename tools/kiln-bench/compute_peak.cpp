#include "compute_peak.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>

#include <cstdlib>
#include <string>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#  include <cpuid.h>
#  define KILN_BENCH_PEAK_X86 1
#  if defined(__linux__)
#    include <sys/syscall.h>
#    include <unistd.h>
#  endif
#endif

namespace kiln_bench {

namespace {

// A probe kernel runs `iters` loop iterations over operands loaded from a and b (64 bytes each).
using KernelFn = void (*)(uint64_t iters, const void* a, const void* b);

struct Kernel {
    PeakKind kind;
    const char* instruction;
    KernelFn fn;
    double ops_per_iter;
    double ops_per_instruction;
    const void* a;
    const void* b;
};

#if defined(KILN_BENCH_PEAK_X86)

// ---- CPU features ----

// Read from cpuid directly (not __builtin_cpu_supports): older compilers do not know
// avx512fp16 or avxvnni, and the OS must also save the registers (xgetbv).
struct Features {
    bool fma = false, avx2 = false, avxvnni = false;
    bool avx512f = false, avx512vnni = false, avx512bf16 = false, avx512fp16 = false;
    bool amx_int8 = false, amx_bf16 = false;  // and the tile state granted to this process
};

// Linux grants the AMX tile state per process on request (as the engine asks for it,
// kernels/cpu_features.cpp); without it the first tile instruction faults.
bool amx_granted() {
#  if defined(__linux__)
    const char* off = std::getenv("KILN_AMX");
    if (off && std::string(off) == "0") return false;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#  else
    return false;
#  endif
}

uint64_t xgetbv0() {
    uint32_t lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

Features detect() {
    Features f;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = xgetbv0();
    const bool ymm_state = (xcr0 & 0x6) == 0x6;     // SSE and AVX state
    const bool zmm_state = (xcr0 & 0xe6) == 0xe6;   // plus opmask, upper ZMM0-15, ZMM16-31
    if (!ymm_state) return f;
    f.fma = fma;
    if (__get_cpuid_max(0, nullptr) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b >> 5) & 1;
    f.avx512f = zmm_state && ((b >> 16) & 1);
    f.avx512vnni = f.avx512f && ((c >> 11) & 1);
    f.avx512fp16 = f.avx512f && ((d >> 23) & 1);
    const bool tiles = f.avx512f && ((d >> 24) & 1) && (xcr0 & 0x60000) == 0x60000;  // AMX-TILE, XTILECFG/XTILEDATA state
    if (tiles && (((d >> 25) & 1) || ((d >> 22) & 1)) && amx_granted()) {
        f.amx_int8 = (d >> 25) & 1;
        f.amx_bf16 = (d >> 22) & 1;
    }
    const uint32_t max_sub = a;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f.avxvnni = f.avx2 && ((a >> 4) & 1);
        f.avx512bf16 = f.avx512f && ((a >> 5) & 1);
    }
    return f;
}

// ---- Kernels ----
//
// Inline assembly, so the accumulators provably live in registers (with C++ locals GCC
// spilled them to the stack every iteration and halved the rate), and the instruction is the
// one named whatever the compiler would pick. Each function is compiled for its instruction set
// (target attribute) so that the clobber list may name the upper registers under any -march;
// the assembler accepts every mnemonic regardless. Per iteration: .rept 2 over 16 accumulators
// (zmm0-15) fed by two sources (zmm30, zmm31); vzeroupper at the end avoids SSE transition
// penalties in the caller.

#  define KILN_ACC16 "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"
#  define KILN_ZMM_CLOBBERS                                                                                              \
      "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", \
          "xmm14", "xmm15", "xmm30", "xmm31", "cc", "memory"
#  define KILN_YMM_CLOBBERS                                                                                              \
      "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", \
          "xmm14", "xmm15", "cc", "memory"
// 16 accumulators zeroed, then `insn %zmm30, %zmm31, %zmmN` for each of them, twice per iteration.
#  define KILN_ZMM_LOOP(insn)                                                  \
      "vmovdqu64 (%1), %%zmm30\n\t"                                            \
      "vmovdqu64 (%2), %%zmm31\n\t"                                            \
      ".irp r," KILN_ACC16 "\n\tvpxord %%zmm\\r, %%zmm\\r, %%zmm\\r\n\t.endr\n" \
      "1:\n\t"                                                                 \
      ".rept 2\n\t.irp r," KILN_ACC16 "\n\t" insn " %%zmm30, %%zmm31, %%zmm\\r\n\t.endr\n\t.endr\n\t" \
      "dec %0\n\t"                                                             \
      "jnz 1b\n\t"                                                             \
      "vzeroupper"

constexpr double kZmmInstrPerIter = 32;

__attribute__((target("avx512f"))) void loop_vpdpbusd_zmm(uint64_t iters, const void* a, const void* b) {
    asm volatile(KILN_ZMM_LOOP("vpdpbusd") : "+r"(iters) : "r"(a), "r"(b) : KILN_ZMM_CLOBBERS);
}

__attribute__((target("avx512f"))) void loop_vdpbf16ps_zmm(uint64_t iters, const void* a, const void* b) {
    asm volatile(KILN_ZMM_LOOP("vdpbf16ps") : "+r"(iters) : "r"(a), "r"(b) : KILN_ZMM_CLOBBERS);
}

__attribute__((target("avx512f"))) void loop_vfmadd231ph_zmm(uint64_t iters, const void* a, const void* b) {
    asm volatile(KILN_ZMM_LOOP("vfmadd231ph") : "+r"(iters) : "r"(a), "r"(b) : KILN_ZMM_CLOBBERS);
}

__attribute__((target("avx512f"))) void loop_vfmadd231ps_zmm(uint64_t iters, const void* a, const void* b) {
    asm volatile(KILN_ZMM_LOOP("vfmadd231ps") : "+r"(iters) : "r"(a), "r"(b) : KILN_ZMM_CLOBBERS);
}

// AMX: four 16 x 16 accumulator tiles (tmm0-3) fed by two A (tmm4, tmm5) and two B tiles
// (tmm6, tmm7), every row of each loaded from the same 64-byte operand (stride 0); 8 products
// per iteration, each 16 x 16 x 64 int8 or 16 x 16 x 32 BF16 multiply-adds.
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
#  define KILN_AMX_LOOP(insn)                                                                            \
      "ldtilecfg (%3)\n\t"                                                                              \
      ".irp r,0,1,2,3\n\ttilezero %%tmm\\r\n\t.endr\n\t"                                             \
      "tileloadd (%1,%4,1), %%tmm4\n\ttileloadd (%1,%4,1), %%tmm5\n\t"                                 \
      "tileloadd (%2,%4,1), %%tmm6\n\ttileloadd (%2,%4,1), %%tmm7\n"                                    \
      "1:\n\t"                                                                                          \
      ".rept 2\n\t" insn " %%tmm6, %%tmm4, %%tmm0\n\t" insn " %%tmm7, %%tmm4, %%tmm1\n\t"                \
      insn " %%tmm6, %%tmm5, %%tmm2\n\t" insn " %%tmm7, %%tmm5, %%tmm3\n\t.endr\n\t"                    \
      "dec %0\n\t"                                                                                      \
      "jnz 1b\n\t"                                                                                      \
      "tilerelease"

constexpr double kTilesPerIter = 8;

void loop_tdpbssd(uint64_t iters, const void* a, const void* b) {
    const TileConfig cfg;
    asm volatile(KILN_AMX_LOOP("tdpbssd") : "+r"(iters) : "r"(a), "r"(b), "r"(&cfg), "r"(int64_t{0}) : "cc", "memory");
}

void loop_tdpbf16ps(uint64_t iters, const void* a, const void* b) {
    const TileConfig cfg;
    asm volatile(KILN_AMX_LOOP("tdpbf16ps") : "+r"(iters) : "r"(a), "r"(b), "r"(&cfg), "r"(int64_t{0}) : "cc", "memory");
}

// Without AVX-512 only ymm0-15 exist: 14 accumulators and two sources (ymm14, ymm15).
#  define KILN_ACC14 "0,1,2,3,4,5,6,7,8,9,10,11,12,13"
#  define KILN_YMM_LOOP(insn)                                                 \
      "vmovdqu (%1), %%ymm14\n\t"                                             \
      "vmovdqu (%2), %%ymm15\n\t"                                             \
      ".irp r," KILN_ACC14 "\n\tvpxor %%ymm\\r, %%ymm\\r, %%ymm\\r\n\t.endr\n" \
      "1:\n\t"                                                                \
      ".rept 2\n\t.irp r," KILN_ACC14 "\n\t" insn " %%ymm14, %%ymm15, %%ymm\\r\n\t.endr\n\t.endr\n\t" \
      "dec %0\n\t"                                                            \
      "jnz 1b\n\t"                                                            \
      "vzeroupper"

constexpr double kYmmInstrPerIter = 28;

// AVX-VNNI's VEX-encoded vpdpbusd (Alder Lake and later cores without AVX-512); "%{" escapes the
// brace, which GCC's templates otherwise read as assembler-dialect alternatives.
__attribute__((target("avx2"))) void loop_vpdpbusd_ymm(uint64_t iters, const void* a, const void* b) {
    asm volatile(KILN_YMM_LOOP("%{vex%} vpdpbusd") : "+r"(iters) : "r"(a), "r"(b) : KILN_YMM_CLOBBERS);
}

__attribute__((target("avx2,fma"))) void loop_vfmadd231ps_ymm(uint64_t iters, const void* a, const void* b) {
    asm volatile(KILN_YMM_LOOP("vfmadd231ps") : "+r"(iters) : "r"(a), "r"(b) : KILN_YMM_CLOBBERS);
}

// Plain AVX2 int8: u8 x s8 pairs summed to i16 (vpmaddubsw), widened to i32 by a multiply-add
// with ones (vpmaddwd), accumulated (vpaddd): three instructions per 32 int8 multiply-adds.
// Six accumulators (ymm0-5), six temporaries (ymm6-11) that carry no dependency across
// iterations, sources ymm13 / ymm14 and the i16 ones in ymm15.
#  define KILN_MADD(t, acc)                                 \
      "vpmaddubsw %%ymm14, %%ymm13, %%ymm" t "\n\t"         \
      "vpmaddwd %%ymm15, %%ymm" t ", %%ymm" t "\n\t"        \
      "vpaddd %%ymm" t ", %%ymm" acc ", %%ymm" acc "\n\t"

constexpr double kMaddTriplesPerIter = 12;

__attribute__((target("avx2"))) void loop_vpmaddubsw_ymm(uint64_t iters, const void* a, const void* b) {
    asm volatile(
        "vmovdqu (%1), %%ymm13\n\t"
        "vmovdqu (%2), %%ymm14\n\t"
        "vpcmpeqw %%ymm15, %%ymm15, %%ymm15\n\t"
        "vpsrlw $15, %%ymm15, %%ymm15\n\t"  // 1 in every 16-bit lane
        ".irp r,0,1,2,3,4,5\n\tvpxor %%ymm\\r, %%ymm\\r, %%ymm\\r\n\t.endr\n"
        "1:\n\t"
        ".rept 2\n\t"
        KILN_MADD("6", "0") KILN_MADD("7", "1") KILN_MADD("8", "2") KILN_MADD("9", "3") KILN_MADD("10", "4") KILN_MADD("11", "5")
        ".endr\n\t"
        "dec %0\n\t"
        "jnz 1b\n\t"
        "vzeroupper"
        : "+r"(iters)
        : "r"(a), "r"(b)
        : KILN_YMM_CLOBBERS);
}

// Operands: finite, normal values, so no float instruction meets a denormal or NaN (which can
// take a slow path). Accumulators start at zero and grow until their additions round away.
struct alignas(64) Operand {
    uint8_t bytes[64];
};

template <typename T>
Operand fill(T v) {
    Operand o{};
    for (size_t i = 0; i < sizeof o.bytes / sizeof v; ++i) __builtin_memcpy(o.bytes + i * sizeof v, &v, sizeof v);
    return o;
}

const Operand kInt8A = fill<uint8_t>(3);
const Operand kInt8B = fill<int8_t>(-5);
const Operand kF32One = fill<float>(1.0f);
const Operand kF32Half = fill<float>(0.5f);
const Operand kBf16One = fill<uint16_t>(0x3f80);   // 1.0
const Operand kBf16Half = fill<uint16_t>(0x3f00);  // 0.5
const Operand kF16One = fill<uint16_t>(0x3c00);    // 1.0
const Operand kF16Half = fill<uint16_t>(0x3800);   // 0.5

// The kernels this CPU can run: the best int8 one, then BF16, FP16 and the widest F32 FMA.
std::vector<Kernel> available_kernels() {
    const Features f = detect();
    std::vector<Kernel> k;
    if (f.amx_int8) {
        k.push_back({PeakKind::AmxInt8, "tdpbssd", loop_tdpbssd, kTilesPerIter * 16 * 16 * 64 * 2, 16 * 16 * 64 * 2, &kInt8A, &kInt8B});
    }
    if (f.amx_bf16) {
        k.push_back({PeakKind::AmxBf16, "tdpbf16ps", loop_tdpbf16ps, kTilesPerIter * 16 * 16 * 32 * 2, 16 * 16 * 32 * 2, &kBf16One, &kBf16Half});
    }
    if (f.avx512vnni) {
        k.push_back({PeakKind::Int8, "vpdpbusd zmm", loop_vpdpbusd_zmm, kZmmInstrPerIter * 128, 128, &kInt8A, &kInt8B});
    } else if (f.avxvnni) {
        k.push_back({PeakKind::Int8, "vpdpbusd ymm", loop_vpdpbusd_ymm, kYmmInstrPerIter * 64, 64, &kInt8A, &kInt8B});
    } else if (f.avx2) {
        // Counted per vpmaddubsw: 32 int8 multiply-adds (the vpmaddwd / vpaddd are the overhead).
        k.push_back({PeakKind::Int8, "vpmaddubsw+vpmaddwd ymm", loop_vpmaddubsw_ymm, kMaddTriplesPerIter * 64, 64, &kInt8A, &kInt8B});
    }
    if (f.avx512bf16) {
        k.push_back({PeakKind::Bf16, "vdpbf16ps zmm", loop_vdpbf16ps_zmm, kZmmInstrPerIter * 64, 64, &kBf16One, &kBf16Half});
    }
    if (f.avx512fp16) {
        k.push_back({PeakKind::Fp16, "vfmadd231ph zmm", loop_vfmadd231ph_zmm, kZmmInstrPerIter * 64, 64, &kF16One, &kF16Half});
    }
    if (f.avx512f) {
        k.push_back({PeakKind::F32, "vfmadd231ps zmm", loop_vfmadd231ps_zmm, kZmmInstrPerIter * 32, 32, &kF32One, &kF32Half});
    } else if (f.fma && f.avx2) {
        k.push_back({PeakKind::F32, "vfmadd231ps ymm", loop_vfmadd231ps_ymm, kYmmInstrPerIter * 16, 16, &kF32One, &kF32Half});
    }
    return k;
}

#else

std::vector<Kernel> available_kernels() { return {}; }

#endif

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Iterations that take about `seconds` on one thread: doubled from a small count until a run
// lasts 20 ms (which also brings the core to its AVX-512 frequency), then scaled.
uint64_t calibrate(const Kernel& k, double seconds) {
    uint64_t iters = 1024;
    for (;;) {
        const auto t0 = std::chrono::steady_clock::now();
        k.fn(iters, k.a, k.b);
        const double s = seconds_since(t0);
        if (s >= 0.02 || iters >= (uint64_t{1} << 40)) return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(iters) * seconds / std::max(s, 1e-9)));
        iters *= 2;
    }
}

PeakProbe run_probe(const Kernel& k, const ProbePlacement& placement, double seconds, int repetitions) {
    const int threads = placement.threads;
    const uint64_t iters = calibrate(k, seconds);
    // Per run and thread: the thread's own time for the same work.
    std::vector<std::vector<double>> secs(static_cast<size_t>(repetitions), std::vector<double>(static_cast<size_t>(threads)));
    std::barrier sync(threads);
    auto worker = [&](int tid) {
        k.fn(std::max<uint64_t>(1, iters / 8), k.a, k.b);  // warm-up: the other cores reach their vector frequency too
        for (int rep = 0; rep < repetitions; ++rep) {
            sync.arrive_and_wait();
            const auto t0 = std::chrono::steady_clock::now();
            k.fn(iters, k.a, k.b);
            secs[static_cast<size_t>(rep)][static_cast<size_t>(tid)] = seconds_since(t0);
        }
    };
    run_probe_threads(placement, worker);

    PeakProbe p;
    p.kind = k.kind;
    p.instruction = k.instruction;
    p.ops_per_instruction = k.ops_per_instruction;
    const double ops = static_cast<double>(iters) * k.ops_per_iter;
    for (const auto& run : secs) {
        std::vector<double> rates;
        double total = 0;
        for (double s : run) {
            rates.push_back(ops / std::max(s, 1e-9) / 1e9);
            total += rates.back();
        }
        p.runs_gops.push_back(total);
        if (total > p.total_gops) {
            p.total_gops = total;
            p.thread_gops = rates;
        }
    }
    return p;
}

}  // namespace

const char* peak_kind_name(PeakKind kind) {
    switch (kind) {
        case PeakKind::Int8: return "int8";
        case PeakKind::Bf16: return "bf16";
        case PeakKind::Fp16: return "fp16";
        case PeakKind::F32: return "f32";
        case PeakKind::AmxInt8: return "amx-int8";
        case PeakKind::AmxBf16: return "amx-bf16";
    }
    return "?";
}

const PeakProbe* ComputePeak::find(PeakKind kind) const {
    for (const PeakProbe& p : probes) {
        if (p.kind == kind) return &p;
    }
    return nullptr;
}

ComputePeak measure_compute_peak(const ComputePeakOptions& opts) {
    ComputePeak r;
    r.threads = opts.threads;
    r.threads.threads = std::max(1, opts.threads.threads);
    r.seconds = std::max(0.001, opts.seconds);
    r.repetitions = std::max(1, opts.repetitions);
    for (const Kernel& k : available_kernels()) r.probes.push_back(run_probe(k, r.threads, r.seconds, r.repetitions));
    return r;
}

const PeakProbe* prompt_peak(const ComputePeak& peak, WeightClass weights, const std::string& precision, int64_t rows) {
    const bool precise = precision == "precise";
    constexpr int64_t kMatrixUnitMinRows = 32;  // as the engine's (kernels/gemm.h)
    const bool tiles = rows >= kMatrixUnitMinRows;
    switch (weights) {
        case WeightClass::Quantized:
            // fast-mode batches on the BF16 tiles (the types that have a BF16 decoder: q4_0,
            // q8_0, Q4_K, Q6_K), precise mode's on the int8 tiles
            if (const PeakProbe* p = peak.find(PeakKind::AmxBf16); p && tiles && !precise) return p;
            if (const PeakProbe* p = peak.find(PeakKind::AmxInt8); p && tiles) return p;
            return peak.find(PeakKind::Int8);
        case WeightClass::F32: return peak.find(PeakKind::F32);
        case WeightClass::F16:
            if (precise) return peak.find(PeakKind::F32);
            if (const PeakProbe* p = peak.find(PeakKind::AmxBf16); p && tiles) return p;
            if (const PeakProbe* p = peak.find(PeakKind::Fp16)) return p;
            if (const PeakProbe* p = peak.find(PeakKind::Bf16)) return p;
            return peak.find(PeakKind::F32);
        case WeightClass::Bf16:
            if (precise) return peak.find(PeakKind::F32);
            if (const PeakProbe* p = peak.find(PeakKind::AmxBf16); p && tiles) return p;
            if (peak.find(PeakKind::Fp16)) return peak.find(PeakKind::F32);
            if (const PeakProbe* p = peak.find(PeakKind::Bf16)) return p;
            return peak.find(PeakKind::F32);
    }
    return nullptr;
}

std::string describe_compute_peak(const ComputePeak& peak) {
    if (peak.probes.empty()) return "not measured (no probe kernels for this CPU)";
    std::string s;
    for (const PeakProbe& p : peak.probes) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "%s%s (%s) %.0f %s", s.empty() ? "" : ", ", peak_kind_name(p.kind), p.instruction, p.total_gops,
                      p.kind == PeakKind::Int8 || p.kind == PeakKind::AmxInt8 ? "GOPS" : "GFLOPS");
        s += buf;
    }
    return s;
}

}  // namespace kiln_bench
