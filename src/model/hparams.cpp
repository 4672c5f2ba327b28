#include "model/hparams.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "model/gguf.h"

namespace kiln {
namespace {

// A per-model number that GGUF may store as a scalar or as a per-layer array;
// kiln supports only uniform values for now, so an array must hold one value.
int64_t read_count(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback) {
    const gguf::Value* v = f.find(key);
    if (!v) {
        if (fallback) return *fallback;
        throw std::runtime_error(f.path() + ": metadata key '" + key + "' is missing");
    }
    if (v->type == gguf::ValueType::ARRAY) {
        const auto& a = v->as_array(key);
        if (a.items.empty()) throw std::runtime_error(f.path() + ": metadata key '" + key + "' is an empty array");
        const int64_t first = a.items[0].as_i64(key);
        for (const auto& it : a.items) {
            if (it.as_i64(key) != first) {
                throw std::runtime_error(f.path() + ": metadata key '" + key +
                                         "' varies per layer, which kiln does not support yet");
            }
        }
        return first;
    }
    return v->as_i64(key);
}

}  // namespace

void read_common_hparams(const gguf::File& f, HParams& hp) {
    const std::string a = hp.arch + ".";
    hp.n_ctx_train = read_count(f, a + "context_length", std::nullopt);
    hp.n_embd = read_count(f, a + "embedding_length", std::nullopt);
    hp.n_layer = read_count(f, a + "block_count", std::nullopt);
    hp.n_ff = read_count(f, a + "feed_forward_length", std::nullopt);
    hp.n_head = read_count(f, a + "attention.head_count", std::nullopt);
    hp.n_head_kv = read_count(f, a + "attention.head_count_kv", hp.n_head);
    if (hp.n_head <= 0 || hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0) {
        throw std::runtime_error(f.path() + ": attention.head_count " + std::to_string(hp.n_head) +
                                 " is not a positive multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    }
    hp.head_dim = read_count(f, a + "attention.key_length", hp.n_embd / hp.n_head);
    hp.head_dim_v = read_count(f, a + "attention.value_length", hp.head_dim);
    hp.n_rot = static_cast<int>(read_count(f, a + "rope.dimension_count", hp.head_dim));
    const auto eps = f.get_f64(a + "attention.layer_norm_rms_epsilon");
    if (!eps) throw std::runtime_error(f.path() + ": metadata key '" + a + "attention.layer_norm_rms_epsilon' is missing");
    hp.rms_eps = static_cast<float>(*eps);
    hp.rope_freq_base = static_cast<float>(f.get_f64(a + "rope.freq_base").value_or(10000.0));
    const std::string scaling = f.get_string(a + "rope.scaling.type").value_or("none");
    const double factor = f.get_f64(a + "rope.scaling.factor").value_or(1.0);
    if (scaling == "linear" || (scaling == "none" && factor != 1.0 && factor > 0)) {
        hp.rope_freq_scale = static_cast<float>(1.0 / factor);
    } else if (scaling != "none") {
        throw std::runtime_error(f.path() + ": rope scaling '" + scaling + "' is not supported yet (none, linear)");
    }
    hp.rope_freq_base_swa = hp.rope_freq_base;
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    if (const auto* tokens = f.get_array("tokenizer.ggml.tokens")) {
        hp.n_vocab = static_cast<int64_t>(tokens->items.size());
    } else {
        hp.n_vocab = read_count(f, a + "vocab_size", std::nullopt);
    }
    for (auto [v, key] : {std::pair{hp.n_embd, "embedding_length"}, {hp.n_layer, "block_count"}, {hp.n_ff, "feed_forward_length"},
                          {hp.head_dim, "attention.key_length"}, {hp.n_vocab, "vocab_size"}}) {
        if (v <= 0 || v > (int64_t{1} << 24)) {
            throw std::runtime_error(f.path() + ": " + a + key + " = " + std::to_string(v) + " is out of range");
        }
    }
    if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2) {
        throw std::runtime_error(f.path() + ": rope.dimension_count " + std::to_string(hp.n_rot) + " does not fit head size " +
                                 std::to_string(hp.head_dim));
    }
    hp.layer_is_swa.assign(static_cast<size_t>(hp.n_layer), false);
}

}  // namespace kiln
