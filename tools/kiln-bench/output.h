// kiln-bench's results on stdout: a markdown table like llama-bench's, CSV (a
// header row and one row per test) or JSON (an array of objects with every field).
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bandwidth.h"
#include "compute_peak.h"
#include "options.h"
#include "runner.h"

namespace kiln_bench {

struct Report {
    std::vector<Result> results;
    std::map<ProbePlacement, Bandwidth> bandwidth;  // by the tests' threads and CPUs; empty without --bandwidth
    std::map<ProbePlacement, ComputePeak> peak;     // by the tests' threads and CPUs; empty without --peak
    bool mem_columns = false;            // --mem
    // The build and machine (every row carries them, as llama-bench's rows do): kiln_build_commit,
    // kiln_cpu_description, kiln_cpu_kernels ("" where KILN_CPU names no usable set).
    std::string build_commit, cpu_info, kernels;
    int32_t build_number = 0;  // kiln_build_number
};

void print_report(FILE* out, OutputFormat format, const Report& report);

}  // namespace kiln_bench
