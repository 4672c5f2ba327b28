// kiln-bench: prompt-processing and generation speed of GGUF models, with
// llama-bench's flags and output formats:
//
//   kiln-bench -m MODEL[,MODEL...] [-p 512] [-n 128] [-d 0,4096] [-t 2] [-r 5]
//              [--bandwidth] [--peak] [--parallel 1,8,32] [-o md|csv|json]
//
// Each combination of the list flags is one test on a fresh context (sized to
// the test unless -c is given): a prompt test decodes n_prompt random tokens in
// n_batch chunks, a generation test decodes n_gen tokens one at a time, both
// after `depth` untimed tokens. Results (t/s as mean ± standard deviation over
// the repetitions, bytes read per generated token, matmul operations per second
// of prompt tests, peak resident memory) go to stdout; progress and errors go to
// stderr. --bandwidth and --peak measure the machine's read bandwidth and SIMD
// compute peaks first, so rows can be given as a share of them.
#include <cstdio>
#include <exception>
#include <set>

#include "../common/cli_common.h"
#include "bandwidth.h"
#include "compute_peak.h"
#include "options.h"
#include "output.h"
#include "runner.h"

namespace kt = kiln_tools;
namespace kb = kiln_bench;

namespace {

int run(int argc, char** argv) {
    kb::Options opts;
    int exit_code = 0;
    if (!kb::parse_options(argc, argv, opts, exit_code)) return exit_code;
    const std::vector<kb::Test> tests = kb::expand_tests(opts);

    kb::Report report;
    report.mem_columns = opts.mem;
    report.build_commit = kiln_build_commit();
    report.build_number = kiln_build_number();
    report.cpu_info = kiln_cpu_description();
    const char* kernels = kiln_cpu_kernels();
    report.kernels = kernels ? kernels : "";
    std::fprintf(stderr, "kiln-bench: build %s, %s\n", report.build_commit.c_str(), kiln_system_info());
    // The probes run once for every placement of threads the tests use (-t x -C x --cpu-strict),
    // on those CPUs, so each row is judged against what its own CPUs do.
    std::set<kb::ProbePlacement> placements;
    for (const kb::Test& t : tests) placements.insert(t.placement());
    // A placement the process cannot have fails its probe before any work: no probe there (the
    // tests on those CPUs fail by name, the others run).
    auto skipped = [](const char* probe, const kb::ProbePlacement& p, const std::exception& e) {
        std::fprintf(stderr, "kiln-bench: %s, %s: skipped (%s)\n", probe, p.describe().c_str(), e.what());
    };
    if (opts.bandwidth) {
        // Before any model is loaded, so the probe has the memory system to itself; the buffer is
        // freed before the first test, so it does not count in any test's peak resident size.
        for (const kb::ProbePlacement& p : placements) {
            kb::Bandwidth bw;
            try {
                bw = kb::measure_bandwidth(kb::BandwidthOptions{.bytes = static_cast<size_t>(opts.bandwidth_mib) << 20, .threads = p, .passes = 7});
            } catch (const std::exception& e) {
                skipped("read bandwidth", p, e);
                continue;
            }
            std::fprintf(stderr,
                         "kiln-bench: read bandwidth, %s (%s loads, %d MiB, %d patterns): best %.2f GiB/s (%s), median %.2f "
                         "GiB/s; plain loads best %.2f GiB/s\n",
                         p.describe().c_str(), bw.loads, opts.bandwidth_mib, bw.n_patterns, bw.best_gibs, bw.pattern, bw.median_gibs,
                         bw.plain_best_gibs);
            report.bandwidth[p] = bw;
        }
    }
    if (opts.peak) {
        // Also before any model: the probes want the cores to themselves.
        for (const kb::ProbePlacement& p : placements) {
            kb::ComputePeak peak;
            try {
                peak = kb::measure_compute_peak(kb::ComputePeakOptions{.threads = p, .seconds = opts.peak_seconds, .repetitions = 3});
            } catch (const std::exception& e) {
                skipped("compute peak", p, e);
                continue;
            }
            std::fprintf(stderr, "kiln-bench: compute peak, %s: %s\n", p.describe().c_str(), kb::describe_compute_peak(peak).c_str());
            report.peak[p] = peak;
        }
    }

    kb::Runner runner(kb::RunnerOptions{.repetitions = opts.repetitions,
                                        .n_ctx = opts.n_ctx,
                                        .warmup = !opts.no_warmup,
                                        .repack = !opts.no_repack,
                                        .verbose = opts.verbose,
                                        .row_probe_mib = opts.bandwidth ? opts.bandwidth_mib : 0,
                                        .profile = opts.profile,
                                        .delay_s = opts.delay_s});
    std::vector<std::string> errors;
    for (const std::string& path : opts.models) runner.run_model(path, tests, report.results, errors);
    kb::print_report(stdout, opts.output, report);
    if (opts.output_err) kb::print_report(stderr, opts.output_err_format, report);
    if (!errors.empty()) {
        std::fprintf(stderr, "kiln-bench: %zu failure%s:\n", errors.size(), errors.size() == 1 ? "" : "s");
        for (const std::string& e : errors) std::fprintf(stderr, "kiln-bench:   %s\n", e.c_str());
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "kiln-bench: %s\n", e.what());
        return 1;
    }
}
