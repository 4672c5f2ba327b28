// kiln-quantize: writes a GGUF model with its weights in another type or named mix.
//
//   kiln-quantize [options] IN.gguf OUT.gguf TYPE [threads]
//
// TYPE is a mix (Q4_K_M, Q3_K_S, ...) or a plain type (Q8_0, F16, ...); the per-tensor
// rules follow llama.cpp's so the files match llama-quantize's. The output is written to
// OUT.gguf.tmp and renamed when complete; Ctrl-C (SIGINT/SIGTERM) stops at the next tensor
// and removes the temporary file.
#include <cctype>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "../common/cli_common.h"

namespace kt = kiln_tools;

namespace {

// Set by the signal handler, read by the progress callback: the only way a handler may talk.
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_signal(int) { g_interrupted = 1; }

std::vector<std::string> ftype_names() {
    std::vector<std::string> out;
    for (int32_t i = 0; const char* n = kiln_quantize_ftype_name(i); ++i) out.emplace_back(n);
    return out;
}

bool is_ftype(const std::string& s) {
    for (const std::string& n : ftype_names()) {
        if (n.size() != s.size()) continue;
        bool eq = true;
        for (size_t k = 0; k < s.size() && eq; ++k) eq = std::toupper(static_cast<unsigned char>(s[k])) == n[k];
        if (eq) return true;
    }
    return false;
}

int32_t parse_type(const std::string& name, const char* option) {
    if (name.empty()) return -1;
    const int32_t t = kiln_type_from_name(name.c_str());
    if (t < 0 || !kiln_type_has_reference(t)) throw kt::ToolError(std::string(option) + ": kiln cannot write type '" + name + "'");
    return t;
}

int run(int argc, char** argv) {
    std::vector<std::string> positional;
    std::string imatrix, output_type, embd_type;
    bool pure = false, allow_requantize = false, leave_output = false, dry_run = false;

    std::string types;
    for (const std::string& n : ftype_names()) types += (types.empty() ? "" : ", ") + n;
    CLI::App app{"kiln-quantize: quantize a GGUF model\n\nusage: kiln-quantize [options] IN.gguf [OUT.gguf] TYPE [threads]\nTYPE: " + types,
                 "kiln-quantize"};
    app.add_option("args", positional, "IN.gguf [OUT.gguf] TYPE [threads]")->required();
    kt::metavar(app.add_option("--imatrix", imatrix, "importance matrix (GGUF or legacy .dat) to weight the quantization error"), "FILE");
    app.add_flag("--pure", pure, "no per-tensor mix rules: every quantized tensor gets the type's base type");
    kt::metavar(app.add_option("--output-tensor-type", output_type, "type for output.weight"), "T");
    kt::metavar(app.add_option("--token-embedding-type", embd_type, "type for token_embd.weight"), "T");
    app.add_flag("--allow-requantize", allow_requantize, "accept quantized input tensors (they are dequantized first; loses quality)");
    app.add_flag("--leave-output-tensor", leave_output, "leave output.weight as it is");
    app.add_flag("--dry-run", dry_run, "report the per-tensor plan and sizes, write nothing");
    int exit_code = 0;
    if (!kt::parse_command_line(app, kt::translate_aliases(argc, argv, {}), exit_code)) return exit_code;

    // IN [OUT] TYPE [threads]: OUT is optional, as with llama-quantize.
    if (positional.size() < 2 || positional.size() > 4) throw kt::ToolError("expected IN.gguf [OUT.gguf] TYPE [threads] (see --help)");
    std::string in = positional[0], out, type;
    size_t next = 1;
    if (is_ftype(positional[1])) {
        type = positional[1];
        const size_t slash = in.find_last_of('/');
        out = (slash == std::string::npos ? std::string() : in.substr(0, slash + 1)) + "ggml-model-" + type + ".gguf";
        next = 2;
    } else {
        if (positional.size() < 3) throw kt::ToolError("expected IN.gguf [OUT.gguf] TYPE [threads] (see --help)");
        out = positional[1];
        type = positional[2];
        next = 3;
        if (!is_ftype(type)) throw kt::ToolError("unknown TYPE '" + type + "'; one of: " + types);
    }
    int32_t n_threads = 0;
    if (next < positional.size()) {
        try {
            n_threads = std::stoi(positional[next]);
        } catch (const std::exception&) {
            throw kt::ToolError("threads: '" + positional[next] + "' is not a number");
        }
        if (next + 1 < positional.size()) throw kt::ToolError("unexpected argument '" + positional[next + 1] + "'");
    }
    if (in == out) throw kt::ToolError("the input and output files are the same");

    kiln_quantize_params p = kiln_quantize_default_params();
    p.ftype = type.c_str();
    p.n_threads = n_threads;
    p.output_tensor_type = parse_type(output_type, "--output-tensor-type");
    p.token_embedding_type = parse_type(embd_type, "--token-embedding-type");
    p.allow_requantize = allow_requantize;
    p.leave_output_tensor = leave_output;
    p.pure = pure;
    p.dry_run = dry_run;
    p.imatrix_file = imatrix.empty() ? nullptr : imatrix.c_str();
    p.log = [](const char* line, void*) {
        std::printf("%s\n", line);
        std::fflush(stdout);
    };
    p.progress = [](float, void*) { return g_interrupted == 0; };

    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::printf("kiln-quantize: %s %s -> %s as %s%s\n", dry_run ? "planning" : "quantizing", in.c_str(), dry_run ? "(dry run)" : out.c_str(),
                type.c_str(), imatrix.empty() ? "" : (" with imatrix " + imatrix).c_str());
    kiln_quantize_result r{};
    if (kiln_model_quantize(in.c_str(), out.c_str(), &p, &r) != 0) {
        if (g_interrupted) throw kt::ToolError("interrupted; no output was written");
        kt::fail_with_last_error("quantization failed");
    }
    if (!dry_run) std::printf("kiln-quantize: wrote %s\n", out.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "kiln-quantize: %s\n", e.what());
        return 1;
    }
}
