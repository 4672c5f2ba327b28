// kiln-synth: writes a GGUF model with seeded random weights for a given
// architecture and shape, with the tokenizer copied from a vocab GGUF.
// Benchmarks and tests use these models where a real one would be too big or
// where the shape must be controlled (the `1b` preset is the benchmark model).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../common/utf8_args.h"
#include "core/quant.h"
#include "core/types.h"
#include "model/gguf.h"

namespace {

// Hyper-parameters of the synthetic model; 0 means "derive".
struct Shape {
    int n_embd = 256;
    int n_layer = 2;
    int n_head = 4;
    int n_head_kv = 2;
    int n_ff = 512;
    int n_ctx = 2048;
    int head_dim = 0;  // default n_embd / n_head
    int sliding_window = 0;  // gemma3: default 512
};

// Named shapes. `1b` is the TinyLlama-1.1B shape the performance issue measures with.
const std::map<std::string, Shape> kPresets = {
    {"tiny", Shape{.n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff = 512, .n_ctx = 2048}},
    {"small", Shape{.n_embd = 512, .n_layer = 4, .n_head = 8, .n_head_kv = 4, .n_ff = 1536, .n_ctx = 4096}},
    {"1b", Shape{.n_embd = 2048, .n_layer = 22, .n_head = 32, .n_head_kv = 4, .n_ff = 5632, .n_ctx = 4096}},
};

struct ArchInfo {
    bool qkv_bias;       // qwen2
    bool gemma_norms;    // gemma3: q/k norms, post-attention and post-FFN norms
    bool tied_output;    // no output.weight: the token embedding is reused
};
const std::map<std::string, ArchInfo> kArchs = {
    {"llama", {false, false, false}},
    {"qwen2", {true, false, false}},
    {"gemma3", {false, true, true}},
};

// splitmix64: a tiny, fast, seedable generator; each tensor gets its own stream
// derived from (seed, name) so a tensor's values do not depend on write order.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in [-1, 1).
    float uniform() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0); }
};

uint64_t name_hash(const std::string& s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;  // ne[0] first
    float scale;                 // uniform in [-scale, scale) ...
    float offset;                // ... plus offset (norm weights sit around 1)
};

std::vector<TensorSpec> tensor_specs(const ArchInfo& a, const Shape& s, int64_t n_vocab) {
    const int64_t hd = s.head_dim;
    const int64_t q_dim = hd * s.n_head, kv_dim = hd * s.n_head_kv;
    // Uniform(-r, r) has std r / sqrt(3): r = sqrt(3 / fan_in) keeps activations at unit scale.
    auto mat = [](int64_t fan_in) { return static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in))); };
    std::vector<TensorSpec> t;
    // Tied embeddings double as the output projection: scale them like one so logits stay O(1).
    t.push_back({"token_embd.weight", {s.n_embd, n_vocab}, a.tied_output ? mat(s.n_embd) : 1.0f, 0.0f});
    for (int i = 0; i < s.n_layer; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        t.push_back({p + "attn_norm.weight", {s.n_embd}, 0.1f, 1.0f});
        t.push_back({p + "attn_q.weight", {s.n_embd, q_dim}, mat(s.n_embd), 0.0f});
        t.push_back({p + "attn_k.weight", {s.n_embd, kv_dim}, mat(s.n_embd), 0.0f});
        t.push_back({p + "attn_v.weight", {s.n_embd, kv_dim}, mat(s.n_embd), 0.0f});
        if (a.qkv_bias) {
            t.push_back({p + "attn_q.bias", {q_dim}, 0.1f, 0.0f});
            t.push_back({p + "attn_k.bias", {kv_dim}, 0.1f, 0.0f});
            t.push_back({p + "attn_v.bias", {kv_dim}, 0.1f, 0.0f});
        }
        if (a.gemma_norms) {
            t.push_back({p + "attn_q_norm.weight", {hd}, 0.1f, 1.0f});
            t.push_back({p + "attn_k_norm.weight", {hd}, 0.1f, 1.0f});
        }
        t.push_back({p + "attn_output.weight", {q_dim, s.n_embd}, mat(q_dim), 0.0f});
        if (a.gemma_norms) t.push_back({p + "post_attention_norm.weight", {s.n_embd}, 0.1f, 1.0f});
        t.push_back({p + "ffn_norm.weight", {s.n_embd}, 0.1f, 1.0f});
        t.push_back({p + "ffn_gate.weight", {s.n_embd, s.n_ff}, mat(s.n_embd), 0.0f});
        t.push_back({p + "ffn_up.weight", {s.n_embd, s.n_ff}, mat(s.n_embd), 0.0f});
        t.push_back({p + "ffn_down.weight", {s.n_ff, s.n_embd}, mat(s.n_ff), 0.0f});
        if (a.gemma_norms) t.push_back({p + "post_ffw_norm.weight", {s.n_embd}, 0.1f, 1.0f});
    }
    t.push_back({"output_norm.weight", {s.n_embd}, 0.1f, 1.0f});
    if (!a.tied_output) t.push_back({"output.weight", {s.n_embd, n_vocab}, mat(s.n_embd), 0.0f});
    return t;
}

// GGUF general.file_type (llama_ftype) for an all-one-type file.
uint32_t file_type_of(kiln::Type t) {
    switch (t) {
        case kiln::Type::F32: return 0;
        case kiln::Type::F16: return 1;
        case kiln::Type::Q4_0: return 2;
        case kiln::Type::Q4_1: return 3;
        case kiln::Type::Q8_0: return 7;
        case kiln::Type::Q5_0: return 8;
        case kiln::Type::Q5_1: return 9;
        case kiln::Type::Q2_K: return 10;
        case kiln::Type::Q3_K: return 12;  // Q3_K_M
        case kiln::Type::Q4_K: return 15;  // Q4_K_M
        case kiln::Type::Q5_K: return 17;  // Q5_K_M
        case kiln::Type::Q6_K: return 18;
        case kiln::Type::IQ4_NL: return 25;
        case kiln::Type::BF16: return 32;
        default: return 0;
    }
}

int run(int argc, char** argv) {
    CLI::App app{"kiln-synth: write a GGUF model with seeded random weights"};
    std::string arch = "llama", preset = "tiny", vocab_path, out_path, type_name = "f16";
    uint64_t seed = 42;
    Shape over{.n_embd = 0, .n_layer = 0, .n_head = 0, .n_head_kv = 0, .n_ff = 0, .n_ctx = 0, .head_dim = 0, .sliding_window = 0};
    app.add_option("--arch", arch, "Architecture: llama, qwen2, gemma3")->capture_default_str();
    app.add_option("--preset", preset, "Shape preset: tiny, small, 1b")->capture_default_str();
    app.add_option("--vocab", vocab_path, "GGUF file whose tokenizer.* metadata is copied")->required();
    app.add_option("-o,--output", out_path, "Output GGUF file")->required();
    app.add_option("--type", type_name, "Weight type for 2-D tensors (f16, q4_0, q4_K, ...)")->capture_default_str();
    app.add_option("--seed", seed, "Random seed")->capture_default_str();
    app.add_option("--n-embd", over.n_embd, "Override: embedding length");
    app.add_option("--n-layer", over.n_layer, "Override: number of layers");
    app.add_option("--n-head", over.n_head, "Override: attention heads");
    app.add_option("--n-head-kv", over.n_head_kv, "Override: KV heads");
    app.add_option("--n-ff", over.n_ff, "Override: feed-forward length");
    app.add_option("--n-ctx", over.n_ctx, "Override: context length");
    app.add_option("--head-dim", over.head_dim, "Override: head dimension (default n_embd / n_head)");
    app.add_option("--sliding-window", over.sliding_window, "gemma3: sliding-window size (default 512)");
    // UTF-8 arguments on Windows too (file names); CLI11 takes them last-first.
    std::vector<std::string> args = kiln_tools::utf8_args(argc, argv);
    args.erase(args.begin());
    std::reverse(args.begin(), args.end());
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }

    const auto arch_it = kArchs.find(arch);
    if (arch_it == kArchs.end()) throw std::runtime_error("unknown architecture '" + arch + "' (llama, qwen2, gemma3)");
    const auto preset_it = kPresets.find(preset);
    if (preset_it == kPresets.end()) throw std::runtime_error("unknown preset '" + preset + "' (tiny, small, 1b)");
    Shape s = preset_it->second;
    for (auto [dst, src] : {std::pair{&s.n_embd, over.n_embd}, {&s.n_layer, over.n_layer}, {&s.n_head, over.n_head},
                            {&s.n_head_kv, over.n_head_kv}, {&s.n_ff, over.n_ff}, {&s.n_ctx, over.n_ctx},
                            {&s.head_dim, over.head_dim}, {&s.sliding_window, over.sliding_window}}) {
        if (src > 0) *dst = src;
    }
    if (s.head_dim == 0) {
        if (s.n_embd % s.n_head != 0) throw std::runtime_error("n_embd must be a multiple of n_head (or give --head-dim)");
        s.head_dim = s.n_embd / s.n_head;
    }
    if (s.n_head % s.n_head_kv != 0) throw std::runtime_error("n_head must be a multiple of n_head_kv");
    const auto wtype = kiln::type_from_name(type_name);
    if (!wtype || !kiln::has_reference(*wtype)) throw std::runtime_error("cannot write weights of type '" + type_name + "'");

    const auto vocab = kiln::gguf::File::open(vocab_path);
    const auto* tokens = vocab.get_array("tokenizer.ggml.tokens");
    if (!tokens) throw std::runtime_error(vocab_path + ": no tokenizer.ggml.tokens array");
    const auto n_vocab = static_cast<int64_t>(tokens->items.size());

    kiln::gguf::Writer w;
    const std::string a = arch + ".";
    w.set("general.architecture", kiln::gguf::Value::str(arch));
    w.set("general.name", kiln::gguf::Value::str("kiln-synth " + arch + " " + preset + " seed " + std::to_string(seed)));
    w.set("general.file_type", kiln::gguf::Value::u32(file_type_of(*wtype)));
    w.set("general.quantization_version", kiln::gguf::Value::u32(2));
    w.set(a + "context_length", kiln::gguf::Value::u32(static_cast<uint32_t>(s.n_ctx)));
    w.set(a + "embedding_length", kiln::gguf::Value::u32(static_cast<uint32_t>(s.n_embd)));
    w.set(a + "block_count", kiln::gguf::Value::u32(static_cast<uint32_t>(s.n_layer)));
    w.set(a + "feed_forward_length", kiln::gguf::Value::u32(static_cast<uint32_t>(s.n_ff)));
    w.set(a + "attention.head_count", kiln::gguf::Value::u32(static_cast<uint32_t>(s.n_head)));
    w.set(a + "attention.head_count_kv", kiln::gguf::Value::u32(static_cast<uint32_t>(s.n_head_kv)));
    w.set(a + "attention.key_length", kiln::gguf::Value::u32(static_cast<uint32_t>(s.head_dim)));
    w.set(a + "attention.value_length", kiln::gguf::Value::u32(static_cast<uint32_t>(s.head_dim)));
    w.set(a + "attention.layer_norm_rms_epsilon", kiln::gguf::Value::f32(arch == "gemma3" ? 1e-6f : 1e-5f));
    w.set(a + "rope.dimension_count", kiln::gguf::Value::u32(static_cast<uint32_t>(s.head_dim)));
    w.set(a + "rope.freq_base", kiln::gguf::Value::f32(arch == "gemma3" ? 1e6f : arch == "qwen2" ? 1e6f : 1e4f));
    w.set(a + "vocab_size", kiln::gguf::Value::u32(static_cast<uint32_t>(n_vocab)));
    if (arch == "gemma3") {
        w.set(a + "attention.sliding_window", kiln::gguf::Value::u32(static_cast<uint32_t>(s.sliding_window > 0 ? s.sliding_window : 512)));
    }
    for (const auto& kv : vocab.metadata()) {
        if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    }

    const auto specs = tensor_specs(arch_it->second, s, n_vocab);
    int64_t n_params = 0;
    for (const auto& spec : specs) {
        int64_t ne = 1;
        for (auto d : spec.shape) ne *= d;
        n_params += ne;
        // 1-D tensors (norms, biases) stay F32, as in every GGUF model.
        kiln::Type t = spec.shape.size() == 1 ? kiln::Type::F32 : *wtype;
        if (spec.shape[0] % kiln::traits(t).block_size != 0) {
            std::fprintf(stderr, "kiln-synth: %s: row of %lld is not a multiple of the %s block; writing f16\n",
                         spec.name.c_str(), static_cast<long long>(spec.shape[0]), type_name.c_str());
            t = kiln::Type::F16;
        }
        const uint64_t tseed = seed ^ name_hash(spec.name);
        w.add_tensor(spec.name, t, spec.shape, [spec, t, tseed](std::span<uint8_t> out) {
            const int64_t row = spec.shape[0];
            const int64_t rows = spec.shape.size() > 1 ? spec.shape[1] : 1;
            Rng rng{tseed};
            std::vector<float> buf(static_cast<size_t>(row));
            const size_t rbytes = kiln::row_size(t, row);
            for (int64_t r = 0; r < rows; ++r) {
                for (auto& v : buf) v = spec.offset + spec.scale * rng.uniform();
                kiln::quantize(t, buf.data(), out.data() + static_cast<size_t>(r) * rbytes, 1, row);
            }
        });
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::printf("kiln-synth: %s, preset %s: n_embd %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d, "
                "n_ctx %d, n_vocab %lld, %.3f B parameters, weights %s\n",
                arch.c_str(), preset.c_str(), s.n_embd, s.n_layer, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.n_ctx,
                static_cast<long long>(n_vocab), static_cast<double>(n_params) * 1e-9, type_name.c_str());
    w.write(out_path);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("kiln-synth: wrote %s in %.1f s\n", out_path.c_str(), secs);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln-synth: %s\n", e.what());
        return 1;
    }
}
