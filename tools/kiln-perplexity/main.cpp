// kiln-perplexity: perplexity of a model on a text, by llama.cpp's method so the
// numbers compare with llama-perplexity's:
//
//   kiln-perplexity -m MODEL -f TEXT -c 512 [--chunks K] [-b 2048]
//
// The text is tokenized whole (BOS as the model wants) and cut into consecutive
// chunks of n_ctx tokens. Each chunk is evaluated from an empty KV cache with its
// first token replaced by BOS (if the model adds one); only the second half is
// scored: the logits at positions j = n_ctx/2 .. n_ctx-2 predict token j+1, so
// every scored token has at least n_ctx/2 tokens of context. When n_batch holds
// several chunks (n_batch / n_ctx of them), they go through one decode call as
// separate sequences, as llama.cpp does.
//
// KL-divergence against a base model, as llama-perplexity does it:
//   kiln-perplexity -m BASE -f TEXT --kl-divergence-base base.kld     saves the tokens and the
//       base model's log-probabilities of every scored position;
//   kiln-perplexity -m OTHER --kl-divergence-base base.kld --kl-divergence   evaluates OTHER on
//       the same tokens and reports mean KL(base || other) with its error, percentiles, top-1
//       agreement and the PPL ratio.
// The file (kiln's own format) holds "KILNKLD1", u32 n_ctx, n_vocab, n_chunk, the i32 tokens,
// then per scored position: f32 min, f32 step, u16 q[n_vocab] with log p = min + q * step
// (about 4e-4 resolution in log p; llama.cpp stores the same kind of 16-bit records).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/cli_common.h"

namespace kt = kiln_tools;

namespace {

struct Args {
    kt::ModelArgs model;
    kt::ContextArgs ctx;
    std::string text_file;
    int32_t n_chunks = -1;
    std::string kld_base;   // --kl-divergence-base
    bool kld = false;       // --kl-divergence
};

const std::vector<std::pair<std::string, std::string>> kAliases = {
    {"-ngl", "--n-gpu-layers"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ub", "--ubatch-size"},
    {"-Cr", "--cpu-range"}, {"-tb", "--threads-batch"},
};

// Sums of the negative log-likelihood and its square over the scored tokens.
struct NllSums {
    double nll = 0;
    double nll2 = 0;
    int64_t count = 0;

    void add(const NllSums& o) {
        nll += o.nll;
        nll2 += o.nll2;
        count += o.count;
    }
};

// -log softmax(logits)[target], in double so large vocabularies lose nothing to rounding.
double token_nll(const float* logits, int32_t n_vocab, kiln_token target) {
    double max_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
    return max_logit + std::log(sum) - static_cast<double>(logits[target]);
}

// One row to score: the logits of batch index `batch_idx` predict `target`.
struct Row {
    int32_t batch_idx;
    kiln_token target;
};

// Scores rows of the last decode on n_workers threads (the softmax over a large
// vocabulary costs as much as a small model's forward pass). The logits stay
// valid until the next decode, so nothing is copied.
NllSums score_rows(kiln_context* ctx, int32_t n_vocab, const std::vector<Row>& rows, unsigned n_workers) {
    std::vector<const float*> logits(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
        logits[r] = kiln_get_logits_ith(ctx, rows[r].batch_idx);
        if (!logits[r]) kt::fail_with_last_error("no logits for batch index " + std::to_string(rows[r].batch_idx));
    }
    n_workers = std::max(1u, std::min<unsigned>(n_workers, static_cast<unsigned>(rows.size())));
    std::vector<NllSums> partial(n_workers);
    auto work = [&](unsigned w) {
        // Rows are dealt round-robin: equal cost per row, so no balancing is needed.
        for (size_t r = w; r < rows.size(); r += n_workers) {
            const double v = token_nll(logits[r], n_vocab, rows[r].target);
            partial[w].nll += v;
            partial[w].nll2 += v * v;
            partial[w].count += 1;
        }
    };
    std::vector<std::thread> threads;
    for (unsigned w = 1; w < n_workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (auto& t : threads) t.join();
    NllSums total;
    for (const auto& p : partial) total.add(p);
    return total;
}

// Runs fn(i) for i in [0, n) on n_workers threads (rows of equal cost, dealt round-robin).
template <typename F>
void parallel_for(size_t n, unsigned n_workers, F&& fn) {
    n_workers = std::max(1u, std::min<unsigned>(n_workers, static_cast<unsigned>(std::max<size_t>(1, n))));
    auto work = [&](unsigned w) {
        for (size_t i = w; i < n; i += n_workers) fn(i);
    };
    std::vector<std::thread> threads;
    for (unsigned w = 1; w < n_workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (auto& t : threads) t.join();
}

// ---- KL-divergence: base log-probabilities on disk, comparison, report ----

constexpr char kKldMagic[8] = {'K', 'I', 'L', 'N', 'K', 'L', 'D', '1'};

size_t kld_record_bytes(int32_t n_vocab) { return 2 * sizeof(float) + 2 * static_cast<size_t>(n_vocab); }

// log softmax of a row of logits, in double.
void log_softmax(const float* logits, int32_t n_vocab, std::vector<double>& out) {
    out.resize(static_cast<size_t>(n_vocab));
    double mx = logits[0];
    for (int32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
    const double lse = mx + std::log(sum);
    for (int32_t i = 0; i < n_vocab; ++i) out[static_cast<size_t>(i)] = static_cast<double>(logits[i]) - lse;
}

void encode_record(const float* logits, int32_t n_vocab, uint8_t* rec) {
    std::vector<double> lp;
    log_softmax(logits, n_vocab, lp);
    const auto [mn_it, mx_it] = std::minmax_element(lp.begin(), lp.end());
    const double mn = *mn_it, mx = *mx_it;
    const float step = mx > mn ? static_cast<float>((mx - mn) / 65535.0) : 1.0f;
    const float fmin = static_cast<float>(mn);
    std::memcpy(rec, &fmin, sizeof fmin);
    std::memcpy(rec + sizeof(float), &step, sizeof step);
    for (int32_t i = 0; i < n_vocab; ++i) {
        const double q = std::clamp(std::round((lp[static_cast<size_t>(i)] - fmin) / step), 0.0, 65535.0);
        const auto v = static_cast<uint16_t>(q);
        std::memcpy(rec + 2 * sizeof(float) + 2 * static_cast<size_t>(i), &v, sizeof v);
    }
}

// Decodes a record into log-probabilities, renormalised so they sum to one exactly.
void decode_record(const uint8_t* rec, int32_t n_vocab, std::vector<double>& lp) {
    float fmin, step;
    std::memcpy(&fmin, rec, sizeof fmin);
    std::memcpy(&step, rec + sizeof(float), sizeof step);
    lp.resize(static_cast<size_t>(n_vocab));
    double mx = -1e300;
    for (int32_t i = 0; i < n_vocab; ++i) {
        uint16_t v;
        std::memcpy(&v, rec + 2 * sizeof(float) + 2 * static_cast<size_t>(i), sizeof v);
        lp[static_cast<size_t>(i)] = static_cast<double>(fmin) + static_cast<double>(v) * static_cast<double>(step);
        mx = std::max(mx, lp[static_cast<size_t>(i)]);
    }
    double sum = 0;
    for (double x : lp) sum += std::exp(x - mx);
    const double lse = mx + std::log(sum);
    for (double& x : lp) x -= lse;
}

struct KldRow {
    double kld = 0;      // KL(base || this model)
    double nll_q = 0;    // -log p_this(target)
    double nll_b = 0;    // -log p_base(target)
    bool same_top = false;
};

KldRow compare_row(const uint8_t* rec, const float* logits, int32_t n_vocab, kiln_token target) {
    std::vector<double> lb, lq;
    decode_record(rec, n_vocab, lb);
    log_softmax(logits, n_vocab, lq);
    KldRow r;
    size_t top_b = 0, top_q = 0;
    for (size_t i = 0; i < lb.size(); ++i) {
        r.kld += std::exp(lb[i]) * (lb[i] - lq[i]);
        if (lb[i] > lb[top_b]) top_b = i;
        if (lq[i] > lq[top_q]) top_q = i;
    }
    r.kld = std::max(0.0, r.kld);  // rounding can leave -1e-17
    r.nll_q = -lq[static_cast<size_t>(target)];
    r.nll_b = -lb[static_cast<size_t>(target)];
    r.same_top = top_b == top_q;
    return r;
}

class KldFile {
public:
    // Reading: header and tokens.
    static KldFile open(const std::string& path) {
        KldFile f;
        f.path_ = path;
        f.in_.open(std::filesystem::path(path), std::ios::binary);
        if (!f.in_) throw kt::ToolError(path + ": cannot open the KL-divergence base file");
        char magic[8];
        uint32_t h[3];
        f.in_.read(magic, sizeof magic);
        f.in_.read(reinterpret_cast<char*>(h), sizeof h);
        if (!f.in_ || std::memcmp(magic, kKldMagic, sizeof magic) != 0)
            throw kt::ToolError(path + ": not a kiln KL-divergence base file (written by --kl-divergence-base without --kl-divergence)");
        f.n_ctx = static_cast<int32_t>(h[0]);
        f.n_vocab = static_cast<int32_t>(h[1]);
        f.n_chunk = static_cast<int32_t>(h[2]);
        if (f.n_ctx < 4 || f.n_vocab < 1 || f.n_chunk < 1) throw kt::ToolError(path + ": bad header");
        f.tokens.resize(static_cast<size_t>(f.n_ctx) * static_cast<size_t>(f.n_chunk));
        f.in_.read(reinterpret_cast<char*>(f.tokens.data()), static_cast<std::streamsize>(f.tokens.size() * sizeof(kiln_token)));
        if (!f.in_) throw kt::ToolError(path + ": truncated token list");
        f.data_start_ = static_cast<uint64_t>(f.in_.tellg());
        return f;
    }
    int32_t rows_per_chunk() const { return n_ctx - 1 - n_ctx / 2; }
    // The records of one chunk.
    std::vector<uint8_t> read_chunk(int32_t chunk) {
        const size_t rec = kld_record_bytes(n_vocab);
        std::vector<uint8_t> buf(rec * static_cast<size_t>(rows_per_chunk()));
        in_.seekg(static_cast<std::streamoff>(data_start_ + static_cast<uint64_t>(chunk) * buf.size()));
        in_.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
        if (!in_) throw kt::ToolError(path_ + ": truncated at chunk " + std::to_string(chunk + 1));
        return buf;
    }

    int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
    std::vector<kiln_token> tokens;

private:
    std::string path_;
    std::ifstream in_;
    uint64_t data_start_ = 0;
};

// Writes the base file to path + ".tmp" and renames it when complete.
class KldWriter {
public:
    KldWriter(const std::string& path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const std::vector<kiln_token>& tokens)
        : path_(path), tmp_(path + ".tmp") {
        out_.open(std::filesystem::path(tmp_), std::ios::binary | std::ios::trunc);
        if (!out_) throw kt::ToolError(tmp_ + ": cannot create");
        const uint32_t h[3] = {static_cast<uint32_t>(n_ctx), static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(n_chunk)};
        out_.write(kKldMagic, sizeof kKldMagic);
        out_.write(reinterpret_cast<const char*>(h), sizeof h);
        out_.write(reinterpret_cast<const char*>(tokens.data()),
                   static_cast<std::streamsize>(static_cast<size_t>(n_ctx) * static_cast<size_t>(n_chunk) * sizeof(kiln_token)));
    }
    ~KldWriter() {
        if (!done_) {
            out_.close();
            std::error_code ec;
            std::filesystem::remove(tmp_, ec);
        }
    }
    void write(const std::vector<uint8_t>& bytes) {
        out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        if (!out_) throw kt::ToolError(tmp_ + ": write failed");
    }
    void finish() {
        out_.close();
        if (out_.fail()) throw kt::ToolError(tmp_ + ": write failed");
        std::error_code ec;
        std::filesystem::rename(tmp_, path_, ec);
        if (ec) throw kt::ToolError(path_ + ": cannot rename the temporary file into place: " + ec.message());
        done_ = true;
    }

private:
    std::string path_, tmp_;
    std::ofstream out_;
    bool done_ = false;
};

// Mean and standard error of the mean.
std::pair<double, double> mean_err(const std::vector<double>& v) {
    const double n = static_cast<double>(v.size());
    double s = 0, s2 = 0;
    for (double x : v) {
        s += x;
        s2 += x * x;
    }
    const double m = s / n;
    const double var = std::max(0.0, s2 / n - m * m);
    return {m, v.size() > 1 ? std::sqrt(var / (n - 1)) : 0.0};
}

void report_kld(const std::vector<KldRow>& rows) {
    if (rows.empty()) return;
    const double n = static_cast<double>(rows.size());
    std::vector<double> nq, nb, diff, kld, dp;
    double same = 0;
    for (const KldRow& r : rows) {
        nq.push_back(r.nll_q);
        nb.push_back(r.nll_b);
        diff.push_back(r.nll_q - r.nll_b);
        kld.push_back(r.kld);
        dp.push_back(std::exp(-r.nll_q) - std::exp(-r.nll_b));
        same += r.same_top ? 1 : 0;
    }
    const auto [mq, eq] = mean_err(nq);
    const auto [mb, eb] = mean_err(nb);
    const auto [md, ed] = mean_err(diff);
    double cov = 0, vq = 0, vb = 0;
    for (size_t i = 0; i < nq.size(); ++i) {
        cov += (nq[i] - mq) * (nb[i] - mb);
        vq += (nq[i] - mq) * (nq[i] - mq);
        vb += (nb[i] - mb) * (nb[i] - mb);
    }
    const double cor = vq > 0 && vb > 0 ? cov / std::sqrt(vq * vb) : 1.0;
    const double ppl_q = std::exp(mq), ppl_b = std::exp(mb);
    std::printf("\n====== Perplexity statistics ======\n");
    std::printf("Mean PPL(Q)                   : %10.6f +/- %10.6f\n", ppl_q, ppl_q * eq);
    std::printf("Mean PPL(base)                : %10.6f +/- %10.6f\n", ppl_b, ppl_b * eb);
    std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * cor);
    std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f +/- %10.6f\n", md, ed);
    std::printf("Mean PPL(Q)/PPL(base)         : %10.6f +/- %10.6f\n", std::exp(md), std::exp(md) * ed);
    std::printf("Mean PPL(Q)-PPL(base)         : %10.6f\n", ppl_q - ppl_b);

    const auto [mk, ek] = mean_err(kld);
    std::vector<double> sorted = kld;
    std::sort(sorted.begin(), sorted.end());
    auto pct = [&](double q) { return sorted[static_cast<size_t>(std::min(n - 1, std::floor(q * (n - 1) + 0.5)))]; };
    std::printf("\n====== KL divergence statistics ======\n");
    std::printf("Mean    KLD: %10.6f +/- %10.6f\n", mk, ek);
    std::printf("Maximum KLD: %10.6f\n", sorted.back());
    std::printf("99.9%%   KLD: %10.6f\n", pct(0.999));
    std::printf("99.0%%   KLD: %10.6f\n", pct(0.99));
    std::printf("Median  KLD: %10.6f\n", pct(0.5));
    std::printf("10.0%%   KLD: %10.6f\n", pct(0.10));
    std::printf("Minimum KLD: %10.6f\n", sorted.front());

    const auto [mp, ep] = mean_err(dp);
    double rms = 0;
    for (double x : dp) rms += x * x;
    rms = std::sqrt(rms / n);
    const double top = same / n;
    std::printf("\n====== Token probability statistics ======\n");
    std::printf("Mean    dp: %8.4f +/- %8.4f %%\n", 100.0 * mp, 100.0 * ep);
    std::printf("RMS     dp: %8.4f %%\n", 100.0 * rms);
    std::printf("Same top p: %8.4f +/- %8.4f %%\n", 100.0 * top, 100.0 * std::sqrt(top * (1.0 - top) / n));
    std::fflush(stdout);
}

std::string format_eta(double seconds) {
    int total = static_cast<int>(seconds);
    char buf[64];
    if (total >= 3600) {
        std::snprintf(buf, sizeof buf, "%d hours %.2f minutes", total / 3600, (total % 3600) / 60.0);
    } else {
        std::snprintf(buf, sizeof buf, "%.2f minutes", total / 60.0);
    }
    return buf;
}

int run(int argc, char** argv) {
    const kt::Stopwatch total;
    Args a;
    a.ctx.n_ctx = 512;
    CLI::App app{"kiln-perplexity: perplexity of a GGUF model on a text file (llama.cpp's method)", "kiln-perplexity"};
    app.option_defaults()->always_capture_default();
    kt::add_model_options(app, a.model);
    kt::add_context_options(app, a.ctx);
    kt::metavar(app.add_option("-f,--file", a.text_file, "text to evaluate (not needed with --kl-divergence)"), "FILE");
    kt::metavar(app.add_option("--kl-divergence-base", a.kld_base,
                               "file of the base model's log-probabilities: written, or read with --kl-divergence"),
                "FILE");
    app.add_flag("--kl-divergence", a.kld, "compare with the base file's model: KL-divergence, top-1 agreement, PPL ratio");
    kt::metavar(app.add_option("--chunks", a.n_chunks, "evaluate at most this many chunks (-1: all)")->check(CLI::Range(-1, INT32_MAX)), "N");
    int exit_code = 0;
    if (!kt::parse_command_line(app, kt::translate_aliases(argc, argv, kAliases), exit_code)) return exit_code;

    const int32_t n_ctx = a.ctx.n_ctx;
    if (n_ctx < 4) throw kt::ToolError("--ctx-size must be at least 4 (it is the chunk length)");
    // Chunks that fit in one batch run side by side as separate sequences; the context holds all of them.
    const int32_t n_seq = std::clamp(a.ctx.n_batch / n_ctx, 1, 64);
    const int32_t n_batch = std::min(a.ctx.n_batch, n_ctx * n_seq);
    if (a.kld && a.kld_base.empty()) throw kt::ToolError("--kl-divergence needs --kl-divergence-base FILE");
    if (!a.kld && a.text_file.empty()) throw kt::ToolError("--file is required");
    std::optional<KldFile> kld_in;
    if (a.kld) {
        kld_in = KldFile::open(a.kld_base);
        if (kld_in->n_ctx != n_ctx)
            throw kt::ToolError(a.kld_base + " was written with a context of " + std::to_string(kld_in->n_ctx) + "; use -c " +
                                std::to_string(kld_in->n_ctx));
    }
    if ((a.kld || !a.kld_base.empty()) && n_batch < n_ctx) throw kt::ToolError("KL-divergence needs --batch-size >= --ctx-size");
    const std::string text = a.kld ? std::string() : kt::read_file(a.text_file);

    kt::ModelPtr model = kt::load_model(a.model, false);
    kt::ContextArgs ca = a.ctx;
    ca.n_ctx = n_ctx * n_seq;
    ca.n_batch = n_batch;
    kiln_context_params cp = kt::context_params(ca);
    cp.n_seq_max = static_cast<uint32_t>(n_seq);
    kt::ContextPtr ctx = kt::new_context(model.get(), cp);
    std::fprintf(stderr, "kiln-perplexity: model: %s\n", kt::describe_model(model.get()).c_str());
    std::fprintf(stderr, "kiln-perplexity: context: %s\n", kt::describe_context(ctx.get(), ca).c_str());

    const kt::Stopwatch t_tok;
    std::vector<kiln_token> tokens = kld_in ? kld_in->tokens : kt::tokenize(model.get(), text, true, false);
    if (kld_in) {
        std::fprintf(stderr, "kiln-perplexity: %zu tokens (%d chunks) from %s\n", tokens.size(), kld_in->n_chunk, a.kld_base.c_str());
    } else {
        std::fprintf(stderr, "kiln-perplexity: tokenized %zu bytes into %zu tokens in %.2f ms\n", text.size(), tokens.size(), t_tok.ms());
    }
    if (static_cast<int64_t>(tokens.size()) < 2 * static_cast<int64_t>(n_ctx)) {
        throw kt::ToolError("you need at least " + std::to_string(2 * n_ctx) + " tokens to evaluate perplexity with a context of " +
                            std::to_string(n_ctx) + "; the text tokenizes to only " + std::to_string(tokens.size()));
    }

    const int32_t n_chunk_max = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
    const int32_t n_chunk = a.n_chunks < 0 ? n_chunk_max : std::min(a.n_chunks, n_chunk_max);
    const int32_t n_vocab = kiln_model_n_vocab(model.get());
    if (kld_in && kld_in->n_vocab != n_vocab)
        throw kt::ToolError(a.kld_base + " holds " + std::to_string(kld_in->n_vocab) + " tokens per row, the model has " +
                            std::to_string(n_vocab));
    std::optional<KldWriter> kld_out;
    if (!a.kld && !a.kld_base.empty()) kld_out.emplace(a.kld_base, n_ctx, n_vocab, n_chunk, tokens);
    std::vector<KldRow> kld_rows;
    const bool add_bos = kiln_add_bos(model.get());
    const kiln_token bos = kiln_token_bos(model.get());
    const int32_t first = n_ctx / 2;
    const int32_t num_batches = (n_ctx + n_batch - 1) / n_batch;
    const unsigned n_workers = a.ctx.n_threads > 0 ? static_cast<unsigned>(a.ctx.n_threads)
                                                   : std::max(1u, std::thread::hardware_concurrency());
    std::fprintf(stderr, "kiln-perplexity: calculating perplexity over %d chunks, n_ctx = %d, batch_size = %d, n_seq = %d\n", n_chunk,
                 n_ctx, n_batch, n_seq);

    kt::Batch batch(n_batch, 1);
    NllSums sums;
    double t_eval_s = 0;
    for (int32_t i = 0; i < n_chunk; i += n_seq) {
        const kt::Stopwatch t_pass;
        const int32_t n_seq_batch = std::min(n_seq, n_chunk - i);
        kiln_kv_clear(ctx.get());
        std::vector<NllSums> chunk_sums(static_cast<size_t>(n_seq_batch));
        for (int32_t j = 0; j < num_batches; ++j) {
            const int32_t batch_start = j * n_batch;  // position of the batch's first token within each chunk
            const int32_t batch_size = std::min(n_ctx - batch_start, n_batch);
            batch.clear();
            std::vector<std::vector<Row>> rows(static_cast<size_t>(n_seq_batch));
            for (int32_t seq = 0; seq < n_seq_batch; ++seq) {
                const size_t chunk_start = static_cast<size_t>(i + seq) * static_cast<size_t>(n_ctx);
                for (int32_t k = 0; k < batch_size; ++k) {
                    const int32_t pos = batch_start + k;
                    kiln_token t = tokens[chunk_start + static_cast<size_t>(pos)];
                    if (pos == 0 && add_bos && bos >= 0) t = bos;  // every chunk starts like a document
                    // Only positions that predict a scored token need logits (the last one predicts nothing).
                    const bool scored = pos >= first && pos < n_ctx - 1;
                    if (scored) rows[static_cast<size_t>(seq)].push_back({batch.size(), tokens[chunk_start + static_cast<size_t>(pos) + 1]});
                    batch.add(t, pos, seq, scored);
                }
            }
            const int32_t rc = kiln_decode(ctx.get(), batch.get());
            if (rc != 0) kt::fail_with_last_error("decode failed");
            for (int32_t seq = 0; seq < n_seq_batch; ++seq) {
                const auto& r = rows[static_cast<size_t>(seq)];
                if (!r.empty()) chunk_sums[static_cast<size_t>(seq)].add(score_rows(ctx.get(), n_vocab, r, n_workers));
                if (!kld_out && !kld_in) continue;
                // Rows are the chunk's scored positions in order (one batch per chunk here).
                std::vector<const float*> lg(r.size());
                for (size_t k = 0; k < r.size(); ++k) lg[k] = kiln_get_logits_ith(ctx.get(), r[k].batch_idx);
                const size_t rec = kld_record_bytes(n_vocab);
                if (kld_out) {
                    std::vector<uint8_t> buf(rec * r.size());
                    parallel_for(r.size(), n_workers, [&](size_t k) { encode_record(lg[k], n_vocab, buf.data() + k * rec); });
                    kld_out->write(buf);
                } else {
                    const std::vector<uint8_t> buf = kld_in->read_chunk(i + seq);
                    std::vector<KldRow> out(r.size());
                    parallel_for(r.size(), n_workers, [&](size_t k) { out[k] = compare_row(buf.data() + k * rec, lg[k], n_vocab, r[k].target); });
                    kld_rows.insert(kld_rows.end(), out.begin(), out.end());
                }
            }
        }
        const double pass_s = t_pass.ms() / 1e3;
        t_eval_s += pass_s;
        if (i == 0) {
            std::fprintf(stderr, "kiln-perplexity: %.2f seconds per pass - ETA %s\n", pass_s,
                         format_eta(pass_s * std::ceil(static_cast<double>(n_chunk) / n_seq)).c_str());
        }
        // The running value after each chunk, in text order, as llama.cpp prints it.
        for (int32_t seq = 0; seq < n_seq_batch; ++seq) {
            sums.add(chunk_sums[static_cast<size_t>(seq)]);
            std::printf("[%d]%.4f,", i + seq + 1, std::exp(sums.nll / static_cast<double>(sums.count)));
        }
        std::fflush(stdout);
    }
    std::printf("\n");

    const double n = static_cast<double>(sums.count);
    const double mean = sums.nll / n;
    const double ppl = std::exp(mean);
    const double var = sums.nll2 / n - mean * mean;
    if (var > 0 && sums.count > 1) {
        // llama.cpp's error: the standard error of the mean NLL, carried to PPL (d exp(x) = exp(x) dx).
        const double err = std::sqrt(var / (n - 1)) * ppl;
        std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    } else {
        std::printf("Final estimate: PPL = %.4f +/- nan (no variance across %lld scored tokens)\n", ppl, static_cast<long long>(sums.count));
    }
    std::fflush(stdout);
    if (kld_out) {
        kld_out->finish();
        std::fprintf(stderr, "kiln-perplexity: wrote the base log-probabilities to %s\n", a.kld_base.c_str());
    }
    report_kld(kld_rows);

    const double tokens_evaluated = static_cast<double>(n_chunk) * n_ctx;
    std::fprintf(stderr, "\nkiln-perplexity: %d chunks of %d tokens, %lld tokens scored, %.2f s evaluating (%.2f tokens per second)\n",
                 n_chunk, n_ctx, static_cast<long long>(sums.count), t_eval_s, t_eval_s > 0 ? tokens_evaluated / t_eval_s : 0.0);
    kt::print_timings(stderr, ctx.get(), total.ms(), false);
    kt::print_memory(stderr, ctx.get());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "kiln-perplexity: %s\n", e.what());
        return 1;
    }
}
