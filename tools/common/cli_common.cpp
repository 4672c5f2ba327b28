#include "cli_common.h"
#include "cpu_options.h"
#include "utf8_args.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <fstream>
#include <sstream>

#if defined(_WIN32)
#  include <io.h>
#  define KILN_ISATTY _isatty
#  define KILN_FILENO _fileno
#else
#  include <unistd.h>
#  define KILN_ISATTY isatty
#  define KILN_FILENO fileno
#endif

namespace kiln_tools {

void fail_with_last_error(const std::string& what) {
    const std::string detail = kiln_last_error();
    throw ToolError(detail.empty() ? what : what + ": " + detail);
}

// ---- Batch ----

Batch::Batch(int32_t n_tokens_max, int32_t n_seq_max) : b_(kiln_batch_init(n_tokens_max, n_seq_max)), cap_(n_tokens_max) {
    if (!b_.token) throw ToolError("cannot allocate a batch of " + std::to_string(n_tokens_max) + " tokens");
}

Batch::~Batch() { kiln_batch_free(b_); }

void Batch::add(kiln_token token, int32_t pos, int32_t seq, bool logits) {
    if (b_.n_tokens >= cap_) throw ToolError("internal: batch overflow");
    const int32_t i = b_.n_tokens++;
    b_.token[i] = token;
    b_.pos[i] = pos;
    b_.n_seq_id[i] = 1;
    b_.seq_id[i][0] = seq;
    b_.logits[i] = logits ? 1 : 0;
}

// ---- Command line ----

std::vector<std::string> translate_aliases(int argc, char** argv,
                                           const std::vector<std::pair<std::string, std::string>>& aliases) {
    std::vector<std::string> out;
    const std::vector<std::string> args = utf8_args(argc, argv);  // UTF-8 on Windows too
    for (size_t i = 1; i < args.size(); ++i) {
        std::string arg = args[i];
        for (const auto& [from, to] : aliases) {
            if (arg == from) {
                arg = to;
                break;
            }
            // "-ngl=5" style
            if (arg.size() > from.size() && arg.compare(0, from.size(), from) == 0 && arg[from.size()] == '=') {
                arg = to + arg.substr(from.size());
                break;
            }
        }
        out.push_back(std::move(arg));
    }
    // CLI11 consumes the vector from the back.
    std::reverse(out.begin(), out.end());
    return out;
}

bool parse_command_line(CLI::App& app, const std::vector<std::string>& args, int& exit_code) {
    try {
        std::vector<std::string> copy = args;
        app.parse(copy);
        return true;
    } catch (const CLI::CallForHelp& e) {
        exit_code = app.exit(e);
        return false;
    } catch (const CLI::CallForAllHelp& e) {
        exit_code = app.exit(e);
        return false;
    } catch (const CLI::ParseError& e) {
        throw ToolError(std::string(e.what()) + " (see --help)");
    }
}

CLI::Option* metavar(CLI::Option* o, const std::string& name) {
    o->capture_default_str();
    const std::string def = o->get_default_str();
    return o->option_text(def.empty() ? name : name + " [" + def + "]");
}

void add_model_options(CLI::App& app, ModelArgs& a) {
    metavar(app.add_option("-m,--model", a.path, "GGUF model file")->required(), "FILE");
    metavar(app.add_option("--n-gpu-layers,--gpu-layers", a.n_gpu_layers, "layers to offload to a GPU (-ngl)")
        ->check(CLI::NonNegativeNumber), "N");
    app.add_flag("--mlock", a.mlock, "lock the weights in RAM");
    app.add_flag("--no-mmap", a.no_mmap, "read the file instead of mapping it");
    app.add_flag("--no-repack", a.no_repack, "keep the weights in the file's layout (no repacking for the CPU kernels)");
}

namespace {

const std::vector<std::string> kCacheTypes = {"f16", "f32", "bf16", "q8_0"};
const std::vector<std::string> kPrecisions = {"auto", "fast", "precise"};

int32_t cache_type_id(const std::string& name) {
    const int32_t id = kiln_type_from_name(name.c_str());
    if (id < 0) throw ToolError("unknown KV cache type '" + name + "'");
    return id;
}

}  // namespace

void add_context_options(CLI::App& app, ContextArgs& a) {
    metavar(app.add_option("-c,--ctx-size", a.n_ctx, "context size in tokens (0: the model's training context)")
        ->check(CLI::NonNegativeNumber), "N");
    metavar(app.add_option("-b,--batch-size", a.n_batch, "most tokens per decode call")->check(CLI::PositiveNumber), "N");
    metavar(app.add_option("--ubatch-size", a.n_ubatch, "tokens per graph evaluation (-ub)")->check(CLI::PositiveNumber), "N");
    metavar(app.add_option("-t,--threads", a.n_threads, "threads (0: the number of physical cores)")
        ->check(CLI::NonNegativeNumber), "N");
    metavar(app.add_option("--threads-batch", a.n_threads_batch, "threads for prompts (-tb; 0: as --threads)")
        ->check(CLI::NonNegativeNumber), "N");
    metavar(app.add_option("--cache-type-k", a.cache_type_k, "K cache type (-ctk): f16, f32, bf16, q8_0")
        ->check(CLI::IsMember(kCacheTypes, CLI::ignore_case)), "TYPE");
    metavar(app.add_option("--cache-type-v", a.cache_type_v, "V cache type (-ctv): f16, f32, bf16, q8_0")
        ->check(CLI::IsMember(kCacheTypes, CLI::ignore_case)), "TYPE");
    metavar(app.add_option("--precision", a.precision, "matmul precision: auto, fast (8-bit activations, BF16 ones for 32+ rows on AMX-BF16 CPUs, BF16 attention on Zen 4/5), precise (also F32 attention; auto and fast take FP16 attention on AVX512-FP16 CPUs)")
        ->check(CLI::IsMember(kPrecisions, CLI::ignore_case)), "MODE");
    CLI::Option* mask = metavar(app.add_option("-C,--cpu-mask", a.cpu_mask, "CPUs the threads run on, a hexadecimal mask (0x3: CPUs 0 and 1; 0x0: wherever the OS puts them)")
        ->transform(CLI::Validator([](std::string& s) { s = checked_cpu_mask("-C", s); return std::string(); }, "", "")), "MASK");
    app.add_option_function<std::string>("--cpu-range", [&a](const std::string& r) { a.cpu_mask = cpu_range_mask("-Cr", r); },
                                         "CPUs the threads run on, as a range (-Cr lo-hi; instead of -C)")
        ->option_text("LO-HI")
        ->excludes(mask);
    metavar(app.add_option("--cpu-strict", a.cpu_strict, "1: each thread alone on one CPU of the mask (thread i on its i-th CPU)")->check(CLI::Range(0, 1)), "0|1");
    metavar(app.add_option("--poll", a.poll, "how long idle threads spin for work before they sleep, 0-100 (40 us a level; 0: sleep at once)")->check(CLI::Range(0, 100)), "N");
    add_priority_option(app);
}

void add_priority_option(CLI::App& app) {
    app.add_option_function<int32_t>("--prio", [](int32_t level) { set_process_priority(level); },
                                     "process priority: -1 low, 0 normal (left as it is), 1 medium, 2 high, 3 realtime")
        ->check(CLI::Range(kPrioLow, kPrioRealtime))
        ->option_text("N [0]");
}

kiln_context_params context_params(const ContextArgs& a) {
    kiln_context_params p = kiln_context_default_params();
    p.n_ctx = static_cast<uint32_t>(a.n_ctx);
    p.n_batch = static_cast<uint32_t>(a.n_batch);
    p.n_ubatch = static_cast<uint32_t>(std::min(a.n_ubatch, a.n_batch));
    p.n_threads = a.n_threads;
    p.n_threads_batch = a.n_threads_batch;
    p.type_k = cache_type_id(a.cache_type_k);
    p.type_v = cache_type_id(a.cache_type_v);
    const auto it = std::find(kPrecisions.begin(), kPrecisions.end(), a.precision);
    p.matmul_precision = it == kPrecisions.end() ? 0 : static_cast<int32_t>(it - kPrecisions.begin());
    p.cpu_mask = a.cpu_mask.c_str();
    p.cpu_strict = a.cpu_strict != 0;
    p.poll = a.poll;
    return p;
}

void add_sampling_options(CLI::App& app, SamplingArgs& a) {
    metavar(app.add_option("--temp", a.temp, "temperature (<= 0: greedy)"), "T");
    metavar(app.add_option("--top-k", a.top_k, "top-k sampling (<= 0: off)"), "N");
    metavar(app.add_option("--top-p", a.top_p, "top-p sampling (1: off)")->check(CLI::Range(0.0f, 1.0f)), "P");
    metavar(app.add_option("--min-p", a.min_p, "min-p sampling (0: off)")->check(CLI::Range(0.0f, 1.0f)), "P");
    metavar(app.add_option("--typical", a.typical_p, "locally typical sampling (1: off)")->check(CLI::Range(0.0f, 1.0f)), "P");
    metavar(app.add_option("--repeat-penalty", a.repeat_penalty, "penalty for repeated tokens (1: off)"), "X");
    metavar(app.add_option("--repeat-last-n", a.repeat_last_n, "tokens the penalties look back over (0: off, -1: the context)")
        ->check(CLI::Range(-1, INT32_MAX)), "N");
    metavar(app.add_option("--presence-penalty", a.presence_penalty, "presence penalty (0: off)"), "X");
    metavar(app.add_option("--frequency-penalty", a.frequency_penalty, "frequency penalty (0: off)"), "X");
    metavar(app.add_option("-s,--seed", a.seed, "random seed (-1: random)")->check(CLI::Range(int64_t{-1}, int64_t{UINT32_MAX})), "N");
}

kiln_sampler_params sampler_params(const SamplingArgs& a) {
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temp = a.temp;
    p.top_k = a.top_k;
    p.top_p = a.top_p;
    p.min_p = a.min_p;
    p.typical_p = a.typical_p;
    p.penalty_last_n = a.repeat_last_n;
    p.penalty_repeat = a.repeat_penalty;
    p.penalty_freq = a.frequency_penalty;
    p.penalty_present = a.presence_penalty;
    p.seed = a.seed < 0 ? 0xFFFFFFFFu : static_cast<uint32_t>(a.seed);
    return p;
}

std::string describe_sampler(const SamplingArgs& a) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "repeat_last_n = %d, repeat_penalty = %.3f, frequency_penalty = %.3f, presence_penalty = %.3f, "
                  "top_k = %d, top_p = %.3f, min_p = %.3f, typical_p = %.3f, temp = %.3f",
                  a.repeat_last_n, a.repeat_penalty, a.frequency_penalty, a.presence_penalty, a.top_k, a.top_p, a.min_p,
                  a.typical_p, a.temp);
    return buf;
}

// ---- Loading ----

namespace {

// Draws "loading [=====>     ]  45%" on a terminal, or dots (one per 5%) when
// stderr is a file or pipe, so logs stay readable.
class ProgressBar {
public:
    explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(KILN_ISATTY(KILN_FILENO(stderr)) != 0) {}

    static bool callback(float progress, void* user_data) {
        static_cast<ProgressBar*>(user_data)->update(progress);
        return true;
    }

    void update(float progress) {
        const int pct = std::clamp(static_cast<int>(progress * 100.0f + 0.5f), 0, 100);
        if (pct == last_pct_) return;
        if (tty_) {
            constexpr int kWidth = 40;
            const int filled = pct * kWidth / 100;
            std::string bar(static_cast<size_t>(filled), '=');
            if (filled < kWidth) bar += '>';
            bar.resize(kWidth, ' ');
            std::fprintf(stderr, "\r%s [%s] %3d%%", label_.c_str(), bar.c_str(), pct);
        } else {
            if (last_pct_ < 0) std::fprintf(stderr, "%s ", label_.c_str());
            for (int d = std::max(last_pct_, 0) / 5; d < pct / 5; ++d) std::fputc('.', stderr);
        }
        std::fflush(stderr);
        last_pct_ = pct;
    }

    void finish() {
        if (last_pct_ >= 0) std::fputc('\n', stderr);
        last_pct_ = -1;
    }

private:
    std::string label_;
    bool tty_;
    int last_pct_ = -1;
};

}  // namespace

ModelPtr load_model(const ModelArgs& a, bool quiet) {
    kiln_model_params p = kiln_model_default_params();
    p.n_gpu_layers = a.n_gpu_layers;
    p.use_mlock = a.mlock;
    p.use_mmap = !a.no_mmap;
    p.use_repack = !a.no_repack;
    ProgressBar bar("loading " + a.path);
    if (!quiet) {
        p.progress_callback = &ProgressBar::callback;
        p.progress_callback_user_data = &bar;
    }
    ModelPtr m(kiln_model_load(a.path.c_str(), p));
    bar.finish();
    if (!m) fail_with_last_error("cannot load model '" + a.path + "'");
    return m;
}

ContextPtr new_context(const kiln_model* model, const kiln_context_params& p) {
    ContextPtr c(kiln_context_new(model, p));
    if (!c) fail_with_last_error("cannot create a context");
    return c;
}

bool stdin_is_terminal() { return KILN_ISATTY(KILN_FILENO(stdin)) != 0; }

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string describe_model(const kiln_model* model) {
    std::string desc(256, '\0');
    const int32_t n = kiln_model_desc(model, desc.data(), desc.size());
    desc.resize(static_cast<size_t>(std::clamp<int32_t>(n, 0, static_cast<int32_t>(desc.size()) - 1)));
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s | %.2f M params | %.2f MiB | %d layers | n_embd %d | n_vocab %d | n_ctx_train %d",
                  desc.c_str(), static_cast<double>(kiln_model_n_params(model)) / 1e6, mib(kiln_model_size(model)),
                  kiln_model_n_layer(model), kiln_model_n_embd(model), kiln_model_n_vocab(model), kiln_model_n_ctx_train(model));
    return buf;
}

std::string describe_context(const kiln_context* ctx, const ContextArgs& a) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "threads = %d (batch %d) | n_ctx = %u | n_batch = %u | n_ubatch = %d | KV cache K %s, V %s, %.2f MiB | precision %s",
                  kiln_n_threads(ctx), kiln_n_threads_batch(ctx), kiln_n_ctx(ctx), kiln_n_batch(ctx), std::min(a.n_ubatch, a.n_batch),
                  a.cache_type_k.c_str(), a.cache_type_v.c_str(), mib(kiln_kv_bytes(ctx)), a.precision.c_str());
    return buf;
}

// ---- Text ----

std::string read_file(const std::string& path) {
    std::ifstream f(utf8_path(path), std::ios::binary);
    if (!f) throw ToolError("cannot open '" + path + "'");
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) throw ToolError("cannot read '" + path + "'");
    return ss.str();
}

std::vector<kiln_token> tokenize(const kiln_model* model, std::string_view text, bool add_special, bool parse_special) {
    if (text.size() > static_cast<size_t>(INT32_MAX)) throw ToolError("the text is too large to tokenize");
    const auto len = static_cast<int32_t>(text.size());
    // Natural text averages 3-5 bytes per token: this guess almost always fits, so the
    // text is tokenized once; when it does not, the call says how many are needed.
    std::vector<kiln_token> tokens(text.size() / 2 + 16);
    int32_t n = kiln_tokenize(model, text.data(), len, tokens.data(), static_cast<int32_t>(tokens.size()), add_special, parse_special);
    if (n == INT32_MIN) fail_with_last_error("tokenization failed");
    if (n < 0) {
        tokens.resize(static_cast<size_t>(-n));
        n = kiln_tokenize(model, text.data(), len, tokens.data(), static_cast<int32_t>(tokens.size()), add_special, parse_special);
        if (n < 0) fail_with_last_error("tokenization failed");
    }
    tokens.resize(static_cast<size_t>(n));
    return tokens;
}

std::string token_to_piece(const kiln_model* model, kiln_token token, bool special) {
    std::string s(32, '\0');
    int32_t n = kiln_token_to_piece(model, token, s.data(), static_cast<int32_t>(s.size()), special);
    if (n < 0) return {};
    if (static_cast<size_t>(n) >= s.size()) {
        s.resize(static_cast<size_t>(n) + 1);
        n = kiln_token_to_piece(model, token, s.data(), static_cast<int32_t>(s.size()), special);
    }
    s.resize(static_cast<size_t>(std::max(n, 0)));
    return s;
}

std::string detokenize(const kiln_model* model, const std::vector<kiln_token>& tokens, bool unparse_special) {
    if (tokens.empty()) return {};
    const auto n_tok = static_cast<int32_t>(tokens.size());
    int32_t n = kiln_detokenize(model, tokens.data(), n_tok, nullptr, 0, false, unparse_special);
    if (n < 0) fail_with_last_error("detokenization failed");
    std::string s(static_cast<size_t>(n) + 1, '\0');
    n = kiln_detokenize(model, tokens.data(), n_tok, s.data(), static_cast<int32_t>(s.size()), false, unparse_special);
    s.resize(static_cast<size_t>(std::max(n, 0)));
    return s;
}

std::string bos_text(const kiln_model* model) {
    const kiln_token bos = kiln_token_bos(model);
    return bos < 0 ? std::string() : token_to_piece(model, bos, true);
}

namespace {

// Token pieces are far shorter than this, so a push almost never overflows. If
// one does, the decoder keeps the text and the flush below hands it out (at the
// cost of also ending an incomplete UTF-8 sequence early, which cannot happen
// for a piece that long in practice).
constexpr int32_t kPieceBuf = 4096;

std::string take(kiln_stream_decoder* dec, int32_t n, const char* buf) {
    if (n < 0) fail_with_last_error("stream decoder failed");
    if (n < kPieceBuf) return std::string(buf, static_cast<size_t>(n));
    std::string s(static_cast<size_t>(n) + 8, '\0');  // + room for an incomplete UTF-8 tail
    const int32_t m = kiln_stream_decoder_flush(dec, s.data(), static_cast<int32_t>(s.size()));
    if (m < 0) fail_with_last_error("stream decoder failed");
    s.resize(static_cast<size_t>(m));
    return s;
}

}  // namespace

std::string stream_push(kiln_stream_decoder* dec, kiln_token token) {
    char buf[kPieceBuf];
    return take(dec, kiln_stream_decoder_push(dec, token, buf, kPieceBuf), buf);
}

std::string stream_flush(kiln_stream_decoder* dec) {
    char buf[kPieceBuf];
    return take(dec, kiln_stream_decoder_flush(dec, buf, kPieceBuf), buf);
}

// ---- Reports ----

namespace {

void print_rate(FILE* out, const char* label, double ms, int32_t n, const char* unit) {
    const double per = n > 0 ? ms / n : 0.0;
    const double tps = ms > 0 ? 1e3 * n / ms : 0.0;
    std::fprintf(out, "kiln: %-15s= %10.2f ms / %5d %-6s (%8.2f ms per token, %8.2f tokens per second)\n", label, ms, n, unit, per,
                 tps);
}

}  // namespace

void print_timings(FILE* out, const kiln_context* ctx, double total_ms, bool generation) {
    const kiln_perf_context_data p = kiln_perf_context(ctx);
    std::fprintf(out, "kiln: %-15s= %10.2f ms\n", "load time", p.t_load_ms);
    print_rate(out, "prompt eval", p.t_p_eval_ms, p.n_p_eval, "tokens");
    if (generation) {
        print_rate(out, "generation", p.t_eval_ms, p.n_eval, "runs");
        print_rate(out, "sampling time", p.t_sample_ms, p.n_sample, "runs");
    }
    std::fprintf(out, "kiln: %-15s= %10.2f ms / %5d tokens\n", "total time", total_ms, p.n_p_eval + p.n_eval);
}

void print_memory(FILE* out, const kiln_context* ctx) {
    std::fprintf(out, "kiln: %-15s= %5d / %u cells used, %.2f MiB; compute buffers %.2f MiB\n", "KV cache", kiln_kv_used_cells(ctx),
                 kiln_n_ctx(ctx), mib(kiln_kv_bytes(ctx)), mib(kiln_compute_bytes(ctx)));
}

}  // namespace kiln_tools
