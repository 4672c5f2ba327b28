// Regex pre-tokenizer for byte-level BPE: splits a text into the words that
// BPE then merges independently, exactly as llama.cpp's unicode_regex_split.
//
// llama.cpp runs each regex with std::regex on a "collapsed" copy of the text
// in which every non-ASCII code point is replaced by one byte standing for its
// category (0x0B for non-ASCII whitespace), and \p{..} in the pattern by that
// byte plus the ASCII members of the category. Regexes without \p{..} run on
// the code points themselves (non-ASCII whitespace again turned into 0x0B).
// We do the same with PCRE2, which reproduces llama.cpp's quirks for free
// (\p{S} lacks '~'; \p{Lu} and friends mean any letter).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::tok {

class PreTokenizer {
public:
    // Compiles the chain (JIT where available). Throws TokenizerError naming
    // `what` (file and key) if a pattern does not compile.
    PreTokenizer(std::span<const std::string_view> regexes, const std::string& what);
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;
    ~PreTokenizer();

    // PCRE2 match data and JIT stack (opaque here).
    struct MatchState;
    struct MatchStateDeleter {
        void operator()(MatchState* m) const;
    };

    // Reusable buffers for split(); one per thread.
    struct Workspace {
        std::unique_ptr<MatchState, MatchStateDeleter> match;
        std::vector<uint32_t> cps;
        std::vector<uint32_t> cp_offset;        // byte offset of each code point in text()
        std::string normalized;                 // the input re-encoded, when that changes it
        std::string collapsed;                  // one byte per code point
        std::string utf_subject;                // code points with non-ASCII whitespace -> '\v'
        std::vector<uint32_t> utf_offset;       // byte offset of each code point in utf_subject
        std::vector<std::pair<uint32_t, uint32_t>> pieces, next;  // code point ranges
        std::vector<std::pair<uint32_t, uint32_t>> words;         // byte ranges in text()
        std::string_view text_view;
        std::string_view text() const { return text_view; }
    };

    // Splits `input` into words (byte ranges of ws.text(), which is `input` or,
    // if `input` is not valid UTF-8, its re-encoding with U+FFFD for bad bytes,
    // as llama.cpp does).
    void split(std::string_view input, Workspace& ws) const;

private:
    struct Compiled;
    std::vector<Compiled> regexes_;
    bool need_collapsed_ = false;
    bool need_utf_ = false;
};

}  // namespace kiln::tok
