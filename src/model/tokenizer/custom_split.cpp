#include "model/tokenizer/custom_split.h"

#include "model/tokenizer/unicode.h"

namespace kiln::tok {
namespace {

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

// llama.cpp's Han ranges (CJK ideographs, extensions A-F, compatibility).
bool is_han(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0x2CEB0 && cp <= 0x2EBEF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// One piece [begin, end) being cut; positions outside it read as "nothing"
// (no category, not whitespace), as in llama.cpp's helpers.
struct Cursor {
    const std::vector<uint32_t>& cps;
    uint32_t begin, end;
    uint32_t prev_end;
    std::vector<std::pair<uint32_t, uint32_t>>& out;

    uint32_t cp(uint32_t p) const { return p >= begin && p < end ? cps[p] : kOutOfRange; }
    bool in(uint32_t p) const { return p >= begin && p < end; }
    bool letter(uint32_t p) const { return in(p) && unicode::category(cps[p]) == unicode::Category::Letter; }
    bool number(uint32_t p) const { return in(p) && unicode::category(cps[p]) == unicode::Category::Number; }
    bool space(uint32_t p) const { return in(p) && unicode::is_whitespace(cps[p]); }
    bool defined(uint32_t p) const { return in(p) && unicode::category(cps[p]) != unicode::Category::Undefined; }
    // Ends the current word at `e`; returns its length.
    uint32_t add(uint32_t e) {
        const uint32_t len = e - prev_end;
        if (len > 0) out.emplace_back(prev_end, e);
        prev_end = e;
        return len;
    }
};

bool is_contraction_letter(uint32_t c) { return c == 's' || c == 't' || c == 'm' || c == 'd'; }
bool is_contraction_pair(uint32_t a, uint32_t b) {
    return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l');
}

void split_kimi_k2(Cursor& c) {
    uint32_t pos = c.begin;
    while (pos < c.end) {
        const uint32_t cpt = c.cp(pos);
        // [\p{Han}]+
        if (is_han(cpt)) {
            while (is_han(c.cp(pos))) ++pos;
            c.add(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]? cased letters (Han excluded) + optional contraction
        const bool newline = cpt == '\r' || cpt == '\n';
        const bool lead_ok = !(newline || c.letter(pos) || c.number(pos));
        const bool letter_here = c.letter(pos) && !is_han(cpt);
        if (letter_here || (lead_ok && c.letter(pos + 1) && !is_han(c.cp(pos + 1)))) {
            bool leading = false;
            if (lead_ok) {
                leading = true;
                ++pos;
            }
            bool letters = false;
            while (c.letter(pos) && !is_han(c.cp(pos))) {
                letters = true;
                ++pos;
            }
            if (letters || (!leading && c.letter(pos) && !is_han(c.cp(pos)))) {
                if (!letters) ++pos;
                while (c.letter(pos) && !is_han(c.cp(pos))) ++pos;
                if (c.cp(pos) == '\'' && pos + 1 < c.end) {
                    const uint32_t n1 = unicode::to_lower(c.cp(pos + 1));
                    if (is_contraction_letter(n1)) {
                        pos += 2;
                    } else if (pos + 2 < c.end && is_contraction_pair(n1, unicode::to_lower(c.cp(pos + 2)))) {
                        pos += 3;
                    }
                }
                c.add(pos);
                continue;
            }
            if (leading) --pos;
        }
        // \p{N}{1,3}
        if (c.number(pos)) {
            uint32_t start = pos;
            while (c.number(pos)) {
                if (++pos - start >= 3) {
                    c.add(pos);
                    start = pos;
                }
            }
            c.add(pos);
            continue;
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n]*
        const uint32_t probe = cpt == ' ' ? pos + 1 : pos;
        const auto symbolish = [&](uint32_t p) { return !(c.space(p) || c.letter(p) || c.number(p)) && c.defined(p); };
        if (symbolish(probe)) {
            pos += cpt == ' ' ? 1 : 0;
            while (symbolish(pos)) ++pos;
            while (c.cp(pos) == '\r' || c.cp(pos) == '\n') ++pos;
            c.add(pos);
            continue;
        }
        // \s*[\r\n]+ | \s+(?!\S) | \s+
        uint32_t n_space = 0, after_newline = 0;
        while (c.space(pos + n_space)) {
            const uint32_t w = c.cp(pos + n_space);
            if (w == '\r' || w == '\n') after_newline = pos + n_space + 1;
            ++n_space;
        }
        if (after_newline > 0) {
            pos = after_newline;
            c.add(pos);
            continue;
        }
        if (n_space > 1 && c.cp(pos + n_space) != kOutOfRange) {
            pos += n_space - 1;
            c.add(pos);
            continue;
        }
        if (n_space > 0) {
            pos += n_space;
            c.add(pos);
            continue;
        }
        c.add(++pos);  // nothing matched: one character alone
    }
}

// Digit runs are cut into groups of three counted from the right; the text
// before a run joins its first group (llama.cpp's behaviour).
void split_afmoe_digits(Cursor& c) {
    uint32_t pos = c.begin;
    while (pos < c.end) {
        if (!c.number(pos)) {
            ++pos;
            continue;
        }
        const uint32_t start = pos;
        while (c.number(pos)) ++pos;
        const uint32_t count = pos - start;
        uint32_t cur = start;
        if (count % 3) {
            cur += count % 3;
            c.add(cur);
        }
        for (; cur < start + count; cur += 3) c.add(cur + 3);
    }
    if (c.prev_end < c.end) c.add(c.end);
}

}  // namespace

CustomSplit custom_split_for(std::string_view pattern) {
    if (pattern == "\\p{Han}+") return CustomSplit::KimiK2;
    if (pattern == "\\p{AFMoE_digits}") return CustomSplit::AfmoeDigits;
    return CustomSplit::None;
}

void custom_split(CustomSplit kind, const std::vector<uint32_t>& cps, const std::vector<std::pair<uint32_t, uint32_t>>& pieces,
                  std::vector<std::pair<uint32_t, uint32_t>>& out) {
    for (const auto& [b, e] : pieces) {
        Cursor c{cps, b, e, b, out};
        if (kind == CustomSplit::KimiK2) {
            split_kimi_k2(c);
        } else {
            split_afmoe_digits(c);
        }
    }
}

}  // namespace kiln::tok
