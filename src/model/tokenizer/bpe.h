// Byte-level BPE (tokenizer.ggml.model = "gpt2"): merges one pre-tokenized
// word at a time, lowest merge rank first, leftmost first among equals.
//
// Merging works on symbol ids instead of strings: every string that occurs in
// the merge list gets an id (the token id when it is a token, an extra id
// otherwise), so a merge is one hash lookup on an id pair.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/piece_map.h"
#include "model/tokenizer/vocab.h"
#include "model/tokenizer/word_cache.h"

namespace kiln::gguf {
class File;
}

namespace kiln::tok {

// GPT-2's reversible byte <-> printable code point mapping.
const std::array<std::string, 256>& byte_to_unicode();
int unicode_to_byte(uint32_t cp);  // -1 if cp is not in the mapping

class BpeModel {
public:
    // Reads tokenizer.ggml.merges. Throws TokenizerError.
    BpeModel(const gguf::File& file, const Vocab& vocab);

    struct Workspace {
        struct Sym {
            int32_t id;  // symbol id, -1 if the piece is no symbol at all
            int32_t prev, next;
            uint32_t begin, len;  // bytes of the raw word
        };
        struct Cand {
            int32_t rank, left, right, left_id, right_id, result;
        };
        std::vector<Sym> syms;
        std::vector<Cand> heap;
        std::vector<int32_t> pair_rank, pair_result;
        std::string encoded;
        WordCache cache;  // filled by the caller, per tokenize() call
    };

    // Appends the tokens of one word (raw UTF-8 bytes).
    void encode_word(const Vocab& vocab, std::string_view word, Workspace& ws, std::vector<int32_t>& out) const;

private:
    struct Merge {
        uint64_t key;  // (left << 32) | right, ~0 when the slot is empty
        int32_t rank;
        int32_t result;
    };
    static constexpr size_t kLinearMax = 24;  // words up to this many symbols merge by rescanning

    void merge_linear(Workspace& ws) const;
    void merge_heap(Workspace& ws) const;
    int32_t symbol(const Vocab& vocab, std::string_view text) const;  // -1 if unknown
    const Merge* find_merge(int32_t left, int32_t right) const;
    void emit_fallback(const Vocab& vocab, std::string_view raw, std::vector<int32_t>& out) const;

    TextPool extra_texts_;  // merge strings that are not tokens; id = n_vocab + index
    PieceMap extra_index_;
    std::vector<Merge> merges_;
    size_t merge_mask_ = 0;
    std::array<int32_t, 256> byte_symbol_{};  // byte-level: symbol of each raw byte
};

}  // namespace kiln::tok
