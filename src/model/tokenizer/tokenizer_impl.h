// Tokenizer::Impl: the loaded vocabulary plus the model-specific parts.
// Internal to src/model/tokenizer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/special.h"
#include "model/tokenizer/spm.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace kiln {

struct Tokenizer::Impl {
    tok::Vocab vocab;
    std::optional<tok::SpmModel> spm;
    std::optional<tok::BpeModel> bpe;
    std::optional<tok::PreTokenizer> pre;
    std::optional<tok::SpecialMatcher> special;
    std::vector<std::string> pieces;  // token_to_piece(id, special = true), precomputed

    // Buffers for one tokenize() call (its fragments share the word caches).
    struct Scratch {
        std::string buf;
        tok::SpmModel::Workspace spm;
        tok::PreTokenizer::Workspace pre;
        tok::BpeModel::Workspace bpe;
    };

    // Tokens of a raw text fragment (no special-token handling).
    void encode_fragment(std::string_view text, bool space_prefix, Scratch& scratch, std::vector<int32_t>& out) const;
    void build_pieces();  // fills `pieces` (detokenize.cpp)
    // The piece of a token; "" for control/unknown tokens unless `special`.
    // Throws TokenizerError for ids outside the vocabulary.
    const std::string& piece(int32_t id, bool special) const;
};

}  // namespace kiln
