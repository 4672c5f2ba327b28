// The SIMD compute peak probe (--peak): how many int8, BF16, FP16 and F32
// multiply-add operations per second this machine issues with a given number
// of threads, measured in the same run as the prompt tests so that their speed
// can be judged against it (the VM's speed drifts by up to 1.5x over a day).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "probe_threads.h"

namespace kiln_bench {

// The number formats a prompt matmul kernel computes in; the AMX kinds are the tile unit's
// (Sapphire Rapids and later, where the OS grants the tiles and KILN_AMX is not 0).
enum class PeakKind { Int8, Bf16, Fp16, F32, AmxInt8, AmxBf16 };
const char* peak_kind_name(PeakKind kind);  // "int8", "bf16", "fp16", "f32", "amx-int8", "amx-bf16"

struct ComputePeakOptions {
    ProbePlacement threads;  // how many threads run each probe, and on which CPUs
    double seconds = 0.25;  // one timed run of one probe
    int repetitions = 3;    // timed runs per probe; the best counts
};

// One instruction's probe.
struct PeakProbe {
    PeakKind kind = PeakKind::F32;
    const char* instruction = "";     // "vpdpbusd zmm", "vfmadd231ps ymm", ...
    double ops_per_instruction = 0;   // 2 x multiply-adds
    double total_gops = 0;            // best run: the sum of the threads' rates
    std::vector<double> thread_gops;  // that run, per thread
    std::vector<double> runs_gops;    // every timed run's total
};

struct ComputePeak {
    ProbePlacement threads;
    double seconds = 0;
    int repetitions = 0;
    // The kinds this CPU has an instruction for, int8 first; empty where the probe
    // has no kernels (not x86, or a compiler without GNU inline assembly).
    std::vector<PeakProbe> probes;

    const PeakProbe* find(PeakKind kind) const;  // null when not measured
};

// Runs every probe the CPU supports (checked at run time, whatever the build's -march):
// each thread keeps 16 independent accumulators in registers (12+ are needed to cover a
// 4-5 cycle latency at 2 issues per cycle) and runs the instruction in a loop for about
// opts.seconds; threads start together behind a barrier and time themselves.
ComputePeak measure_compute_peak(const ComputePeakOptions& opts);

// The weights' number format class, which decides a prompt kernel's instruction.
enum class WeightClass { Quantized, F16, Bf16, F32 };

// The probe a prompt matmul over `weights` is bound by, as the CPU backend chooses kernels
// (docs/engine.md, "F16 and BF16 weights", "AMX tiles"): for quantized weights the AMX BF16
// tiles outside precise mode and the AMX int8 tiles in it, where measured, else int8 dot
// products; F16 and BF16 outside precise mode the AMX BF16 tiles where measured; otherwise for F16,
// FP16 FMA where the CPU has it, else BF16 dot products, else F32 FMA; for BF16, F32 FMA on
// FP16 CPUs (the exact path), else BF16 dot products; F32 FMA for F32 and for float weights at
// --precision precise. Null when that probe was not measured.
// rows: activation rows per product (the prompt's micro-batch): the AMX tiles run from 32 (the
// engine's kMatrixUnitMinRows, src/backends/cpu/kernels/gemm.h; precise mode's residual rows
// aside), the vector kernels below.
const PeakProbe* prompt_peak(const ComputePeak& peak, WeightClass weights, const std::string& precision, int64_t rows);

// "int8 (vpdpbusd zmm) 1380 GOPS, bf16 (vdpbf16ps zmm) 610 GFLOPS, ..." or "not measured".
std::string describe_compute_peak(const ComputePeak& peak);

}  // namespace kiln_bench
