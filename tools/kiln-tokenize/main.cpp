// kiln-tokenize: tokenize text with a GGUF model's tokenizer.
//
//   kiln-tokenize -m FILE (-p TEXT | -f FILE) [--ids] [--no-bos] [--parse-special]
//   kiln-tokenize -m FILE -f FILE --bench [--bench-size MB] [--bench-runs N]
//
// Default output: one "id -> 'piece'" line per token. --ids: one line of
// space-separated ids. --bench: tokenizes the text (repeated up to
// --bench-size MB if given) --bench-runs times and reports throughput.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../common/utf8_args.h"
#include "model/gguf.h"
#include "model/tokenizer/tokenizer.h"

namespace {

constexpr const char* kUsage =
    "usage: kiln-tokenize -m FILE (-p TEXT | -f FILE) [options]\n"
    "\n"
    "  -m, --model FILE      GGUF file whose tokenizer to use\n"
    "  -p, --prompt TEXT     text to tokenize\n"
    "  -f, --file FILE       read the text from FILE\n"
    "      --ids             print only the ids, space-separated, on one line\n"
    "      --no-bos          do not add BOS/EOS (the model's add_bos/add_eos otherwise apply)\n"
    "      --parse-special   turn special-token texts (e.g. <|endoftext|>) into their ids\n"
    "      --bench           measure tokenization speed instead of printing tokens\n"
    "      --bench-size MB   repeat the text up to MB megabytes (10^6 bytes) for --bench\n"
    "      --bench-runs N    timed runs for --bench (default 3; the best is reported)\n"
    "  -h, --help            show this text\n";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Args {
    std::string model;
    std::optional<std::string> prompt;
    std::optional<std::string> file;
    bool ids = false;
    bool no_bos = false;
    bool parse_special = false;
    bool bench = false;
    double bench_mb = 0;
    int bench_runs = 3;
};

Args parse_args(int argc, char** argv) {
    Args a;
    const std::vector<std::string> args = kiln_tools::utf8_args(argc, argv);  // UTF-8 on Windows too
    const size_t n_args = args.size();
    for (size_t i = 1; i < n_args; ++i) {
        const std::string_view arg = args[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= n_args) throw UsageError("option " + std::string(arg) + " needs a value");
            return args[++i];
        };
        if (arg == "-m" || arg == "--model") a.model = value();
        else if (arg == "-p" || arg == "--prompt") a.prompt = value();
        else if (arg == "-f" || arg == "--file") a.file = value();
        else if (arg == "--ids") a.ids = true;
        else if (arg == "--no-bos") a.no_bos = true;
        else if (arg == "--parse-special") a.parse_special = true;
        else if (arg == "--bench") a.bench = true;
        else if (arg == "--bench-size") {
            const std::string v = value();
            char* end = nullptr;
            a.bench_mb = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end || a.bench_mb <= 0) throw UsageError("--bench-size needs a positive number, got '" + v + "'");
        } else if (arg == "--bench-runs") {
            const std::string v = value();
            char* end = nullptr;
            const long n = std::strtol(v.c_str(), &end, 10);
            if (end == v.c_str() || *end || n < 1 || n > 1000) throw UsageError("--bench-runs needs a count from 1 to 1000, got '" + v + "'");
            a.bench_runs = static_cast<int>(n);
        } else if (arg == "-h" || arg == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        } else {
            throw UsageError("unknown option '" + std::string(arg) + "'");
        }
    }
    if (a.model.empty()) throw UsageError("no model given (-m FILE)");
    if (a.prompt.has_value() == a.file.has_value()) throw UsageError("give exactly one of -p TEXT or -f FILE");
    return a;
}

std::string read_text(const std::string& path) {
    std::ifstream f(kiln_tools::utf8_path(path), std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Control characters and quotes escaped, so every piece stays on its line.
std::string printable(std::string_view s) {
    std::string out;
    for (char c : s) {
        const unsigned char u = static_cast<unsigned char>(c);
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c == '\\') out += "\\\\";
        else if (c == '\'') out += "\\'";
        else if (u < 0x20 || u == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    return out;
}

void run_bench(const kiln::Tokenizer& tok, std::string text, const Args& a, const kiln::TokenizeOptions& opts) {
    if (text.empty()) throw std::runtime_error("--bench: the text is empty");
    if (a.bench_mb > 0) {
        const size_t target = static_cast<size_t>(a.bench_mb * 1e6);
        const std::string unit = text;
        while (text.size() + unit.size() <= target) text += unit;
        if (text.size() < target) text.append(unit, 0, target - text.size());
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    double best = 1e30, total = 0, best_cpu = 1e30;
    size_t n_tokens = 0;
    for (int r = 0; r < a.bench_runs; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::clock_t c0 = std::clock();
        const std::vector<int32_t> ids = tok.tokenize(text, opts);
        const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        n_tokens = ids.size();
        best = std::min(best, s);
        best_cpu = std::min(best_cpu, cpu);
        total += s;
    }
    std::printf("model: %s (%s, pre '%s', %d tokens)\n", a.model.c_str(), tok.model_name().c_str(), tok.pre_name().c_str(),
                tok.n_vocab());
    std::printf("text: %.3f MB, %zu tokens (%.2f bytes/token)\n", mb, n_tokens,
                n_tokens ? static_cast<double>(text.size()) / static_cast<double>(n_tokens) : 0.0);
    std::printf("runs: %d, best %.3f s, mean %.3f s\n", a.bench_runs, best, total / a.bench_runs);
    std::printf("speed: %.2f MB/s (best), %.2f MB/s (mean), %.0f tokens/s (best); CPU time: best %.3f s = %.2f MB/s\n",
                mb / best, mb * a.bench_runs / total, static_cast<double>(n_tokens) / best, best_cpu, mb / best_cpu);
}

int run(int argc, char** argv) {
    const Args a = parse_args(argc, argv);
    const std::string text = a.prompt ? *a.prompt : read_text(*a.file);
    const auto file = kiln::gguf::File::open(a.model);
    const kiln::Tokenizer tok = kiln::Tokenizer::from_gguf(file);
    const kiln::TokenizeOptions opts{.add_special = !a.no_bos, .parse_special = a.parse_special};
    if (a.bench) {
        run_bench(tok, text, a, opts);
        return 0;
    }
    const std::vector<int32_t> ids = tok.tokenize(text, opts);
    std::string out;
    if (a.ids) {
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) out += ' ';
            out += std::to_string(ids[i]);
        }
        out += '\n';
    } else {
        for (int32_t id : ids) {
            out += std::to_string(id) + " -> '" + printable(tok.token_to_piece(id, true)) + "'\n";
        }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "kiln-tokenize: %s\n%s", e.what(), kUsage);
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln-tokenize: %s\n", e.what());
        return 1;
    }
}
