// Tokenizers read from GGUF metadata, bit-exact with llama.cpp:
//   tokenizer.ggml.model = "llama" (SentencePiece BPE with byte fallback),
//   "gpt2" (byte-level BPE with merges and a pre-tokenizer chosen by
//   tokenizer.ggml.pre) and "bert" (WordPiece).
// Errors (malformed or unsupported metadata) are kiln::TokenizerError
// exceptions whose message names the file and the key at fault.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

namespace gguf {
class File;
}

class TokenizerError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

constexpr int32_t kNoToken = -1;

// tokenizer.ggml.token_type values as stored in GGUF.
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

// Per-token attribute bits (llama.cpp's llama_token_attr): derived from the
// token type plus llama.cpp's fix-ups (auto-detected EOG/FIM tokens become
// Control, model-specific lstrip/rstrip rules).
namespace token_attr {
constexpr uint32_t Unknown = 1u << 0;
constexpr uint32_t Unused = 1u << 1;
constexpr uint32_t Normal = 1u << 2;
constexpr uint32_t Control = 1u << 3;
constexpr uint32_t UserDefined = 1u << 4;
constexpr uint32_t Byte = 1u << 5;
constexpr uint32_t Normalized = 1u << 6;
constexpr uint32_t LStrip = 1u << 7;
constexpr uint32_t RStrip = 1u << 8;
constexpr uint32_t SingleWord = 1u << 9;
}  // namespace token_attr

enum class VocabType {
    SPM,  // "llama"
    BPE,  // "gpt2"
    WPM,  // "bert"
};

struct TokenizeOptions {
    // Add BOS/EOS (SPM, BPE: as the model's add_bos/add_eos say; WPM: CLS and SEP).
    bool add_special = true;
    // Control/unknown token texts in the input become their ids. User-defined
    // tokens are matched either way, as in llama.cpp.
    bool parse_special = false;
};

struct DetokenizeOptions {
    // Drop a leading BOS / trailing EOS that the model adds itself.
    bool remove_special = false;
    // Render control/unknown tokens as their text (otherwise they vanish).
    bool unparse_special = false;
    // llama.cpp's clean_up_tokenization_spaces (" ," -> "," ...); default: the
    // model's setting (on for most byte-level BPE models).
    std::optional<bool> clean_spaces = std::nullopt;
    // Drop the space SentencePiece put in front of the text; default: the
    // model's add_space_prefix.
    std::optional<bool> remove_leading_space = std::nullopt;
};

class Tokenizer {
public:
    // Reads tokenizer.ggml.* from an opened GGUF file.
    static Tokenizer from_gguf(const gguf::File& file);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Thread-safe: tokenize/detokenize keep no state between calls.
    std::vector<int32_t> tokenize(std::string_view text, const TokenizeOptions& opts = {}) const;
    // The text a token stands for; control/unknown tokens give "" unless `special`.
    std::string token_to_piece(int32_t id, bool special = true) const;
    std::string detokenize(std::span<const int32_t> ids, const DetokenizeOptions& opts = {}) const;

    int32_t n_vocab() const;
    VocabType type() const;
    const std::string& model_name() const;  // tokenizer.ggml.model
    const std::string& pre_name() const;    // tokenizer.ggml.pre ("" if absent)

    TokenType token_type(int32_t id) const;
    uint32_t token_attrs(int32_t id) const;  // token_attr bits
    std::string_view token_text(int32_t id) const;
    float token_score(int32_t id) const;
    int32_t find_token(std::string_view text) const;  // kNoToken if absent
    bool is_control(int32_t id) const;
    bool is_eog(int32_t id) const;  // ends generation (EOS, EOT, EOM, ...)
    const std::vector<int32_t>& eog_tokens() const;

    // Special ids; kNoToken when the model has none.
    int32_t bos() const;
    int32_t eos() const;
    int32_t eot() const;
    int32_t eom() const;
    int32_t unk() const;
    int32_t sep() const;
    int32_t pad() const;
    int32_t mask() const;
    int32_t nl() const;
    int32_t fim_pre() const;
    int32_t fim_suf() const;
    int32_t fim_mid() const;
    int32_t fim_pad() const;
    int32_t fim_rep() const;
    int32_t fim_sep() const;

    bool add_bos() const;
    bool add_eos() const;
    bool add_sep() const;
    bool add_space_prefix() const;
    bool clean_spaces() const;

    struct Impl;

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    friend class StreamDecoder;
};

// Turns a stream of generated tokens into text that is always valid UTF-8:
// bytes of a character split across tokens (byte-fallback tokens, partial
// multi-byte pieces) are held back until the character is complete; bytes that
// can never form a character come out as U+FFFD.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tok, DetokenizeOptions opts = {});
    // Text that became printable with this token (possibly empty).
    std::string push(int32_t id);
    // Whatever is still held back (an incomplete character becomes U+FFFD).
    std::string flush();
    void reset();

private:
    const Tokenizer::Impl* impl_;  // stays put when the Tokenizer object is moved
    DetokenizeOptions opts_;
    std::string pending_;   // bytes of an unfinished character
    bool first_ = true;     // no token pushed yet
    bool strip_space_ = false;  // the next piece loses a leading space
};

}  // namespace kiln
