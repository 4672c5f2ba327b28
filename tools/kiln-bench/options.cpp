#include "options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdio>
#include <type_traits>

#include "../common/cli_common.h"
#include "../common/cpu_options.h"

namespace kt = kiln_tools;

namespace kiln_bench {

namespace {

// llama-bench's multi-letter single-dash spellings, rewritten for CLI11.
const std::vector<std::pair<std::string, std::string>> kAliases = {
    {"-ub", "--ubatch-size"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
    {"-mmp", "--mmap"},       {"-ngl", "--n-gpu-layers"}, {"-pg", "--prompt-gen"}, {"-oe", "--output-err"},
    {"-fa", "--flash-attn"},  {"-nkvo", "--no-kv-offload"}, {"-sm", "--split-mode"}, {"-mg", "--main-gpu"},
    {"-ts", "--tensor-split"}, {"-embd", "--embeddings"}, {"-ncmoe", "--n-cpu-moe"}, {"-dev", "--device"},
    {"-dio", "--direct-io"}, {"-ot", "--override-tensor"}, {"-nopo", "--no-op-offload"},
};

const std::vector<std::string> kCacheTypes = {"f16", "f32", "bf16", "q8_0"};
const std::vector<std::string> kPrecisions = {"auto", "fast", "precise"};

// -o / -oe values.
OutputFormat output_format(const std::string& flag, const std::string& name) {
    if (name == "md") return OutputFormat::Markdown;
    if (name == "csv") return OutputFormat::Csv;
    if (name == "json") return OutputFormat::Json;
    if (name == "jsonl") return OutputFormat::Jsonl;
    if (name == "sql") return OutputFormat::Sql;
    if (name == "none") return OutputFormat::None;
    throw kt::ToolError(flag + ": unknown format '" + name + "' (expected md, csv, json, jsonl, sql or none)");
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

void check_range(const std::vector<int32_t>& v, const char* flag, int32_t lo, int32_t hi) {
    for (int32_t x : v) {
        if (x < lo || x > hi) {
            throw kt::ToolError(std::string(flag) + ": " + std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
        }
    }
}

void check_member(std::vector<std::string>& v, const char* flag, const std::vector<std::string>& allowed) {
    for (std::string& s : v) {
        s = lower(s);
        if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
            std::string list;
            for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
            throw kt::ToolError(std::string(flag) + ": unknown value '" + s + "' (expected one of " + list + ")");
        }
    }
}

// A list option: "-p 128,512" and "-p 128 -p 512" both give {128, 512}.
template <typename T>
CLI::Option* add_list(CLI::App& app, const std::string& names, std::vector<T>& v, const std::string& help, const std::string& meta) {
    CLI::Option* o = app.add_option(names, v, help)->delimiter(',')->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    std::string def;
    for (const T& x : v) {
        if constexpr (std::is_same_v<T, std::string>) def += (def.empty() ? "" : ",") + x;
        else def += (def.empty() ? "" : ",") + std::to_string(x);
    }
    return o->option_text(def.empty() ? meta : meta + " [" + def + "]");
}

// llama-bench's integer list items: N, or a range first-last, first-last+step or first-last*factor
// ("-p 64-512*2" is 64, 128, 256, 512). Values are range-checked by the caller.
std::vector<int32_t> int_list(const char* flag, const std::vector<std::string>& items) {
    constexpr size_t kMaxValues = 4096;  // a typo such as 1-100000000 is an error, not a day of tests
    std::vector<int32_t> out;
    for (const std::string& item : items) {
        auto bad = [&](const char* why) {
            return kt::ToolError(std::string(flag) + ": '" + item + "' " + why + " (expected N, FIRST-LAST, FIRST-LAST+STEP or FIRST-LAST*FACTOR)");
        };
        const char* p = item.data();
        const char* const end = p + item.size();
        auto number = [&](int64_t& v) {
            const auto r = std::from_chars(p, end, v);
            if (r.ec != std::errc() || v < INT32_MIN || v > INT32_MAX) throw bad("is not a number or range");
            p = r.ptr;
        };
        int64_t first = 0, last = 0, step = 1;
        char op = '+';
        number(first);
        last = first;
        if (p != end && *p == '-') {
            ++p;
            if (p != end && *p == '-') throw bad("is not a number or range");
            number(last);
            if (p != end && (*p == '+' || *p == '*')) {
                op = *p++;
                if (p != end && *p == '-') throw bad("has a negative step");
                number(step);
            }
        }
        if (p != end) throw bad("is not a number or range");
        if (last < first) throw bad("is a range whose last value is below its first");
        if (op == '+' ? step < 1 : (step < 2 || first < 1)) throw bad("is a range that never reaches its last value");
        for (int64_t v = first; v <= last; v = op == '+' ? v + step : v * step) {
            if (out.size() >= kMaxValues) throw bad("gives more than 4096 values");
            out.push_back(static_cast<int32_t>(v));
        }
    }
    return out;
}

}  // namespace

std::string Test::name() const {
    std::string s;
    switch (kind) {
        case TestKind::Prompt: s = "pp" + std::to_string(n_prompt); break;
        case TestKind::Generation: s = "tg" + std::to_string(n_gen); break;
        case TestKind::Parallel: s = "tg" + std::to_string(n_gen) + " x" + std::to_string(n_parallel); break;
        case TestKind::PromptGen: s = "pp" + std::to_string(n_prompt) + "+tg" + std::to_string(n_gen); break;
    }
    if (n_depth > 0) s += " @ d" + std::to_string(n_depth);
    return s;
}

int64_t Test::cells_needed() const {
    const int64_t per_seq = static_cast<int64_t>(n_depth) + n_prompt + n_gen;
    return per_seq * n_parallel;
}

int64_t Test::tokens_timed() const {
    switch (kind) {
        case TestKind::Prompt: return n_prompt;
        case TestKind::Generation: return n_gen;
        case TestKind::Parallel: return static_cast<int64_t>(n_gen) * n_parallel;
        case TestKind::PromptGen: return static_cast<int64_t>(n_prompt) + n_gen;
    }
    return 0;
}

bool parse_options(int argc, char** argv, Options& o, int& exit_code) {
    CLI::App app{"kiln-bench: prompt-processing and generation speed of GGUF models, like llama-bench.\n"
                 "Every list flag takes comma-separated values or can be repeated; each combination is a test.",
                 "kiln-bench"};
    // A scalar flag given twice takes its last value (scripts append overrides); list flags collect all.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    std::string output = "md";
    int32_t n_gpu_layers = 0;
    std::vector<std::string> prompt_gen;  // "PP,TG" per -pg
    std::string output_err;
    // llama-bench flags that have nothing to select here: validated, then ignored (see --help)
    std::vector<int32_t> flash_attn, no_kv_offload, main_gpu, embeddings, n_cpu_moe, direct_io, no_op_offload, no_host;
    std::vector<std::string> split_mode, tensor_split, devices, overrides;
    bool list_devices = false;
    std::string numa;
    bool progress = false;
    // Integer lists that take llama-bench's ranges: read as text, expanded after parsing.
    auto as_text = [](const std::vector<int32_t>& v) {
        std::vector<std::string> t;
        for (int32_t x : v) t.push_back(std::to_string(x));
        return t;
    };
    std::vector<std::string> n_prompt = as_text(o.n_prompt), n_gen = as_text(o.n_gen), n_depth = as_text(o.n_depth),
                             n_threads, n_batch = as_text(o.n_batch), n_ubatch = as_text(o.n_ubatch), n_parallel;
    add_list(app, "-m,--model", o.models, "GGUF model files (required, unless --list-devices)", "FILE");
    add_list(app, "-p,--n-prompt", n_prompt, "prompt sizes (0: no prompt test)", "N");
    add_list(app, "-n,--n-gen", n_gen, "generation lengths (0: no generation test)", "N");
    add_list(app, "-d,--n-depth", n_depth, "KV positions filled (untimed) before each test", "N");
    add_list(app, "-t,--threads", n_threads, "threads [physical cores]", "N");
    add_list(app, "-C,--cpu-mask", o.cpu_mask, "CPUs the threads run on, hexadecimal masks (0x3: CPUs 0 and 1; 0x0: wherever the OS puts them)", "MASK");
    add_list(app, "--cpu-strict", o.cpu_strict, "1: each thread alone on one CPU of the mask (thread i on its i-th CPU)", "0|1");
    add_list(app, "--poll", o.poll, "how long idle threads spin for work before they sleep, 0-100 (40 us a level; 0: sleep at once)", "N");
    add_list(app, "-b,--batch-size", n_batch, "most tokens per decode call (prompt chunks)", "N");
    add_list(app, "--ubatch-size", n_ubatch, "tokens per graph evaluation (-ub)", "N");
    add_list(app, "--cache-type-k", o.type_k, "K cache types (-ctk): f16, f32, bf16, q8_0", "TYPE");
    add_list(app, "--cache-type-v", o.type_v, "V cache types (-ctv): f16, f32, bf16, q8_0", "TYPE");
    add_list(app, "--precision", o.precision, "matmul precision: auto, fast, precise", "MODE");
    kt::metavar(app.add_option("--prompt-gen", prompt_gen, "prompt then generation, timed together (-pg PP,TG; repeatable): t/s of PP + TG tokens")
                    ->expected(1)
                    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll),
                "PP,TG");
    add_list(app, "--parallel", n_parallel, "batched decode: sequences decoded together (adds one test per value and -n)", "N");
    kt::metavar(app.add_option("--parallel-prompt", o.parallel_prompt, "prompt tokens per sequence before a batched test"), "N");
    kt::metavar(app.add_option("-r,--repetitions", o.repetitions, "repetitions of each test"), "N");
    kt::metavar(app.add_option("-c,--ctx-size", o.n_ctx, "KV cells of every context (0: just what each test needs)"), "N");
    kt::metavar(app.add_option("-o,--output", output, "results format on stdout: md, csv, json, jsonl, sql, none"), "FORMAT");
    kt::metavar(app.add_option("--output-err", output_err, "the results also on stderr, in this format (-oe): md, csv, json, jsonl, sql, none"), "FORMAT");
    kt::metavar(app.add_option("--delay", o.delay_s, "seconds to pause before each test"), "S");
    add_list(app, "--flash-attn", flash_attn,
             "accepted for llama-bench compatibility (-fa 0|1): attention always runs tiled with an online softmax, as flash attention",
             "0|1");
    add_list(app, "--no-kv-offload", no_kv_offload, "accepted for llama-bench compatibility (-nkvo 0|1); no GPU backend", "0|1");
    add_list(app, "--split-mode", split_mode, "accepted for llama-bench compatibility (-sm); no GPU backend", "MODE");
    add_list(app, "--main-gpu", main_gpu, "accepted for llama-bench compatibility (-mg); no GPU backend", "N");
    add_list(app, "--tensor-split", tensor_split, "accepted for llama-bench compatibility (-ts); no GPU backend", "SPLIT");
    add_list(app, "--embeddings", embeddings, "llama-bench's embeddings mode (-embd): only 0 (no embeddings mode here)", "0");
    add_list(app, "--n-cpu-moe", n_cpu_moe, "accepted for llama-bench compatibility (-ncmoe); no GPU backend: every expert runs on the CPU", "N");
    add_list(app, "--device", devices, "llama-bench's devices (-dev): auto or none (this build computes on the CPU only)", "DEV");
    add_list(app, "--direct-io", direct_io, "llama-bench's direct I/O (-dio): only 0 (-mmp 0 reads the file instead of mapping it)", "0");
    add_list(app, "--override-tensor", overrides,
             "accepted for llama-bench compatibility (-ot PATTERN=CPU;...): every tensor is in CPU memory already; other buffer types are errors",
             "PATTERN=BUFT");
    add_list(app, "--no-op-offload", no_op_offload, "accepted for llama-bench compatibility (-nopo 0|1); no GPU backend", "0|1");
    add_list(app, "--no-host", no_host, "accepted for llama-bench compatibility (0|1); no GPU backend", "0|1");
    app.add_flag("--list-devices", list_devices, "list the devices tests can run on and exit");
    kt::metavar(app.add_option("--numa", numa, "accepted for llama-bench compatibility; threads are not placed by NUMA node"), "MODE");
    kt::add_priority_option(app);
    app.add_flag("--progress", progress, "accepted for llama-bench compatibility: progress always goes to stderr");
    add_list(app, "--mmap", o.use_mmap, "map the model file (-mmp 0: read it; -mmp 0,1: both, the model loaded for each)", "0|1");
    app.add_flag("--no-repack", o.no_repack, "keep the weights in the file's layout (no repacking for the CPU kernels)");
    kt::metavar(app.add_option("--n-gpu-layers", n_gpu_layers, "accepted for llama-bench compatibility (-ngl); no GPU backend"), "N");
    kt::metavar(app.add_option("--bandwidth-mib", o.bandwidth_mib, "buffer the bandwidth probe reads (keep it far above the caches)"), "MIB");
    app.add_flag("--bandwidth", o.bandwidth, "measure the streaming read bandwidth first; generation rows show their share of it");
    app.add_flag("--peak", o.peak,
                 "measure the SIMD compute peaks (int8, BF16, FP16, F32) in the same run; prompt rows then show their share");
    kt::metavar(app.add_option("--peak-seconds", o.peak_seconds, "duration of one timed run of each peak probe (best of 3)"), "S");
    app.add_flag("--mem", o.mem, "memory columns in the markdown table (weights, KV, peak resident memory)");
    app.add_flag("--profile", o.profile,
                 "time every op of the timed repetitions: a table per test (markdown) or a profile array (JSON) with the time per "
                 "token by op and the weight bytes matrix products read");
    app.add_flag("--no-warmup", o.no_warmup, "skip the warm-up run before each test");
    app.add_flag("-v,--verbose", o.verbose, "print model and context details and every repetition's time to stderr");
    if (!kt::parse_command_line(app, kt::translate_aliases(argc, argv, kAliases), exit_code)) return false;
    if (list_devices) {
        // As llama-bench lists them (its CPU is not listed there: it is always used).
        std::printf("Available devices:\n  (none: kiln computes on the CPU, %s)\n", kiln_cpu_description());
        exit_code = 0;
        return false;
    }
    if (o.models.empty()) throw kt::ToolError("-m/--model: no model given (a GGUF file, or several separated by commas)");

    o.output = output_format("-o", lower(output));
    if (!output_err.empty() && lower(output_err) != "none") {
        o.output_err = true;
        o.output_err_format = output_format("-oe", lower(output_err));
    }
    check_range(flash_attn, "-fa", 0, 1);
    check_range(no_kv_offload, "-nkvo", 0, 1);
    check_range(embeddings, "-embd", 0, 0);
    check_range(n_cpu_moe, "-ncmoe", 0, 1 << 20);
    check_range(direct_io, "-dio", 0, 0);
    check_range(no_op_offload, "-nopo", 0, 1);
    check_range(no_host, "--no-host", 0, 1);
    for (const std::string& d : devices) {
        if (d != "auto" && d != "none") {
            throw kt::ToolError("-dev: unknown device '" + d + "' (this build computes on the CPU only: auto or none)");
        }
    }
    // "pattern=buffer type" entries separated by ';' (llama-bench takes lists of them, ',' between lists).
    for (const std::string& list : overrides) {
        size_t start = 0;
        while (start <= list.size()) {
            const size_t end = std::min(list.find(';', start), list.size());
            const std::string entry = list.substr(start, end - start);
            start = end + 1;
            if (entry.empty()) continue;  // "a=CPU;" and ";;" as llama.cpp reads them
            const size_t eq = entry.rfind('=');
            if (eq == std::string::npos || eq == 0) {
                throw kt::ToolError("-ot: expected PATTERN=BUFFER_TYPE, got '" + entry + "'");
            }
            if (lower(entry.substr(eq + 1)) != "cpu") {
                throw kt::ToolError("-ot: buffer type '" + entry.substr(eq + 1) + "' of '" + entry +
                                    "' is not one this build has (only CPU: every tensor is in CPU memory already)");
            }
        }
    }
    if (!(o.delay_s >= 0 && o.delay_s <= 3600)) throw kt::ToolError("--delay: " + std::to_string(o.delay_s) + " is out of range [0, 3600]");
    check_range(o.use_mmap, "-mmp", 0, 1);

    o.n_prompt = int_list("-p", n_prompt);
    o.n_gen = int_list("-n", n_gen);
    o.n_depth = int_list("-d", n_depth);
    o.n_threads = int_list("-t", n_threads);
    o.n_batch = int_list("-b", n_batch);
    o.n_ubatch = int_list("-ub", n_ubatch);
    o.n_parallel = int_list("--parallel", n_parallel);
    if (o.n_threads.empty()) o.n_threads = {kiln_bench_default_threads()};
    constexpr int32_t kMaxTokens = 1 << 24;
    for (const std::string& pg : prompt_gen) {
        // from_chars: no locale, no whitespace, and an out-of-range number is an error, not UB
        int64_t pp = 0, tg = 0;
        const char* end = pg.data() + pg.size();
        const auto a = std::from_chars(pg.data(), end, pp);
        const bool comma = a.ec == std::errc() && a.ptr != end && *a.ptr == ',';
        const auto b = comma ? std::from_chars(a.ptr + 1, end, tg) : a;
        if (!comma || b.ec != std::errc() || b.ptr != end || pp < 1 || tg < 1 || pp > kMaxTokens || tg > kMaxTokens) {
            throw kt::ToolError("-pg: expected PP,TG with both in [1, " + std::to_string(kMaxTokens) + "], got '" + pg + "'");
        }
        o.prompt_gen.emplace_back(static_cast<int32_t>(pp), static_cast<int32_t>(tg));
    }
    check_range(o.n_prompt, "-p", 0, kMaxTokens);
    check_range(o.n_gen, "-n", 0, kMaxTokens);
    check_range(o.n_depth, "-d", 0, kMaxTokens);
    check_range(o.n_threads, "-t", 1, 1024);
    for (std::string& m : o.cpu_mask) m = kt::checked_cpu_mask("-C", m);
    check_range(o.cpu_strict, "--cpu-strict", 0, 1);
    check_range(o.poll, "--poll", 0, 100);
    check_range(o.n_batch, "-b", 1, kMaxTokens);
    check_range(o.n_ubatch, "-ub", 1, kMaxTokens);
    check_range(o.n_parallel, "--parallel", 1, 64);  // sequence sets are 64-bit masks
    check_range({o.parallel_prompt}, "--parallel-prompt", 1, kMaxTokens);
    check_range({o.repetitions}, "-r", 1, 1000000);
    check_range({o.bandwidth_mib}, "--bandwidth-mib", 2, 1 << 20);
    check_range({o.n_ctx}, "-c", 0, INT32_MAX);
    if (!(o.peak_seconds >= 0.001 && o.peak_seconds <= 60)) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%g", o.peak_seconds);
        throw kt::ToolError(std::string("--peak-seconds: ") + buf + " is out of range [0.001, 60]");
    }
    check_member(o.type_k, "-ctk", kCacheTypes);
    check_member(o.type_v, "-ctv", kCacheTypes);
    check_member(o.precision, "--precision", kPrecisions);
    const bool any_prompt = std::any_of(o.n_prompt.begin(), o.n_prompt.end(), [](int32_t p) { return p > 0; });
    const bool any_gen = std::any_of(o.n_gen.begin(), o.n_gen.end(), [](int32_t n) { return n > 0; });
    if (!any_prompt && !any_gen && o.prompt_gen.empty()) throw kt::ToolError("nothing to measure: every -p and -n value is 0 and there is no -pg");
    if (!o.n_parallel.empty() && !any_gen) throw kt::ToolError("--parallel needs a generation length: give -n N with N > 0");
    return true;
}

namespace {

// Every combination of the settings lists, the first list outermost (llama-bench's order), as
// tests still to be given a kind and sizes.
std::vector<Test> settings_combinations(const Options& o) {
    std::vector<Test> bases{Test{}};
    auto times = [&bases](const auto& values, auto set) {
        std::vector<Test> next;
        next.reserve(bases.size() * values.size());
        for (const Test& b : bases) {
            for (const auto& v : values) {
                Test x = b;
                set(x, v);
                next.push_back(std::move(x));
            }
        }
        bases = std::move(next);
    };
    // Outermost: each value loads the model again, once for all its tests.
    times(o.use_mmap, [](Test& x, int32_t v) { x.use_mmap = v != 0; });
    times(o.n_threads, [](Test& x, int32_t v) { x.n_threads = v; });
    times(o.cpu_mask, [](Test& x, const std::string& v) { x.cpu_mask = v; });
    times(o.cpu_strict, [](Test& x, int32_t v) { x.cpu_strict = v != 0; });
    times(o.poll, [](Test& x, int32_t v) { x.poll = v; });
    times(o.n_batch, [](Test& x, int32_t v) { x.n_batch = v; });
    times(o.n_ubatch, [](Test& x, int32_t v) { x.n_ubatch = v; });
    times(o.type_k, [](Test& x, const std::string& v) { x.type_k = v; });
    times(o.type_v, [](Test& x, const std::string& v) { x.type_v = v; });
    times(o.precision, [](Test& x, const std::string& v) { x.precision = v; });
    times(o.n_depth, [](Test& x, int32_t v) { x.n_depth = v; });
    for (Test& x : bases) x.n_ubatch = std::min(x.n_ubatch, x.n_batch);
    return bases;
}

}  // namespace

std::vector<Test> expand_tests(const Options& o) {
    std::vector<Test> tests;
    for (const Test& base : settings_combinations(o)) {
        for (int32_t p : o.n_prompt) {
            if (p == 0) continue;
            Test x = base;
            x.n_prompt = p;
            tests.push_back(x);
        }
        for (int32_t n : o.n_gen) {
            if (n == 0) continue;
            Test x = base;
            x.kind = TestKind::Generation;
            x.n_gen = n;
            tests.push_back(x);
        }
        for (auto [pp, tg] : o.prompt_gen) {
            Test x = base;
            x.kind = TestKind::PromptGen;
            x.n_prompt = pp;
            x.n_gen = tg;
            tests.push_back(x);
        }
        for (int32_t np : o.n_parallel) {
            for (int32_t n : o.n_gen) {
                if (n == 0) continue;
                Test x = base;
                x.kind = TestKind::Parallel;
                x.n_gen = n;
                x.n_prompt = o.parallel_prompt;
                x.n_parallel = np;
                tests.push_back(x);
            }
        }
    }
    // Fail before loading anything: a fixed context must hold every test (llama-bench instead sizes
    // each context to d + p + n, which is what -c 0 does).
    for (const Test& x : tests) {
        if (x.cells_needed() > INT32_MAX) throw kt::ToolError("test " + x.name() + " needs more than 2^31 KV cells");
        if (o.n_ctx > 0 && x.cells_needed() > o.n_ctx) {
            throw kt::ToolError("test " + x.name() + " needs " + std::to_string(x.cells_needed()) + " KV cells (depth + prompt + generated" +
                                (x.n_parallel > 1 ? ", times " + std::to_string(x.n_parallel) + " sequences" : std::string()) + ") but -c is " + std::to_string(o.n_ctx) +
                                "; raise -c or omit it to size each context to its test");
        }
    }
    return tests;
}

}  // namespace kiln_bench
