#include "model/tokenizer/wpm.h"

#include <algorithm>
#include <string>

#include "model/tokenizer/unicode.h"

namespace kiln::tok {
namespace {

// BERT's "Chinese character" ranges (with HF's 0x2B920 typo kept, as llama.cpp does).
bool is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Greedy longest-match of one word; all or nothing.
void encode_word(const Vocab& vocab, const std::string& word, std::vector<int32_t>& out) {
    const size_t n = word.size();
    const size_t before = out.size();
    for (size_t i = 0; i < n; ++i) {
        bool matched = false;
        // Candidate ends are byte positions, as in llama.cpp; a cut inside a
        // character simply finds no token.
        for (size_t j = std::min(n, i + vocab.max_token_len + 1); j > i; --j) {
            const int32_t id = vocab.find(std::string_view(word).substr(i, j - i));
            if (id >= 0) {
                out.push_back(id);
                matched = true;
                i = j - 1;
                break;
            }
        }
        if (!matched) {
            out.resize(before);
            break;
        }
    }
    if (out.size() == before && vocab.unk != kNoToken) out.push_back(vocab.unk);
}

}  // namespace

void wpm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
    static constexpr std::string_view kWordStart = "\xE2\x96\x81";
    std::string word(kWordStart);
    const auto finish = [&] {
        if (word.size() > kWordStart.size()) encode_word(vocab, word, out);
        word.resize(kWordStart.size());
    };
    for (size_t pos = 0; pos < text.size();) {
        uint32_t cp = unicode::decode_utf8(text, pos);
        if (vocab.strip_accents) cp = unicode::nfd_first(cp);
        if (unicode::is_whitespace(cp)) {
            finish();
            continue;
        }
        const unicode::Category cat = unicode::category(cp);
        if (cp == 0 || cp == unicode::kReplacement || cat == unicode::Category::Control) continue;
        if (vocab.strip_accents && cat == unicode::Category::Mark) continue;
        const uint32_t out_cp = vocab.lowercase ? unicode::to_lower(cp) : cp;
        if (cat == unicode::Category::Punctuation || (cp < 0x7F && cat == unicode::Category::Symbol) || is_cjk(cp)) {
            finish();  // a single-character word of its own
            unicode::append_utf8(word, out_cp);
            finish();
        } else {
            unicode::append_utf8(word, out_cp);
        }
    }
    finish();
}

}  // namespace kiln::tok
