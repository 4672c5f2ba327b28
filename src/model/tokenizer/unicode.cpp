#include "model/tokenizer/unicode.h"

#include <algorithm>
#include <array>
#include <memory>

#include "model/tokenizer/unicode_data.h"

namespace kiln::unicode {
namespace {

constexpr uint32_t kMaxCodepoint = 0x110000;
constexpr uint32_t kBlockBits = 8;
constexpr uint32_t kBlockSize = 1u << kBlockBits;
constexpr uint32_t kBlocks = kMaxCodepoint / kBlockSize;
constexpr uint8_t kWhitespaceBit = 0x08;

// The White_Space property; llama.cpp's whitespace set is exactly this list.
constexpr uint32_t kWhitespace[] = {
    0x0009, 0x000A, 0x000B, 0x000C, 0x000D, 0x0020, 0x0085, 0x00A0, 0x1680,
    0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
    0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
};

// Two-stage lookup (block index -> 256-entry block) built once from the range
// list: the range list is compact in source, the table is fast (two loads per
// code point) in the pre-tokenizer's inner loop. Each byte is the category in
// the low bits plus kWhitespaceBit.
struct PropertyTable {
    std::array<uint16_t, kBlocks> block_index{};
    std::vector<uint8_t> blocks;

    PropertyTable() {
        std::vector<uint8_t> flat(kMaxCodepoint);
        for (size_t i = 0; i < data::kCategoryRangeCount; ++i) {
            const uint32_t first = data::kCategoryRanges[i].first;
            const uint32_t end = i + 1 < data::kCategoryRangeCount ? data::kCategoryRanges[i + 1].first : kMaxCodepoint;
            std::fill(flat.begin() + first, flat.begin() + end, data::kCategoryRanges[i].category);
        }
        for (uint32_t cp : kWhitespace) flat[cp] |= kWhitespaceBit;
        for (uint32_t b = 0; b < kBlocks; ++b) {
            const uint8_t* src = flat.data() + size_t(b) * kBlockSize;
            size_t found = blocks.size();
            for (size_t off = 0; off < blocks.size(); off += kBlockSize) {
                if (std::equal(src, src + kBlockSize, blocks.data() + off)) {
                    found = off;
                    break;
                }
            }
            if (found == blocks.size()) blocks.insert(blocks.end(), src, src + kBlockSize);
            block_index[b] = static_cast<uint16_t>(found / kBlockSize);
        }
    }

    uint8_t get(uint32_t cp) const {
        if (cp >= kMaxCodepoint) return 0;
        return blocks[size_t(block_index[cp >> kBlockBits]) * kBlockSize + (cp & (kBlockSize - 1))];
    }
};

const PropertyTable& properties() {
    static const PropertyTable table;  // immutable after construction (thread-safe init)
    return table;
}

}  // namespace

Category category(uint32_t cp) {
    return static_cast<Category>(properties().get(cp) & 0x07);
}

bool is_whitespace(uint32_t cp) {
    return (properties().get(cp) & kWhitespaceBit) != 0;
}

uint32_t to_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    const data::LowerRun* begin = data::kLowerRuns;
    const data::LowerRun* end = data::kLowerRuns + data::kLowerRunCount;
    const data::LowerRun* it = std::upper_bound(begin, end, cp, [](uint32_t v, const data::LowerRun& r) { return v < r.first; });
    if (it == begin) return cp;
    --it;
    if (cp > it->last || (cp - it->first) % it->step != 0) return cp;
    return static_cast<uint32_t>(static_cast<int64_t>(cp) + it->delta);
}

uint32_t nfd_first(uint32_t cp) {
    if (cp < 0xC0) return cp;
    const data::NfdRange* begin = data::kNfdRanges;
    const data::NfdRange* end = data::kNfdRanges + data::kNfdRangeCount;
    const data::NfdRange* it = std::upper_bound(begin, end, cp, [](uint32_t v, const data::NfdRange& r) { return v < r.first; });
    if (it == begin) return cp;
    --it;
    return cp <= it->last ? it->target : cp;
}

uint32_t decode_utf8(std::string_view s, size_t& pos) {
    const auto at = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
    const uint8_t b0 = at(pos);
    if (!(b0 & 0x80)) {
        pos += 1;
        return b0;
    }
    const auto cont = [&](size_t i) { return i < s.size() && (at(i) & 0xC0) == 0x80; };
    if ((b0 & 0xE0) == 0xC0 && cont(pos + 1)) {
        const uint32_t cp = ((b0 & 0x1Fu) << 6) | (at(pos + 1) & 0x3Fu);
        pos += 2;
        return cp;
    }
    if ((b0 & 0xF0) == 0xE0 && cont(pos + 1) && cont(pos + 2)) {
        const uint32_t cp = ((b0 & 0x0Fu) << 12) | ((at(pos + 1) & 0x3Fu) << 6) | (at(pos + 2) & 0x3Fu);
        pos += 3;
        return cp;
    }
    if ((b0 & 0xF8) == 0xF0 && cont(pos + 1) && cont(pos + 2) && cont(pos + 3)) {
        const uint32_t cp = ((b0 & 0x07u) << 18) | ((at(pos + 1) & 0x3Fu) << 12) | ((at(pos + 2) & 0x3Fu) << 6) |
                            (at(pos + 3) & 0x3Fu);
        pos += 4;
        return cp < kMaxCodepoint ? cp : kReplacement;
    }
    pos += 1;
    return kReplacement;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool decode_all(std::string_view text, std::vector<uint32_t>& cps) {
    cps.clear();
    cps.reserve(text.size());
    bool exact = true;
    size_t pos = 0;
    while (pos < text.size()) {
        const uint8_t b0 = static_cast<uint8_t>(text[pos]);
        if (b0 < 0x80) {  // ASCII fast path
            cps.push_back(b0);
            ++pos;
            continue;
        }
        const size_t start = pos;
        const uint32_t cp = decode_utf8(text, pos);
        cps.push_back(cp);
        if (exact) {
            const size_t enc = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (enc != pos - start || (cp == kReplacement && text.substr(start, 3) != "\xEF\xBF\xBD")) exact = false;
        }
    }
    return exact;
}

int utf8_complete_len(std::string_view s) {
    if (s.empty()) return 0;
    const uint8_t b0 = static_cast<uint8_t>(s[0]);
    if (b0 < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i < need; ++i) {
        if (static_cast<size_t>(i) >= s.size()) return 0;
        const uint8_t b = static_cast<uint8_t>(s[i]);
        const uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return -1;
    }
    return need;
}

}  // namespace kiln::unicode
