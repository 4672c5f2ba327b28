// kiln-bench's results on stdout: a markdown table like llama-bench's, CSV (a
// header row and one row per test) or JSON (an array of objects with every field).
#pragma once

#include <cstdio>
#include <map>
#include <vector>

#include "bandwidth.h"
#include "compute_peak.h"
#include "options.h"
#include "runner.h"

namespace kiln_bench {

struct Report {
    std::vector<Result> results;
    std::map<int, Bandwidth> bandwidth;  // by thread count; empty without --bandwidth
    std::map<int, ComputePeak> peak;     // by thread count; empty without --peak
    bool mem_columns = false;            // --mem
};

void print_report(FILE* out, OutputFormat format, const Report& report);

}  // namespace kiln_bench
