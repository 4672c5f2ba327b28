// Shared pieces of the command-line tools that sit on the public C API (kiln.h):
// option groups (model / context / sampling) for CLI11, RAII handles, a loading
// progress bar, tokenization helpers and llama.cpp-style timing/memory reports.
//
// Only kiln.h, CLI11 and the standard library are used, so the tools double as
// a check that the C API is enough to write llama.cpp's tools.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "kiln.h"

namespace kiln_tools {

// A failure to report as one line "<tool>: <message>" with exit status 1.
struct ToolError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws ToolError with `what` followed by kiln_last_error() when there is one.
[[noreturn]] void fail_with_last_error(const std::string& what);

// ---- RAII handles over the C API ----
struct ModelDeleter {
    void operator()(kiln_model* m) const { kiln_model_free(m); }
};
struct ContextDeleter {
    void operator()(kiln_context* c) const { kiln_context_free(c); }
};
struct SamplerDeleter {
    void operator()(kiln_sampler* s) const { kiln_sampler_free(s); }
};
struct StreamDecoderDeleter {
    void operator()(kiln_stream_decoder* d) const { kiln_stream_decoder_free(d); }
};
using ModelPtr = std::unique_ptr<kiln_model, ModelDeleter>;
using ContextPtr = std::unique_ptr<kiln_context, ContextDeleter>;
using SamplerPtr = std::unique_ptr<kiln_sampler, SamplerDeleter>;
using StreamDecoderPtr = std::unique_ptr<kiln_stream_decoder, StreamDecoderDeleter>;

// A kiln_batch that frees itself; fill with clear()/add().
class Batch {
public:
    Batch(int32_t n_tokens_max, int32_t n_seq_max);
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

    void clear() { b_.n_tokens = 0; }
    void add(kiln_token token, int32_t pos, int32_t seq, bool logits);
    int32_t size() const { return b_.n_tokens; }
    int32_t capacity() const { return cap_; }
    const kiln_batch& get() const { return b_; }

private:
    kiln_batch b_{};
    int32_t cap_ = 0;
};

// ---- Option groups ----

// CLI11 2.x has no multi-letter single-dash options; llama.cpp's spellings
// (-ngl, -ctk, -cnv, ...) are rewritten to their long forms before parsing.
// `aliases` maps e.g. "-ngl" -> "--n-gpu-layers".
std::vector<std::string> translate_aliases(int argc, char** argv,
                                           const std::vector<std::pair<std::string, std::string>>& aliases);

// Parses args with app; on --help prints the help and returns 0 via `exit_code`;
// on a parse error throws ToolError. Returns true when the tool should run.
bool parse_command_line(CLI::App& app, const std::vector<std::string>& args, int& exit_code);

// Sets the help's value column to "METAVAR [default]" (CLI11's option_text
// would otherwise hide the default).
CLI::Option* metavar(CLI::Option* o, const std::string& name);

struct ModelArgs {
    std::string path;
    int32_t n_gpu_layers = 0;
    bool mlock = false;
    bool no_mmap = false;
    bool no_repack = false;
};
void add_model_options(CLI::App& app, ModelArgs& a);

struct ContextArgs {
    int32_t n_ctx = 4096;     // 0: the model's training context
    int32_t n_batch = 2048;
    int32_t n_ubatch = 512;
    int32_t n_threads = 0;    // 0: physical cores
    int32_t n_threads_batch = 0;  // prompts (batches of more than one token); 0: n_threads
    std::string cache_type_k = "f16";
    std::string cache_type_v = "f16";
    std::string precision = "auto";
    std::string cpu_mask = "0x0";  // -C (or -Cr, converted), as checked_cpu_mask writes it; 0x0: the OS places the threads
    int32_t cpu_strict = 0;        // 1: each thread alone on one CPU of the mask
    int32_t poll = 50;             // 0..100: how long idle threads spin before they sleep
};
// The context group, with llama.cpp's CPU flags: -tb, -C, -Cr (give the tool {"-tb", "--threads-batch"} and
// {"-Cr", "--cpu-range"} as aliases), --cpu-strict, --poll, and --prio (the process priority, set when
// the flag is parsed).
void add_context_options(CLI::App& app, ContextArgs& a);
// llama.cpp's --prio: sets the process priority (set_process_priority) as the flag is parsed.
void add_priority_option(CLI::App& app);
// The parameters for a's settings. cpu_mask points into a: keep a until the context is made.
kiln_context_params context_params(const ContextArgs& a);

struct SamplingArgs {
    float temp = 0.80f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float typical_p = 1.00f;
    int32_t repeat_last_n = 64;
    float repeat_penalty = 1.00f;
    float presence_penalty = 0.00f;
    float frequency_penalty = 0.00f;
    int64_t seed = -1;  // negative: random
};
void add_sampling_options(CLI::App& app, SamplingArgs& a);
kiln_sampler_params sampler_params(const SamplingArgs& a);
// "repeat_last_n = 64, repeat_penalty = 1.000, ... temp = 0.800" as llama.cpp prints it.
std::string describe_sampler(const SamplingArgs& a);

// ---- Loading ----

// Loads the model; shows a progress bar on stderr unless quiet. Throws ToolError.
ModelPtr load_model(const ModelArgs& a, bool quiet);
ContextPtr new_context(const kiln_model* model, const kiln_context_params& p);

// "gemma3 270M Q4_K - Medium | 268.10 M params | 241.03 MiB"
std::string describe_model(const kiln_model* model);
std::string describe_context(const kiln_context* ctx, const ContextArgs& a);

// ---- Text ----

std::string read_file(const std::string& path);
std::vector<kiln_token> tokenize(const kiln_model* model, std::string_view text, bool add_special, bool parse_special);
std::string token_to_piece(const kiln_model* model, kiln_token token, bool special);
std::string detokenize(const kiln_model* model, const std::vector<kiln_token>& tokens, bool unparse_special);
// The BOS token's text (e.g. "<bos>"), or "" if the model has none.
std::string bos_text(const kiln_model* model);

// Pushes one token through a stream decoder and returns the text that became printable.
std::string stream_push(kiln_stream_decoder* dec, kiln_token token);
std::string stream_flush(kiln_stream_decoder* dec);

// ---- Reports ----

// Wall-clock stopwatch in milliseconds.
class Stopwatch {
public:
    Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
    double ms() const { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count(); }

private:
    std::chrono::steady_clock::time_point t0_;
};

// The closing report: load, prompt eval, generation and sampling (unless the tool
// generates nothing), total.
void print_timings(FILE* out, const kiln_context* ctx, double total_ms, bool generation = true);
void print_memory(FILE* out, const kiln_context* ctx);

double mib(uint64_t bytes);

// Whether stdin is a terminal (input read from a pipe is echoed so transcripts read well).
bool stdin_is_terminal();

}  // namespace kiln_tools
