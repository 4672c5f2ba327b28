// Loads tokenizer.ggml.* into a Vocab, following llama.cpp's rules for
// defaults, overrides and its text-based fix-ups (EOG detection, per-model
// lstrip/rstrip attributes), since those decide how text is tokenized.
#include "model/tokenizer/vocab.h"

#include <algorithm>
#include <cctype>

#include "model/gguf.h"

namespace kiln::tok {
namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTypes = "tokenizer.ggml.token_type";

class Loader {
public:
    explicit Loader(const gguf::File& f) : file_(f) {}

    Vocab load() {
        v_.source = file_.path();
        read_model();
        read_tokens();
        read_special_ids();
        read_flags();
        detect_special_texts();
        build_special_cache();
        apply_name_rules();
        return std::move(v_);
    }

private:
    [[noreturn]] void fail(std::string_view key, const std::string& msg) const {
        throw TokenizerError(v_.source + ": metadata key '" + std::string(key) + "': " + msg);
    }

    std::optional<std::string> str(std::string_view key) const { return file_.get_string(key); }
    std::optional<bool> flag(std::string_view key) const { return file_.get_bool(key); }

    void read_model() {
        const auto model = str(kKeyModel);
        if (!model) fail(kKeyModel, "missing: the file has no tokenizer");
        v_.model = *model;
        v_.pre = str(kKeyPre).value_or("");
        const std::string& m = v_.model;
        if (m == "none" || m == "no_vocab") fail(kKeyModel, "'" + m + "': the file has no vocabulary to tokenize with");
        if (m == "llama") {
            v_.type = VocabType::SPM;
            set_defaults(1, 2, 0, kNoToken, kNoToken, kNoToken);
            v_.add_space_prefix = true;
            v_.clean_spaces = false;
            v_.add_bos = true;
        } else if (m == "bert") {
            v_.type = VocabType::WPM;
            set_defaults(101, kNoToken, 100, 102, 0, 103);
            v_.clean_spaces = true;
            v_.add_bos = true;
            v_.add_sep = true;
        } else if (m == "gpt2" || m == "gemma4") {
            v_.type = VocabType::BPE;
            if (m == "gpt2") {
                set_defaults(11, 11, kNoToken, kNoToken, kNoToken, kNoToken);
            } else {
                set_defaults(kNoToken, kNoToken, kNoToken, kNoToken, kNoToken, kNoToken);
                v_.pre = "gemma4";  // llama.cpp ignores the key for this model
            }
            const PreTypeSpec* spec = find_pre_type(v_.pre);
            if (!spec) fail(kKeyPre, "unknown pre-tokenizer '" + v_.pre + "'");
            v_.pre_spec = spec;
            v_.clean_spaces = spec->clean_spaces;
            v_.ignore_merges = spec->ignore_merges;
            v_.add_bos = spec->add_bos;
            v_.add_sep = spec->add_sep;
            v_.byte_encode = spec->byte_encode;
            v_.escape_whitespace = spec->escape_whitespace;
            if (spec->no_bos_token) v_.bos = kNoToken;
        } else if (m == "t5" || m == "rwkv" || m == "plamo2" || m == "hybriddna" || m == "whitespace") {
            fail(kKeyModel, "tokenizer model '" + m + "' is not supported");
        } else {
            fail(kKeyModel, "unknown tokenizer model '" + m + "'");
        }
        if (auto b = flag("tokenizer.ggml.add_space_prefix")) v_.add_space_prefix = *b;
        if (auto b = flag("tokenizer.ggml.remove_extra_whitespaces")) v_.remove_extra_whitespaces = *b;
    }

    void set_defaults(int32_t bos, int32_t eos, int32_t unk, int32_t sep, int32_t pad, int32_t mask) {
        v_.bos = bos;
        v_.eos = eos;
        v_.unk = unk;
        v_.sep = sep;
        v_.pad = pad;
        v_.mask = mask;
    }

    void read_tokens() {
        const gguf::Array* tokens = file_.get_array(kKeyTokens);
        if (!tokens) fail(kKeyTokens, "missing: the file has no vocabulary");
        if (tokens->elem_type != gguf::ValueType::STRING) fail(kKeyTokens, "expected an array of strings");
        const size_t n = tokens->items.size();
        if (n == 0 || n > 0x7FFFFFFF) fail(kKeyTokens, "bad vocabulary size " + std::to_string(n));

        const gguf::Array* scores = file_.get_array(kKeyScores);
        if (scores) {
            if (scores->elem_type != gguf::ValueType::FLOAT32 && scores->elem_type != gguf::ValueType::INT32) {
                fail(kKeyScores, "expected an array of float32 or int32");
            }
            if (scores->items.size() < n) fail(kKeyScores, "has " + std::to_string(scores->items.size()) + " entries for " + std::to_string(n) + " tokens");
        }
        const gguf::Array* types = file_.get_array(kKeyTypes);
        if (types) {
            if (types->elem_type != gguf::ValueType::INT32) fail(kKeyTypes, "expected an array of int32");
            if (types->items.size() < n) fail(kKeyTypes, "has " + std::to_string(types->items.size()) + " entries for " + std::to_string(n) + " tokens");
        }

        size_t bytes = 0;
        for (const gguf::Value& t : tokens->items) bytes += t.as_string(kKeyTokens).size();
        v_.texts.reserve(n, bytes + 64);
        v_.scores.resize(n, 0.0f);
        v_.types.resize(n, TokenType::Normal);
        v_.attrs.resize(n, token_attr::Normal);
        for (size_t i = 0; i < n; ++i) {
            std::string_view text = tokens->items[i].as_string(kKeyTokens);
            std::string placeholder;
            if (text.empty()) {  // llama.cpp's stand-in, so lookups stay unambiguous
                placeholder = "[EMPTY_" + std::to_string(i) + "]";
                text = placeholder;
            }
            v_.texts.add(text);
            v_.max_token_len = std::max(v_.max_token_len, text.size());
            if (scores) v_.scores[i] = static_cast<float>(scores->items[i].as_f64(kKeyScores));
            if (types) {
                const int64_t t = types->items[i].as_i64(kKeyTypes);
                v_.types[i] = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::Undefined;
                v_.attrs[i] = attr_of(v_.types[i]);
            }
        }
        const int64_t dup = v_.pieces.build(v_.texts);
        if (dup >= 0) {
            const int32_t first = v_.pieces.find(v_.texts, v_.text(static_cast<int32_t>(dup)));
            fail(kKeyTokens, "duplicate token '" + std::string(v_.text(static_cast<int32_t>(dup))) + "' has ids " +
                                 std::to_string(first) + " and " + std::to_string(dup));
        }
        // The newline token is fixed before the ids are read from metadata,
        // as in llama.cpp (BPE computes it later by tokenizing "\n").
        if (v_.type == VocabType::SPM) {
            v_.nl = v_.find("<0x0A>");
            if (v_.nl < 0) v_.nl = v_.find("\n");
            if (v_.nl < 0) v_.nl = v_.pad;
        } else if (v_.type == VocabType::WPM) {
            v_.nl = v_.pad;
        }
    }

    static uint32_t attr_of(TokenType t) {
        switch (t) {
            case TokenType::Unknown: return token_attr::Unknown;
            case TokenType::Unused: return token_attr::Unused;
            case TokenType::Normal: return token_attr::Normal;
            case TokenType::Control: return token_attr::Control;
            case TokenType::UserDefined: return token_attr::UserDefined;
            case TokenType::Byte: return token_attr::Byte;
            default: return 0;
        }
    }

    void read_special_ids() {
        struct Key {
            std::string_view name;
            int32_t* id;
        };
        const Key keys[] = {
            {"tokenizer.ggml.bos_token_id", &v_.bos},
            {"tokenizer.ggml.eos_token_id", &v_.eos},
            {"tokenizer.ggml.eot_token_id", &v_.eot},
            {"tokenizer.ggml.eom_token_id", &v_.eom},
            {"tokenizer.ggml.unknown_token_id", &v_.unk},
            {"tokenizer.ggml.seperator_token_id", &v_.sep},  // sic: the key's spelling
            {"tokenizer.ggml.padding_token_id", &v_.pad},
            {"tokenizer.ggml.mask_token_id", &v_.mask},
            {"tokenizer.ggml.fim_pre_token_id", &v_.fim_pre},
            {"tokenizer.ggml.fim_suf_token_id", &v_.fim_suf},
            {"tokenizer.ggml.fim_mid_token_id", &v_.fim_mid},
            {"tokenizer.ggml.fim_pad_token_id", &v_.fim_pad},
            {"tokenizer.ggml.fim_rep_token_id", &v_.fim_rep},
            {"tokenizer.ggml.fim_sep_token_id", &v_.fim_sep},
            // deprecated spellings, read last so they win as in llama.cpp
            {"tokenizer.ggml.prefix_token_id", &v_.fim_pre},
            {"tokenizer.ggml.suffix_token_id", &v_.fim_suf},
            {"tokenizer.ggml.middle_token_id", &v_.fim_mid},
        };
        for (const Key& k : keys) {
            if (*k.id >= v_.n_tokens()) *k.id = kNoToken;  // a default the vocabulary cannot hold
            const auto value = file_.get_i64(k.name);
            // An out-of-range id keeps the default, as llama.cpp does (with a warning).
            if (value && *value >= 0 && *value < v_.n_tokens()) *k.id = static_cast<int32_t>(*value);
        }
    }

    void read_flags() {
        if (auto b = flag("tokenizer.ggml.add_bos_token")) v_.add_bos = *b;
        if (auto b = flag("tokenizer.ggml.add_eos_token")) v_.add_eos = *b;
        if (auto b = flag("tokenizer.ggml.add_sep_token")) v_.add_sep = *b;
        if (v_.pre_spec && v_.pre_spec->newline_runs_whole) v_.add_bos = true;  // llama.cpp's Gemma 4 override
        const auto need = [&](bool add, int32_t id, std::string_view add_key, std::string_view id_key) {
            if (add && id == kNoToken) {
                fail(add_key, "is true, but " + std::string(id_key) + " is not set");
            }
        };
        need(v_.add_bos, v_.bos, "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id");
        need(v_.add_eos, v_.eos, "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id");
        need(v_.add_sep, v_.sep, "tokenizer.ggml.add_sep_token", "tokenizer.ggml.seperator_token_id");
        if (auto b = flag("tokenizer.ggml.normalizer.lowercase")) v_.lowercase = *b;
        v_.strip_accents = v_.lowercase;
        if (auto b = flag("tokenizer.ggml.normalizer.strip_accents")) v_.strip_accents = *b;
    }

    void make_control(int32_t id) { v_.attrs[id] |= token_attr::Control; }

    // The first candidate text present in the vocabulary, or kNoToken.
    int32_t first_present(std::initializer_list<std::string_view> texts) const {
        for (std::string_view t : texts) {
            const int32_t id = v_.find(t);
            if (id >= 0) return id;
        }
        return kNoToken;
    }

    // llama.cpp recognises end-of-turn, fill-in-the-middle and end-of-generation
    // tokens by their text when the metadata does not name them, and forces
    // them to be control tokens (which changes how they tokenize and print).
    void detect_special_texts() {
        const auto detect = [&](int32_t& id, std::initializer_list<std::string_view> texts) {
            if (id != kNoToken) return;
            id = first_present(texts);
            if (id != kNoToken) make_control(id);
        };
        detect(v_.eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                        "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                        "<end_of_utterance>"});
        detect(v_.eom, {"<|eom_id|>"});
        detect(v_.fim_pre, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
                            "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"});
        detect(v_.fim_suf, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
                            "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"});
        detect(v_.fim_mid, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
                            "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"});
        detect(v_.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
        detect(v_.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
        detect(v_.fim_sep, {"<|file_sep|>"});

        for (int32_t id = 0; id < v_.n_tokens(); ++id) {
            if (v_.has(id, token_attr::Control) && !v_.has(id, token_attr::Unused) &&
                v_.text(id).find("unused") != std::string_view::npos) {
                v_.attrs[id] |= token_attr::Unused;
            }
        }

        std::vector<int32_t> eog;
        for (int32_t id : {v_.fim_pad, v_.fim_rep, v_.fim_sep}) {
            if (id != kNoToken) eog.push_back(id);
        }
        for (std::string_view t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                                   "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                                   "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                                   "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["}) {
            const int32_t id = v_.find(t);
            if (id < 0) continue;
            eog.push_back(id);
            make_control(id);
        }
        // gpt-oss: these must always be rendered, so llama.cpp makes them user-defined.
        for (std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
            const int32_t id = v_.find(t);
            if (id >= 0) v_.attrs[id] = token_attr::UserDefined;
        }
        for (int32_t id : {v_.eos, v_.eot, v_.eom}) {
            if (id != kNoToken) eog.push_back(id);
        }
        std::sort(eog.begin(), eog.end());
        eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

        const auto in_eog = [&](std::string_view t) {
            const int32_t id = v_.find(t);
            return id >= 0 && std::binary_search(eog.begin(), eog.end(), id) ? id : kNoToken;
        };
        const auto erase_eog = [&](int32_t id) { eog.erase(std::find(eog.begin(), eog.end(), id)); };
        // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
        const int32_t end_id = in_eog("<|end|>");
        const bool has_return = in_eog("<|return|>") != kNoToken;
        const bool has_call = in_eog("<|call|>") != kNoToken || in_eog("<|calls|>") != kNoToken;
        const bool has_flush = in_eog("<|flush|>") != kNoToken;
        if (end_id != kNoToken && ((has_return && has_call) || (has_call && has_flush))) {
            erase_eog(end_id);
            v_.attrs[end_id] = token_attr::UserDefined;
        }
        // gemma4 / paddleocr: "</s>" is ordinary text there.
        const int32_t s_id = in_eog("</s>");
        if (s_id != kNoToken && in_eog("<|tool_response>") != kNoToken) {
            erase_eog(s_id);
            v_.attrs[s_id] = token_attr::Normal;
        }
        v_.eog = std::move(eog);
    }

    void build_special_cache() {
        for (int32_t id = 0; id < v_.n_tokens(); ++id) {
            if (v_.has(id, token_attr::Control | token_attr::UserDefined | token_attr::Unknown)) v_.special_tokens.push_back(id);
        }
        // Longest first. llama.cpp's sort is unstable; ties (equal lengths)
        // are ordered by id here so results do not depend on the library.
        std::stable_sort(v_.special_tokens.begin(), v_.special_tokens.end(),
                         [&](int32_t a, int32_t b) { return v_.text(a).size() > v_.text(b).size(); });
    }

    void set_attr(std::string_view text, uint32_t attr, bool on) {
        const int32_t id = v_.find(text);
        if (id < 0) return;
        v_.attrs[id] = on ? (v_.attrs[id] | attr) : (v_.attrs[id] & ~attr);
    }

    // lstrip/rstrip are not stored in GGUF; llama.cpp sets them by model name.
    void apply_name_rules() {
        std::string name = str("general.name").value_or("");
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        const std::string arch = str("general.architecture").value_or("");
        const auto contains = [](std::string_view s, std::initializer_list<std::string_view> subs) {
            for (std::string_view x : subs) {
                if (s.find(x) != std::string_view::npos) return true;
            }
            return false;
        };
        if (contains(v_.pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) || contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
            set_attr("<mask>", token_attr::LStrip, true);
        } else if (contains(name, {"phi-3", "phi3"})) {
            for (int32_t id : v_.special_tokens) v_.attrs[id] |= token_attr::RStrip;
            set_attr("</s>", token_attr::RStrip, true);
            for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, token_attr::RStrip, false);
        } else if (contains(name, {"modern-bert"})) {
            set_attr("[MASK]", token_attr::LStrip, true);
        }
    }

    const gguf::File& file_;
    Vocab v_;
};

}  // namespace

Vocab load_vocab(const gguf::File& file) {
    try {
        return Loader(file).load();
    } catch (const gguf::Error& e) {
        throw TokenizerError(e.what());  // already names the file and key
    }
}

}  // namespace kiln::tok
