// Unicode helpers for the tokenizers: UTF-8 coding with llama.cpp's leniency
// rules, general-category groups, whitespace, lower-casing and the first code
// point of NFD. Everything here classifies code points exactly the way
// llama.cpp does (see gen_unicode_data.py), because tokenization must match it
// bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::unicode {

// General-category group of a code point (one per code point). Unassigned code
// points are Control, as in llama.cpp's tables.
enum class Category : uint8_t {
    Undefined = 0,  // only for values beyond U+10FFFF
    Number = 1,
    Letter = 2,
    Separator = 3,
    Mark = 4,
    Punctuation = 5,
    Symbol = 6,
    Control = 7,
};

Category category(uint32_t cp);
bool is_whitespace(uint32_t cp);  // the White_Space property (25 code points)
uint32_t to_lower(uint32_t cp);   // first code point of the full lower-case mapping
uint32_t nfd_first(uint32_t cp);  // first code point of the canonical decomposition

constexpr uint32_t kReplacement = 0xFFFD;

// Length of a UTF-8 sequence judged by its first byte alone (continuation bytes
// count as 1), the rule llama.cpp's SPM/BPE symbol splitting uses.
inline size_t utf8_len(uint8_t lead) {
    static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return kLen[lead >> 4];
}

// Decodes one code point at `pos` and advances it. Lenient like llama.cpp: no
// overlong/surrogate checks; a malformed or truncated sequence yields
// kReplacement and advances by one byte. Values above U+10FFFF also yield
// kReplacement (consuming the whole sequence).
uint32_t decode_utf8(std::string_view s, size_t& pos);

void append_utf8(std::string& out, uint32_t cp);

// Decodes `text` into code points. Returns true when re-encoding them gives the
// input back byte for byte (no malformed, overlong or out-of-range sequences).
bool decode_all(std::string_view text, std::vector<uint32_t>& cps);

// Strict validation helper for streaming output: the length of the well-formed
// UTF-8 sequence starting at s[0], 0 if s is a valid but incomplete prefix of
// one, or -1 if s[0] can never start a well-formed sequence.
int utf8_complete_len(std::string_view s);

}  // namespace kiln::unicode
