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
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
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
};

const std::vector<std::pair<std::string, std::string>> kAliases = {
    {"-ngl", "--n-gpu-layers"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ub", "--ubatch-size"},
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
    kt::metavar(app.add_option("-f,--file", a.text_file, "text to evaluate")->required(), "FILE");
    kt::metavar(app.add_option("--chunks", a.n_chunks, "evaluate at most this many chunks (-1: all)")->check(CLI::Range(-1, INT32_MAX)), "N");
    int exit_code = 0;
    if (!kt::parse_command_line(app, kt::translate_aliases(argc, argv, kAliases), exit_code)) return exit_code;

    const int32_t n_ctx = a.ctx.n_ctx;
    if (n_ctx < 4) throw kt::ToolError("--ctx-size must be at least 4 (it is the chunk length)");
    // Chunks that fit in one batch run side by side as separate sequences; the context holds all of them.
    const int32_t n_seq = std::clamp(a.ctx.n_batch / n_ctx, 1, 64);
    const int32_t n_batch = std::min(a.ctx.n_batch, n_ctx * n_seq);
    const std::string text = kt::read_file(a.text_file);

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
    std::vector<kiln_token> tokens = kt::tokenize(model.get(), text, true, false);
    std::fprintf(stderr, "kiln-perplexity: tokenized %zu bytes into %zu tokens in %.2f ms\n", text.size(), tokens.size(), t_tok.ms());
    if (static_cast<int64_t>(tokens.size()) < 2 * static_cast<int64_t>(n_ctx)) {
        throw kt::ToolError("you need at least " + std::to_string(2 * n_ctx) + " tokens to evaluate perplexity with a context of " +
                            std::to_string(n_ctx) + "; the text tokenizes to only " + std::to_string(tokens.size()));
    }

    const int32_t n_chunk_max = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
    const int32_t n_chunk = a.n_chunks < 0 ? n_chunk_max : std::min(a.n_chunks, n_chunk_max);
    const int32_t n_vocab = kiln_model_n_vocab(model.get());
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
