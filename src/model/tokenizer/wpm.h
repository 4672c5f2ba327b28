// WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp implements it.
//
// Normalisation: NFD (first code point only) and accent stripping when
// strip_accents, lower-casing when lowercase, control characters dropped;
// words split at whitespace and around punctuation, ASCII symbols and CJK
// ideographs. Each word, prefixed with U+2581 (GGUF's marker for a word
// start), is cut greedily into the longest vocabulary pieces; a word that
// cannot be cut completely becomes the unknown token.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/vocab.h"

namespace kiln::tok {

void wpm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

}  // namespace kiln::tok
