// SentencePiece-style BPE (tokenizer.ggml.model = "llama"): starting from
// UTF-8 characters, repeatedly merges the adjacent pair whose concatenation is
// the highest-scoring token (leftmost first among equal scores); leftovers
// that are not tokens become <0xXX> byte tokens. This is llama.cpp's
// algorithm, which runs over the whole text at once.
//
// For speed we cut the text into independent segments first. A cut before a
// U+2581 (the escaped space) is exact when no token contains the byte in
// front of it followed by U+2581: merges only ever form tokens, so no symbol
// can then span the cut, and merge order within a segment is unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/vocab.h"
#include "model/tokenizer/word_cache.h"

namespace kiln::tok {

class SpmModel {
public:
    explicit SpmModel(const Vocab& vocab);

    struct Workspace {
        struct Sym {
            int32_t id;  // token id of the symbol, -1 if it is none
            int32_t prev, next;
            uint32_t begin, len;  // bytes of the segment
        };
        struct Cand {
            float score;
            int32_t left, right, id;
            uint32_t size;
        };
        std::vector<Sym> syms;
        std::vector<Cand> heap;
        std::vector<float> pair_score;
        std::vector<int32_t> pair_token;
        WordCache cache;  // segment -> ids, per tokenize() call
    };

    // Appends the tokens of `text` (spaces already escaped as U+2581).
    void encode(const Vocab& vocab, std::string_view text, Workspace& ws, std::vector<int32_t>& out) const;

private:
    static constexpr size_t kLinearMax = 24;  // segments up to this many symbols merge by rescanning

    void encode_segment(const Vocab& vocab, std::string_view seg, Workspace& ws, std::vector<int32_t>& out) const;
    void merge_linear(const Vocab& vocab, std::string_view seg, Workspace& ws) const;
    void merge_heap(const Vocab& vocab, std::string_view seg, Workspace& ws) const;

    std::array<bool, 256> joins_space_{};    // some token has this byte right before U+2581
    std::array<int32_t, 256> byte_token_{};  // byte-fallback token per byte (-1: none)
};

}  // namespace kiln::tok
