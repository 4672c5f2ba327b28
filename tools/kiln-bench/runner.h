// Runs kiln-bench's tests on one model through the C API and records, per
// test, every repetition's time, the memory the test held and the bytes a
// generated token reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bandwidth.h"
#include "compute_peak.h"
#include "options.h"

namespace kiln_bench {

struct ModelInfo {
    std::string path;
    std::string filename;       // path without its folders
    std::string type;           // "llama 1B Q4_0"
    uint64_t size = 0;          // weight bytes (kiln_model_size)
    uint64_t n_params = 0;
    uint64_t weight_bytes_per_token = 0;  // kiln_bench_weight_bytes_per_token
    // Elements of the matrix-multiplied weights, counted from the GGUF tensor list: every 2-D
    // tensor except the token embedding, which counts only when it is also the output projection
    // (no output.weight). 0 when the file could not be read again.
    uint64_t matmul_weights = 0;
    uint64_t output_weights = 0;  // of those, the output projection's (only rows with logits use it)
    WeightClass weight_class = WeightClass::Quantized;  // of the type holding most matmul weights

    // Multiply-adds x 2 of a token whose logits are computed.
    double matmul_ops_per_token() const { return 2.0 * static_cast<double>(matmul_weights); }
};

// One row of --profile (kiln_bench_op_time, with the name as a string).
struct OpTimeRow {
    std::string name;
    int64_t calls = 0;
    double op_ms = 0, op_max_ms = 0, wait_ms = 0;
    uint64_t weight_bytes = 0;
};

struct Result {
    ModelInfo model;
    Test test;
    int32_t n_threads = 0;      // what the context computes with
    uint32_t n_ctx = 0;         // KV cells of the context
    std::string test_time;      // ISO 8601 UTC start of the test
    std::vector<double> samples_ns;  // one per repetition
    uint64_t kv_bytes = 0;      // the context's KV cache
    uint64_t compute_bytes = 0; // the context's compute buffers
    uint64_t peak_rss = 0;      // peak resident bytes while the context existed (0: unknown)
    bool peak_rss_per_test = true;  // false: the process's lifetime peak (the peak could not be reset)
    // Generation and batched tests (0 for prompt tests): bytes one token reads, averaged over the timed
    // tokens (the K/V part grows with the position).
    double weight_bytes_per_token = 0;
    double kv_bytes_per_token = 0;
    // Prompt tests (0 otherwise): weight matmul operations per timed token, the output projection
    // counted only for the rows that asked for logits (the last of each -b chunk).
    double ops_per_token = 0;
    // Generation and batched tests with --bandwidth: the faster of two probes run just before and just
    // after the test (0: none). On a shared VM the memory's rate moved by up to 2x within a minute, so
    // one probe at the start of a run judged later rows against another machine.
    double row_bandwidth_gibs = 0;
    // --profile: time by op over the timed repetitions (kiln_bench_op_times), and the tokens they timed.
    std::vector<OpTimeRow> profile;
    int64_t profile_tokens = 0;

    double bytes_per_token() const { return weight_bytes_per_token + kv_bytes_per_token; }
    std::vector<double> samples_ts() const;  // tokens per second of each repetition
    double avg_ns() const;
    double stddev_ns() const;
    double avg_ts() const;
    double stddev_ts() const;
    double avg_ts_per_seq() const { return avg_ts() / test.n_parallel; }
    double effective_gibs() const;  // bytes_per_token x avg_ts, in GiB/s (0 for prompt tests)
    double gops() const { return ops_per_token * avg_ts() / 1e9; }  // 0 for generation tests
};

// Mean and sample standard deviation (n - 1; 0 for fewer than two values), as llama-bench reports them.
double mean(const std::vector<double>& v);
double stddev(const std::vector<double>& v);

struct RunnerOptions {
    int32_t repetitions = 5;
    int32_t n_ctx = 0;      // 0: each context just fits its test
    bool warmup = true;
    bool repack = true;
    bool verbose = false;
    // > 0: generation and batched tests get their own bandwidth probes (Result::row_bandwidth_gibs)
    // reading this many MiB.
    int32_t row_probe_mib = 0;
    bool profile = false;  // time every op of the timed repetitions (Result::profile)
    double delay_s = 0;    // pause before each test (--delay)
};

class Runner {
public:
    explicit Runner(RunnerOptions opts) : opts_(opts) {}

    // Loads the model and runs the tests in order; results of the tests that ran are appended.
    // A model that fails to load, or a test that fails, is reported in `errors` ("FILE: test: why")
    // and the rest still run.
    void run_model(const std::string& path, const std::vector<Test>& tests, std::vector<Result>& results,
                   std::vector<std::string>& errors);

private:
    RunnerOptions opts_;
};

}  // namespace kiln_bench
