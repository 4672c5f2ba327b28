// kiln-imatrix: computes an importance matrix (per weight matrix, the mean of
// squared activations per input column) by running a model over a text:
//
//   kiln-imatrix -m MODEL -f TEXT -o imatrix.gguf [-c 512] [--chunks K] [--process-output]
//
// The text is cut into chunks of n_ctx tokens, each evaluated from an empty KV
// cache with BOS first (as llama-imatrix and kiln-perplexity do); the inputs of
// every blk.* matrix product are accumulated, and the running perplexity of the
// second half of each chunk is printed as a sanity check. Writes the GGUF
// imatrix format current llama.cpp reads (--output-format dat: the legacy one).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "../common/cli_common.h"

namespace kt = kiln_tools;

namespace {

const std::vector<std::pair<std::string, std::string>> kAliases = {
    {"-ngl", "--n-gpu-layers"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ub", "--ubatch-size"},
    {"-Cr", "--cpu-range"}, {"-tb", "--threads-batch"},
};

struct ImatrixDeleter {
    void operator()(kiln_imatrix* im) const { kiln_imatrix_free(im); }
};

// -log softmax(logits)[target], in double.
double token_nll(const float* logits, int32_t n_vocab, kiln_token target) {
    double mx = logits[0];
    for (int32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
    return mx + std::log(sum) - static_cast<double>(logits[target]);
}

int run(int argc, char** argv) {
    const kt::Stopwatch total;
    kt::ModelArgs model_args;
    kt::ContextArgs ctx_args;
    ctx_args.n_ctx = 512;
    std::string text_file, out_file = "imatrix.gguf", format = "gguf";
    int32_t n_chunks = -1;
    bool process_output = false;
    CLI::App app{"kiln-imatrix: importance matrix of a GGUF model over a text (llama-imatrix's method)", "kiln-imatrix"};
    app.option_defaults()->always_capture_default();
    kt::add_model_options(app, model_args);
    kt::add_context_options(app, ctx_args);
    kt::metavar(app.add_option("-f,--file", text_file, "calibration text")->required(), "FILE");
    kt::metavar(app.add_option("-o,--output-file", out_file, "where to write the imatrix"), "FILE");
    kt::metavar(app.add_option("--chunks", n_chunks, "process at most this many chunks (-1: all)")->check(CLI::Range(-1, INT32_MAX)), "N");
    app.add_flag("--process-output", process_output, "also collect output.weight");
    kt::metavar(app.add_option("--output-format", format, "gguf or dat (the legacy format)")->check(CLI::IsMember({"gguf", "dat"})), "F");
    int exit_code = 0;
    if (!kt::parse_command_line(app, kt::translate_aliases(argc, argv, kAliases), exit_code)) return exit_code;

    const int32_t n_ctx = ctx_args.n_ctx;
    if (n_ctx < 32) throw kt::ToolError("--ctx-size must be at least 32 (it is the chunk length)");
    const std::string text = kt::read_file(text_file);
    kt::ModelPtr model = kt::load_model(model_args, false);
    kt::ContextArgs ca = ctx_args;
    ca.n_batch = n_ctx;
    kt::ContextPtr ctx = kt::new_context(model.get(), kt::context_params(ca));
    std::fprintf(stderr, "kiln-imatrix: model: %s\n", kt::describe_model(model.get()).c_str());
    std::fprintf(stderr, "kiln-imatrix: context: %s\n", kt::describe_context(ctx.get(), ca).c_str());

    const std::vector<kiln_token> tokens = kt::tokenize(model.get(), text, true, false);
    if (static_cast<int64_t>(tokens.size()) < n_ctx)
        throw kt::ToolError("the text tokenizes to " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " +
                            std::to_string(n_ctx));
    const int32_t n_chunk_max = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
    const int32_t n_chunk = n_chunks < 0 ? n_chunk_max : std::min(n_chunks, n_chunk_max);
    const int32_t n_vocab = kiln_model_n_vocab(model.get());
    const bool add_bos = kiln_add_bos(model.get());
    const kiln_token bos = kiln_token_bos(model.get());
    const int32_t first = n_ctx / 2;
    std::fprintf(stderr, "kiln-imatrix: %zu tokens, computing over %d chunks of %d\n", tokens.size(), n_chunk, n_ctx);

    std::unique_ptr<kiln_imatrix, ImatrixDeleter> im(kiln_imatrix_new(ctx.get(), process_output));
    if (!im) kt::fail_with_last_error("cannot start collecting");

    kt::Batch batch(n_ctx, 1);
    double nll = 0;
    int64_t count = 0;
    for (int32_t c = 0; c < n_chunk; ++c) {
        const kt::Stopwatch t_chunk;
        kiln_kv_clear(ctx.get());
        batch.clear();
        const size_t start = static_cast<size_t>(c) * static_cast<size_t>(n_ctx);
        for (int32_t k = 0; k < n_ctx; ++k) {
            kiln_token t = tokens[start + static_cast<size_t>(k)];
            if (k == 0 && add_bos && bos >= 0) t = bos;
            batch.add(t, k, 0, k >= first && k < n_ctx - 1);
        }
        if (kiln_decode(ctx.get(), batch.get()) != 0) kt::fail_with_last_error("decode failed");
        for (int32_t k = first; k < n_ctx - 1; ++k) {
            const float* logits = kiln_get_logits_ith(ctx.get(), k);
            if (!logits) kt::fail_with_last_error("no logits");
            nll += token_nll(logits, n_vocab, tokens[start + static_cast<size_t>(k) + 1]);
            ++count;
        }
        if (c == 0) {
            const double s = t_chunk.ms() / 1e3;
            std::fprintf(stderr, "kiln-imatrix: %.2f seconds per chunk - ETA %.2f minutes\n", s, s * n_chunk / 60.0);
        }
        std::printf("[%d]%.4f,", c + 1, std::exp(nll / static_cast<double>(count)));
        std::fflush(stdout);
    }
    std::printf("\nFinal estimate: PPL = %.4f\n", std::exp(nll / static_cast<double>(std::max<int64_t>(1, count))));
    if (kiln_imatrix_save(im.get(), out_file.c_str(), text_file.c_str(), n_chunk, n_ctx, format == "dat") != 0)
        kt::fail_with_last_error("cannot write " + out_file);
    std::fprintf(stderr, "kiln-imatrix: stored %d entries from %d chunks in %s\n", kiln_imatrix_n_entries(im.get()), n_chunk,
                 out_file.c_str());
    kt::print_timings(stderr, ctx.get(), total.ms(), false);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "kiln-imatrix: %s\n", e.what());
        return 1;
    }
}
