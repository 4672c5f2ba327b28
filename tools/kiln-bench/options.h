// kiln-bench's command line: llama-bench's flags (lists as comma-separated
// values or repeated flags), validated before any model is loaded, and the
// expansion of the lists into the tests to run.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "probe_threads.h"

namespace kiln_bench {

enum class OutputFormat { Markdown, Csv, Json, Jsonl, Sql, None };  // None: nothing (-o none, with -oe)

struct Options {
    std::vector<std::string> models;
    std::vector<int32_t> n_prompt{512};
    std::vector<int32_t> n_gen{128};
    std::vector<int32_t> n_depth{0};
    std::vector<int32_t> n_threads;  // empty until parsed: the physical cores
    std::vector<std::string> cpu_mask{"0x0"};  // -C, as checked_cpu_mask writes them (0x0: the OS places the threads)
    std::vector<int32_t> cpu_strict{0};        // 1: each thread alone on one CPU of the mask
    std::vector<int32_t> use_mmap{1};          // -mmp: 1 maps the model file, 0 reads it
    std::vector<int32_t> poll{50};             // 0..100: how long idle threads spin before they sleep
    std::vector<int32_t> n_batch{2048};
    std::vector<int32_t> n_ubatch{512};
    std::vector<std::string> type_k{"f16"};
    std::vector<std::string> type_v{"f16"};
    std::vector<std::string> precision{"auto"};
    std::vector<std::pair<int32_t, int32_t>> prompt_gen;  // -pg: (prompt, generated) tokens timed together
    std::vector<int32_t> n_parallel;     // empty: no batched-decode tests
    int32_t parallel_prompt = 16;        // tokens each sequence is prompted with before a batched test
    int32_t repetitions = 5;
    int32_t n_ctx = 0;                   // 0: each test's context just fits it (d + p + n)
    OutputFormat output = OutputFormat::Markdown;
    bool output_err = false;             // -oe: the results also on stderr, in output_err_format
    OutputFormat output_err_format = OutputFormat::Markdown;
    double delay_s = 0;                  // --delay: pause before each test (llama-bench's, to let the machine cool)
    bool bandwidth = false;
    int32_t bandwidth_mib = 1024;        // the probe's buffer
    bool peak = false;                   // measure the SIMD compute peaks (prompt rows show their share)
    double peak_seconds = 0.25;          // one timed run of one peak probe (best of 3 runs)
    bool mem = false;                    // memory columns in the markdown table
    bool profile = false;                // time by op (RunnerOptions::profile)
    bool no_warmup = false;
    bool no_repack = false;              // keep the file layout (no packed weights for the CPU kernels)
    bool verbose = false;
};

// PromptGen: llama-bench's -pg, a prompt and then tokens generated after it, timed as one.
enum class TestKind { Prompt, Generation, Parallel, PromptGen };

// One measured row: what is decoded, at which depth, with which settings.
struct Test {
    TestKind kind = TestKind::Prompt;
    int32_t n_prompt = 0;      // prompt tokens (Prompt, PromptGen), or per-sequence prompt (Parallel)
    int32_t n_gen = 0;         // generated tokens (Generation, PromptGen; Parallel: per sequence)
    int32_t n_depth = 0;       // KV positions filled before the test (per sequence)
    int32_t n_parallel = 1;    // sequences decoded together
    bool use_mmap = true;  // the model loaded by mapping its file (-mmp 1) or reading it
    int32_t n_threads = 0;
    std::string cpu_mask = "0x0";
    bool cpu_strict = false;
    int32_t poll = 50;
    int32_t n_batch = 0;
    int32_t n_ubatch = 0;
    std::string type_k, type_v, precision;

    // "pp512", "tg128 @ d4096", "tg32 x8", "pp512+tg128"
    std::string name() const;
    // The test's threads and CPUs, which its machine probes run with.
    ProbePlacement placement() const { return {.threads = n_threads, .cpu_mask = cpu_mask, .cpu_strict = cpu_strict}; }
    // Only generation steps are timed (Generation, Parallel): the rows with bytes read per token.
    bool decodes() const { return kind == TestKind::Generation || kind == TestKind::Parallel; }
    // KV cells the test needs: every sequence's depth, prompt and generated tokens.
    int64_t cells_needed() const;
    // Tokens one repetition times (the t/s numerator).
    int64_t tokens_timed() const;
};

// Parses the command line. Returns false when --help was printed (exit_code set).
// Throws kiln_tools::ToolError naming the bad flag and value.
bool parse_options(int argc, char** argv, Options& opts, int& exit_code);

// Every test for one model, in llama-bench's order: settings outermost, then
// depth, then the prompt sizes, the generation lengths, -pg and the batched tests.
// Throws ToolError when -c is given and a test does not fit in it.
std::vector<Test> expand_tests(const Options& opts);

}  // namespace kiln_bench
