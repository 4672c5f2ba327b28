// Cuts special-token texts out of the input before the tokenizer proper sees
// it, with llama.cpp's semantics: token by token, longest text first, each
// token's non-overlapping occurrences left to right in the text not yet
// claimed; control and unknown tokens only with parse_special, user-defined
// tokens always; lstrip/rstrip tokens also swallow adjacent ASCII whitespace.
//
// llama.cpp searches the text once per special token; with thousands of
// control tokens (Gemma has 6000+) that is slow, so we find every occurrence
// of every special text in one pass over a trie and then replay the
// longest-first claiming on those occurrences, which gives the same result.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/vocab.h"

namespace kiln::tok {

struct Fragment {
    int32_t token;         // kNoToken: raw text
    uint32_t begin, end;   // raw text: byte range of the input
};

class SpecialMatcher {
public:
    explicit SpecialMatcher(const Vocab& vocab);

    void partition(const Vocab& vocab, std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

private:
    struct Node {
        int32_t token = -1;
        uint32_t edge_begin = 0, edge_end = 0;
    };
    struct Edge {
        uint8_t byte;
        int32_t child;
    };
    int32_t child(int32_t node, uint8_t byte) const;

    std::array<int32_t, 256> root_{};
    std::vector<Node> nodes_;
    std::vector<Edge> edges_;
    std::vector<int32_t> rank_;  // token id -> position in Vocab::special_tokens
};

}  // namespace kiln::tok
