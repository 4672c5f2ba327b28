#include "runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <exception>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "../common/cli_common.h"
#include "core/types.h"
#include "model/gguf.h"

#if defined(__unix__) || defined(__APPLE__)
#  include <sys/resource.h>
#endif

namespace kt = kiln_tools;

namespace kiln_bench {

// ---- Statistics ----

double mean(const std::vector<double>& v) {
    if (v.empty()) return 0;
    double s = 0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
    if (v.size() < 2) return 0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size() - 1));
}

std::vector<double> Result::samples_ts() const {
    std::vector<double> ts;
    const double n = static_cast<double>(test.tokens_timed());
    for (double ns : samples_ns) ts.push_back(ns > 0 ? 1e9 * n / ns : 0.0);
    return ts;
}

double Result::avg_ns() const { return mean(samples_ns); }
double Result::stddev_ns() const { return stddev(samples_ns); }
double Result::avg_ts() const { return mean(samples_ts()); }
double Result::stddev_ts() const { return stddev(samples_ts()); }

double Result::effective_gibs() const { return bytes_per_token() * avg_ts() / (1024.0 * 1024.0 * 1024.0); }

namespace {

// ---- Peak resident memory ----

// Linux keeps the peak (VmHWM) per process and lets it be reset to the current
// resident size by writing 5 to /proc/self/clear_refs, so each test gets its own
// peak. Elsewhere (or when the write is refused) only the lifetime peak exists.
bool reset_peak_rss() {
#if defined(__linux__)
    std::ofstream f("/proc/self/clear_refs");
    if (!f) return false;
    f << "5";
    f.flush();
    return static_cast<bool>(f);
#else
    return false;
#endif
}

uint64_t peak_rss_bytes() {
#if defined(__linux__)
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:   1234 kB"
    }
#endif
#if defined(__unix__) || defined(__APPLE__)
    rusage u{};
    if (getrusage(RUSAGE_SELF, &u) == 0) {
#  if defined(__APPLE__)
        return static_cast<uint64_t>(u.ru_maxrss);  // bytes
#  else
        return static_cast<uint64_t>(u.ru_maxrss) * 1024;  // kB
#  endif
    }
#endif
    return 0;
}

// ---- Model description ----

std::string meta(const kiln_model* m, const char* key) {
    char buf[256];
    const int32_t n = kiln_model_meta_val_str(m, key, buf, sizeof buf);
    return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(std::min<int32_t>(n, sizeof buf - 1)));
}

// llama.cpp's names of GGUF general.file_type values, as llama-bench prints them.
std::string file_type_name(const std::string& id) {
    static const std::pair<const char*, const char*> kNames[] = {
        {"0", "all F32"},      {"1", "F16"},          {"2", "Q4_0"},         {"3", "Q4_1"},         {"7", "Q8_0"},
        {"8", "Q5_0"},         {"9", "Q5_1"},         {"10", "Q2_K - Medium"}, {"11", "Q3_K - Small"}, {"12", "Q3_K - Medium"},
        {"13", "Q3_K - Large"}, {"14", "Q4_K - Small"}, {"15", "Q4_K - Medium"}, {"16", "Q5_K - Small"}, {"17", "Q5_K - Medium"},
        {"18", "Q6_K"},        {"25", "IQ4_NL"},      {"32", "BF16"},
    };
    for (const auto& [k, v] : kNames) {
        if (id == k) return v;
    }
    return id.empty() ? "" : "file type " + id;
}

// The C API has no tensor list, so the file's is read again (header only: the mapping is not
// touched beyond it). Only 2-D tensors are matrix-multiplied by weight; norms and biases are 1-D.
void count_matmul_weights(ModelInfo& info) {
    const kiln::gguf::File f = kiln::gguf::File::open(info.path);
    const bool tied = f.find_tensor("output.weight") == nullptr;
    std::map<WeightClass, uint64_t> by_class;
    for (const kiln::gguf::TensorInfo& t : f.tensors()) {
        if (t.shape.size() != 2) continue;
        const bool embd = t.name == "token_embd.weight";
        if (embd && !tied) continue;  // a row lookup, not a product
        const auto n = static_cast<uint64_t>(t.n_elements());
        info.matmul_weights += n;
        if (t.name == "output.weight" || embd) info.output_weights += n;
        const WeightClass c = t.type == kiln::Type::F16    ? WeightClass::F16
                              : t.type == kiln::Type::BF16 ? WeightClass::Bf16
                              : t.type == kiln::Type::F32  ? WeightClass::F32
                                                           : WeightClass::Quantized;
        by_class[c] += n;
    }
    uint64_t most = 0;
    for (const auto& [c, n] : by_class) {
        if (n > most) {
            most = n;
            info.weight_class = c;
        }
    }
}

ModelInfo describe(const kiln_model* m, const std::string& path) {
    ModelInfo info;
    info.path = path;
    const size_t slash = path.find_last_of("/\\");
    info.filename = slash == std::string::npos ? path : path.substr(slash + 1);
    info.size = kiln_model_size(m);
    info.n_params = kiln_model_n_params(m);
    info.weight_bytes_per_token = kiln_bench_weight_bytes_per_token(m);
    std::string size = meta(m, "general.size_label");
    if (size.empty()) {
        char buf[32];
        const double p = static_cast<double>(info.n_params);
        if (p >= 1e9) std::snprintf(buf, sizeof buf, "%.1fB", p / 1e9);
        else std::snprintf(buf, sizeof buf, "%.0fM", p / 1e6);
        size = buf;
    }
    info.type = meta(m, "general.architecture") + " " + size;
    const std::string ft = file_type_name(meta(m, "general.file_type"));
    if (!ft.empty()) info.type += " " + ft;
    try {
        count_matmul_weights(info);
    } catch (const std::exception& e) {
        // The model loaded, so this is unexpected; the rows just lose their GOPS figures.
        info.matmul_weights = info.output_weights = 0;
        std::fprintf(stderr, "kiln-bench: warning: cannot count the matmul weights of %s: %s\n", path.c_str(), e.what());
    }
    return info;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
#if defined(_WIN32)
    gmtime_s(&tm, &t);
#else
    gmtime_r(&t, &tm);
#endif
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// ---- Decoding ----

// Drives one context: random token ids (a fixed seed, so every run decodes the
// same tokens), no sampling. Throws ToolError when a decode fails.
class Driver {
public:
    Driver(kiln_context* ctx, const kiln_model* model, int32_t n_batch, int32_t n_parallel)
        : ctx_(ctx),
          n_vocab_(kiln_model_n_vocab(model)),
          bos_(kiln_add_bos(model) ? kiln_token_bos(model) : -1),
          n_batch_(n_batch),
          batch_(std::max(n_batch, n_parallel), 1) {}

    // Decodes n tokens of sequence seq at positions pos0.. in chunks of n_batch, logits for the
    // last token of each chunk (as llama-bench's prompt test does).
    void prompt(int32_t seq, int32_t pos0, int32_t n) {
        for (int32_t done = 0; done < n;) {
            const int32_t chunk = std::min(n_batch_, n - done);
            batch_.clear();
            for (int32_t i = 0; i < chunk; ++i) {
                const int32_t pos = pos0 + done + i;
                batch_.add(pos == 0 && bos_ >= 0 ? bos_ : random_token(), pos, seq, i == chunk - 1);
            }
            decode();
            done += chunk;
        }
    }

    // One decode step: one token for each of n_seq sequences (0..n_seq-1), all at position pos, each with logits.
    void step(int32_t n_seq, int32_t pos) {
        batch_.clear();
        for (int32_t s = 0; s < n_seq; ++s) batch_.add(random_token(), pos, s, true);
        decode();
        // The logits are what a caller would read next; asking for them also checks they exist.
        if (!kiln_get_logits_ith(ctx_, -1)) kt::fail_with_last_error("no logits after a generation step");
    }

private:
    kiln_token random_token() { return static_cast<kiln_token>(rng_() % static_cast<uint32_t>(n_vocab_)); }

    void decode() {
        const int32_t rc = kiln_decode(ctx_, batch_.get());
        if (rc == 1) kt::fail_with_last_error("the KV cache is full");
        if (rc != 0) kt::fail_with_last_error("decode failed");
    }

    kiln_context* ctx_;
    int32_t n_vocab_;
    kiln_token bos_;
    int32_t n_batch_;
    kt::Batch batch_;
    std::mt19937 rng_{20261130};
};

// Runs one test on a fresh context, as llama-bench does for each test instance.
Result run_test(const kiln_model* model, const ModelInfo& info, const Test& t, const RunnerOptions& opts, bool& warned_rss) {
    Result r;
    r.model = info;
    r.test = t;
    r.test_time = utc_now();
    const int32_t n_seq = t.n_parallel;
    kt::ContextArgs ca{.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : static_cast<int32_t>(t.cells_needed()),
                       .n_batch = std::max(t.n_batch, n_seq),
                       .n_ubatch = t.n_ubatch,
                       .n_threads = t.n_threads,
                       .cache_type_k = t.type_k,
                       .cache_type_v = t.type_v,
                       .precision = t.precision,
                       .cpu_mask = t.cpu_mask,
                       .cpu_strict = t.cpu_strict ? 1 : 0,
                       .poll = t.poll};
    kiln_context_params cp = kt::context_params(ca);
    cp.n_seq_max = static_cast<uint32_t>(n_seq);

    // The peak is reset with the weights already resident, so it covers weights + this context.
    r.peak_rss_per_test = reset_peak_rss();
    if (!r.peak_rss_per_test && !warned_rss) {
        std::fprintf(stderr, "kiln-bench: warning: cannot reset the peak resident size; peak_rss is the process's lifetime peak\n");
        warned_rss = true;
    }
    kt::ContextPtr ctx = kt::new_context(model, cp);
    r.n_threads = kiln_n_threads(ctx.get());
    r.n_ctx = kiln_n_ctx(ctx.get());
    r.kv_bytes = kiln_kv_bytes(ctx.get());
    if (opts.verbose) std::fprintf(stderr, "kiln-bench:   context: %s\n", kt::describe_context(ctx.get(), ca).c_str());

    Driver drv(ctx.get(), model, t.n_batch, n_seq);
    // Untimed prefix of every sequence: the depth (and, for batched tests, each sequence's prompt).
    // It is decoded once; each repetition then removes what the previous one added, which leaves the
    // cache exactly as a fresh fill would (llama-bench refills it every time, at a cost of d tokens).
    const int32_t base = t.n_depth + (t.kind == TestKind::Parallel ? t.n_prompt : 0);
    auto reset_to_base = [&] {
        if (base == 0) kiln_kv_clear(ctx.get());
        else if (!kiln_kv_seq_rm(ctx.get(), -1, base, -1)) kt::fail_with_last_error("cannot trim the KV cache back to the depth");
    };
    kiln_kv_clear(ctx.get());
    for (int32_t s = 0; s < n_seq && base > 0; ++s) drv.prompt(s, 0, base);

    auto run_once = [&](bool warmup) {
        switch (t.kind) {
            case TestKind::Prompt: drv.prompt(0, base, warmup ? std::min(t.n_prompt, t.n_batch) : t.n_prompt); break;
            case TestKind::Generation:
            case TestKind::Parallel:
                for (int32_t i = 0; i < (warmup ? 1 : t.n_gen); ++i) drv.step(n_seq, base + i);
                break;
            case TestKind::PromptGen: {
                const int32_t pp = warmup ? std::min(t.n_prompt, t.n_batch) : t.n_prompt;
                drv.prompt(0, base, pp);
                for (int32_t i = 0; i < (warmup ? 1 : t.n_gen); ++i) drv.step(1, base + pp + i);
                break;
            }
        }
    };
    if (opts.warmup) {
        run_once(true);
        reset_to_base();
    }
    if (opts.profile && !kiln_bench_set_op_profiling(ctx.get(), true)) kt::fail_with_last_error("cannot profile");
    for (int32_t rep = 0; rep < opts.repetitions; ++rep) {
        if (rep > 0) reset_to_base();
        const kt::Stopwatch sw;
        run_once(false);
        r.samples_ns.push_back(sw.ms() * 1e6);
        if (opts.verbose) {
            std::fprintf(stderr, "kiln-bench:   %s rep %d: %.3f ms, %.2f t/s\n", t.name().c_str(), rep + 1, sw.ms(),
                         r.samples_ts().back());
        }
    }
    if (opts.profile) {
        // Only the timed repetitions were profiled; resets between them run no graph.
        kiln_bench_set_op_profiling(ctx.get(), false);
        std::vector<kiln_bench_op_time> rows(64);
        int32_t n = kiln_bench_op_times(ctx.get(), rows.data(), static_cast<int32_t>(rows.size()));
        if (n > static_cast<int32_t>(rows.size())) {
            rows.resize(static_cast<size_t>(n));
            n = kiln_bench_op_times(ctx.get(), rows.data(), n);
        }
        if (n < 0) kt::fail_with_last_error("cannot read the op profile");
        for (int32_t i = 0; i < n; ++i) {
            const kiln_bench_op_time& o = rows[static_cast<size_t>(i)];
            r.profile.push_back({.name = o.name, .calls = o.calls, .op_ms = o.op_ms, .op_max_ms = o.op_max_ms, .wait_ms = o.wait_ms,
                                 .weight_bytes = o.weight_bytes});
        }
        r.profile_tokens = t.tokens_timed() * opts.repetitions;
    }
    r.compute_bytes = kiln_compute_bytes(ctx.get());
    r.peak_rss = peak_rss_bytes();

    if (t.kind == TestKind::Prompt) {
        // Every token goes through the layers' matrices; the output projection only for the last
        // token of each chunk, as only it asks for logits.
        const double chunks = static_cast<double>((t.n_prompt + t.n_batch - 1) / t.n_batch);
        const double body = static_cast<double>(info.matmul_weights - info.output_weights);
        r.ops_per_token = 2.0 * (body + static_cast<double>(info.output_weights) * chunks / t.n_prompt);
    } else if (t.decodes()) {
        // Token i of a sequence sits at position base + i and attends base + i + 1 positions;
        // a batched step reads the weights once for all its sequences.
        double kv = 0;
        for (int32_t i = 0; i < t.n_gen; ++i) kv += static_cast<double>(kiln_bench_kv_bytes_per_token(ctx.get(), base + i + 1));
        r.kv_bytes_per_token = kv / t.n_gen;
        r.weight_bytes_per_token = static_cast<double>(info.weight_bytes_per_token) / n_seq;
    }
    return r;
}

}  // namespace

void Runner::run_model(const std::string& path, const std::vector<Test>& tests, std::vector<Result>& results,
                       std::vector<std::string>& errors) {
    // The model as the current test wants it loaded (-mmp): loaded again when that changes.
    kt::ModelPtr model;
    bool model_mmap = true;
    ModelInfo info;
    auto load = [&](bool use_mmap) {
        model.reset();  // the old copy goes before the new one comes
        const kt::ModelArgs ma{.path = path, .n_gpu_layers = 0, .mlock = false, .no_mmap = !use_mmap, .no_repack = !opts_.repack};
        model = kt::load_model(ma, !opts_.verbose);
        model_mmap = use_mmap;
        info = describe(model.get(), path);
        std::fprintf(stderr, "kiln-bench: %s: %s, %.2f MiB, %.2f M params, %.3f G matmul ops per token%s\n", info.filename.c_str(),
                     info.type.c_str(), kt::mib(info.size), static_cast<double>(info.n_params) / 1e6, info.matmul_ops_per_token() / 1e9,
                     use_mmap ? "" : " (read, not mapped)");
        if (opts_.verbose) std::fprintf(stderr, "kiln-bench:   %s\n", kt::describe_model(model.get()).c_str());
    };
    bool warned_rss = false;
    // The probes' buffer is freed before each test resets the peak resident size; where it cannot be
    // reset, the lifetime peak would include it, so there are no row probes.
    const int32_t row_probe_mib = reset_peak_rss() ? opts_.row_probe_mib : 0;
    // Three passes (after the warm-up one): the same reader as the run's probe, about 0.5 s a probe.
    // On the test's own CPUs (-C / --cpu-strict), as its context places its threads. CPUs the
    // process may not use give no probe (0); the test then fails with its context's error.
    auto probe = [&](const Test& t) {
        try {
            return measure_bandwidth(BandwidthOptions{.bytes = static_cast<size_t>(row_probe_mib) << 20, .threads = t.placement(), .passes = 3})
                .best_gibs;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "kiln-bench: %s: no bandwidth probe for %s (%s)\n", info.filename.c_str(), t.name().c_str(), e.what());
            return 0.0;
        }
    };
    bool load_failed = false;
    for (const Test& t : tests) {
        if (!model || model_mmap != t.use_mmap) {
            if (load_failed && model_mmap == t.use_mmap) continue;  // this loading already failed and was reported
            try {
                load(t.use_mmap);
                load_failed = false;
            } catch (const std::exception& e) {
                model.reset();
                model_mmap = t.use_mmap;
                load_failed = true;
                errors.push_back(e.what());
                std::fprintf(stderr, "kiln-bench: %s (skipping the tests of this model with -mmp %d)\n", e.what(), t.use_mmap ? 1 : 0);
                continue;
            }
        }
        if (opts_.delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(opts_.delay_s));
        std::fprintf(stderr, "kiln-bench: %s: %s, %d threads ...\n", info.filename.c_str(), t.name().c_str(), t.n_threads);
        try {
            const bool row_probe = row_probe_mib > 0 && t.decodes();
            const double before = row_probe ? probe(t) : 0;
            Result r = run_test(model.get(), info, t, opts_, warned_rss);
            if (row_probe) r.row_bandwidth_gibs = std::max(before, probe(t));
            results.push_back(std::move(r));
        } catch (const std::exception& e) {
            const std::string msg = path + ": " + t.name() + ": " + e.what();
            errors.push_back(msg);
            std::fprintf(stderr, "kiln-bench: %s (skipping this test)\n", msg.c_str());
        }
    }
}

}  // namespace kiln_bench
