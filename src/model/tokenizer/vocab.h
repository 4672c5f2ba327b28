// The vocabulary and tokenizer settings read from tokenizer.ggml.* keys, with
// llama.cpp's defaults and fix-ups applied. Shared by every tokenizer part.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/piece_map.h"
#include "model/tokenizer/pre_types.h"
#include "model/tokenizer/tokenizer.h"

namespace kiln::gguf {
class File;
}

namespace kiln::tok {

struct Vocab {
    std::string source;  // file name, for error messages
    VocabType type = VocabType::SPM;
    std::string model;  // tokenizer.ggml.model
    std::string pre;    // tokenizer.ggml.pre
    const PreTypeSpec* pre_spec = nullptr;  // BPE only

    TextPool texts;
    PieceMap pieces;
    std::vector<float> scores;
    std::vector<TokenType> types;
    std::vector<uint32_t> attrs;  // token_attr bits
    size_t max_token_len = 0;

    int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken;
    int32_t sep = kNoToken, pad = kNoToken, mask = kNoToken, nl = kNoToken;
    int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
    int32_t fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;

    bool add_bos = false, add_eos = false, add_sep = false;
    bool add_space_prefix = false;
    bool remove_extra_whitespaces = false;  // read, but llama.cpp's SPM ignores it too
    bool clean_spaces = false;
    bool ignore_merges = false;
    bool escape_whitespace = false;  // BPE: ' ' -> U+2581 before splitting
    bool byte_encode = true;         // BPE: GPT-2 byte-to-unicode symbols
    bool lowercase = true;           // WPM normalizer
    bool strip_accents = true;       // WPM normalizer

    // Control, user-defined and unknown tokens, longest text first: the order
    // in which their texts are cut out of the input.
    std::vector<int32_t> special_tokens;
    std::vector<int32_t> eog;  // sorted

    int32_t n_tokens() const { return static_cast<int32_t>(types.size()); }
    std::string_view text(int32_t id) const { return texts.get(static_cast<size_t>(id)); }
    int32_t find(std::string_view s) const { return pieces.find(texts, s); }
    bool has(int32_t id, uint32_t attr) const { return (attrs[static_cast<size_t>(id)] & attr) != 0; }
    bool valid(int32_t id) const { return id >= 0 && id < n_tokens(); }
};

// Reads the vocabulary; tokenizer-specific tables (merges, ...) are built by
// their own modules from the same file. Throws TokenizerError.
Vocab load_vocab(const gguf::File& file);

}  // namespace kiln::tok
