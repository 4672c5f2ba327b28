#include "model/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "model/tokenizer/custom_split.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace kiln::tok {
namespace {

// Bytes standing for a non-ASCII code point's category in the collapsed text
// (llama.cpp's choice; the exact values only have to be distinct and >= 0x80).
constexpr uint8_t kCollapsedOther = 0xD0;  // control, unassigned, non-space separators
constexpr uint8_t kCollapsedNumber = 0xD1;
constexpr uint8_t kCollapsedLetter = 0xD2;
constexpr uint8_t kCollapsedPunct = 0xD3;
constexpr uint8_t kCollapsedMark = 0xD4;
constexpr uint8_t kCollapsedSymbol = 0xD5;
constexpr uint8_t kCollapsedSpace = 0x0B;

uint8_t collapse(uint32_t cp) {
    if (cp < 0x80) return static_cast<uint8_t>(cp);
    if (unicode::is_whitespace(cp)) return kCollapsedSpace;
    switch (unicode::category(cp)) {
        case unicode::Category::Number: return kCollapsedNumber;
        case unicode::Category::Letter: return kCollapsedLetter;
        case unicode::Category::Punctuation: return kCollapsedPunct;
        case unicode::Category::Mark: return kCollapsedMark;
        case unicode::Category::Symbol: return kCollapsedSymbol;
        default: return kCollapsedOther;
    }
}

// Class body replacing \p{X}: the collapsed byte plus the ASCII members the
// category has in llama.cpp's tables ('~' is missing from \p{S} there).
const char* category_class(std::string_view name) {
    if (name == "N") return "\\xD10-9";
    if (name == "L" || name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" || name == "Lo") {
        return "\\xD2A-Za-z";
    }
    if (name == "P") return "\\xD3!-#%-*,-/:;?@\\[-\\]_{}";
    if (name == "M") return "\\xD4";
    if (name == "S") return "\\xD5$+<->^`|";
    return nullptr;
}

bool uses_categories(std::string_view re) {
    for (const char* p : {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}", "\\p{Lu}", "\\p{Ll}", "\\p{Lt}",
                          "\\p{Lm}", "\\p{Lo}"}) {
        if (re.find(p) != std::string_view::npos) return true;
    }
    return false;
}

// Rewrites a pattern for the collapsed text. Escapes are copied untouched;
// \p{X} becomes [..] outside a class and its body inside one.
std::string collapse_pattern(std::string_view re, const std::string& what) {
    std::string out;
    bool inside = false;
    for (size_t i = 0; i < re.size(); ++i) {
        const char c = re[i];
        if (c == '\\' && i + 1 < re.size()) {
            if (re[i + 1] == 'p' && i + 2 < re.size() && re[i + 2] == '{') {
                const size_t close = re.find('}', i + 3);
                const char* body = close == std::string_view::npos ? nullptr : category_class(re.substr(i + 3, close - i - 3));
                if (!body) throw TokenizerError(what + ": unsupported category in pre-tokenizer regex '" + std::string(re) + "'");
                if (!inside) out += '[';
                out += body;
                if (!inside) out += ']';
                i = close;
                continue;
            }
            if (re[i + 1] == 'x' && i + 2 < re.size() && re[i + 2] == '{') {
                // llama.cpp refuses non-ASCII characters next to categories.
                throw TokenizerError(what + ": pre-tokenizer regex mixes categories and non-ASCII: '" + std::string(re) + "'");
            }
            out += c;
            out += re[i + 1];
            ++i;
            continue;
        }
        if (c == '[' && !inside) {
            inside = true;
        } else if (c == ']' && inside) {
            inside = false;
        }
        out += c;
    }
    return out;
}

}  // namespace

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    bool jit = false;
    bool collapsed = false;  // runs on Workspace::collapsed (else on utf_subject)
    CustomSplit custom = CustomSplit::None;  // hand-written step instead of a regex

    Compiled() = default;
    Compiled(Compiled&& o) noexcept : code(o.code), jit(o.jit), collapsed(o.collapsed), custom(o.custom) { o.code = nullptr; }
    Compiled& operator=(Compiled&& o) noexcept {
        std::swap(code, o.code);
        jit = o.jit;
        collapsed = o.collapsed;
        custom = o.custom;
        return *this;
    }
    ~Compiled() {
        if (code) pcre2_code_free(code);
    }
};

PreTokenizer::PreTokenizer(std::span<const std::string_view> regexes, const std::string& what) {
    for (std::string_view re : regexes) {
        Compiled c;
        c.custom = custom_split_for(re);
        if (c.custom != CustomSplit::None) {
            regexes_.push_back(std::move(c));
            continue;
        }
        c.collapsed = uses_categories(re);
        const std::string pattern = c.collapsed ? collapse_pattern(re, what) : std::string(re);
        // No \s/\d/\w Unicode semantics: like std::regex, they are ASCII-only;
        // non-ASCII whitespace reaches the regex as '\v'. '$' means end of piece.
        uint32_t options = PCRE2_DOLLAR_ENDONLY | PCRE2_NO_AUTO_CAPTURE;
        if (!c.collapsed) options |= PCRE2_UTF;
        int err = 0;
        PCRE2_SIZE err_off = 0;
        c.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &err_off, nullptr);
        if (!c.code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            throw TokenizerError(what + ": pre-tokenizer regex '" + std::string(re) + "' does not compile at offset " +
                                 std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
        }
        c.jit = pcre2_jit_compile(c.code, PCRE2_JIT_COMPLETE) == 0;
        (c.collapsed ? need_collapsed_ : need_utf_) = true;
        regexes_.push_back(std::move(c));
    }
}

// Long matches (e.g. a run of 100k letters) need more than PCRE2's default
// 32 KiB JIT stack; it grows on demand up to this.
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 256 * 1024 * 1024;

struct PreTokenizer::MatchState {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;
    ~MatchState() {
        if (data) pcre2_match_data_free(data);
        if (context) pcre2_match_context_free(context);
        if (stack) pcre2_jit_stack_free(stack);
    }
};

void PreTokenizer::MatchStateDeleter::operator()(MatchState* m) const { delete m; }

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view input, Workspace& ws) const {
    ws.words.clear();
    const bool exact = unicode::decode_all(input, ws.cps);
    const size_t n = ws.cps.size();
    if (exact) {
        ws.text_view = input;
    } else {
        ws.normalized.clear();
        for (uint32_t cp : ws.cps) unicode::append_utf8(ws.normalized, cp);
        ws.text_view = ws.normalized;
    }
    ws.cp_offset.resize(n + 1);
    {
        uint32_t off = 0;
        for (size_t i = 0; i < n; ++i) {
            ws.cp_offset[i] = off;
            const uint32_t cp = ws.cps[i];
            off += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        }
        ws.cp_offset[n] = off;
    }
    if (need_collapsed_) {
        ws.collapsed.resize(n);
        for (size_t i = 0; i < n; ++i) ws.collapsed[i] = static_cast<char>(collapse(ws.cps[i]));
    }
    if (need_utf_) {
        ws.utf_subject.clear();
        ws.utf_offset.resize(n + 1);
        for (size_t i = 0; i < n; ++i) {
            ws.utf_offset[i] = static_cast<uint32_t>(ws.utf_subject.size());
            uint32_t cp = ws.cps[i];
            if (cp >= 0x80 && unicode::is_whitespace(cp)) cp = '\v';
            // Lone surrogates are not UTF-8 for PCRE2; no pattern names them,
            // so U+FFFD (equally unnamed) matches the same way.
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = unicode::kReplacement;
            unicode::append_utf8(ws.utf_subject, cp);
        }
        ws.utf_offset[n] = static_cast<uint32_t>(ws.utf_subject.size());
    }

    ws.pieces.assign(1, {0u, static_cast<uint32_t>(n)});
    if (!ws.match) {
        ws.match.reset(new MatchState);
        ws.match->data = pcre2_match_data_create(1, nullptr);
        ws.match->context = pcre2_match_context_create(nullptr);
        ws.match->stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
        if (!ws.match->data || !ws.match->context) throw TokenizerError("pre-tokenizer: out of memory");
        if (ws.match->stack) pcre2_jit_stack_assign(ws.match->context, nullptr, ws.match->stack);
    }
    pcre2_match_data* md = ws.match->data;
    pcre2_match_context* mc = ws.match->context;

    for (const Compiled& re : regexes_) {
        ws.next.clear();
        if (re.custom != CustomSplit::None) {
            custom_split(re.custom, ws.cps, ws.pieces, ws.next);
            std::swap(ws.pieces, ws.next);
            continue;
        }
        for (const auto& [pb, pe] : ws.pieces) {
            if (pb == pe) continue;
            // Subject = this piece only, so look-arounds and '$' stop at its
            // edges, as with llama.cpp's per-piece std::regex_iterator.
            const char* subject;
            size_t len;
            if (re.collapsed) {
                subject = ws.collapsed.data() + pb;
                len = pe - pb;
            } else {
                subject = ws.utf_subject.data() + ws.utf_offset[pb];
                len = ws.utf_offset[pe] - ws.utf_offset[pb];
            }
            // Converts a subject byte offset back to a code point index.
            const auto to_cp = [&, pb = pb, pe = pe](size_t off) -> uint32_t {
                if (re.collapsed) return pb + static_cast<uint32_t>(off);
                const uint32_t abs = ws.utf_offset[pb] + static_cast<uint32_t>(off);
                return static_cast<uint32_t>(std::lower_bound(ws.utf_offset.begin() + pb, ws.utf_offset.begin() + pe + 1, abs) -
                                             ws.utf_offset.begin());
            };
            size_t start = 0, last_end = 0;
            uint32_t opts = 0;
            while (start <= len) {
                // The anchored retry after an empty match is rare and JIT code
                // cannot anchor at match time; pcre2_match interprets it, as it
                // does a match too deep for the JIT stack.
                const auto subj = reinterpret_cast<PCRE2_SPTR>(subject);
                int rc = re.jit && opts == 0 ? pcre2_jit_match(re.code, subj, len, start, 0, md, mc) : PCRE2_ERROR_JIT_BADOPTION;
                if (rc == PCRE2_ERROR_JIT_BADOPTION || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
                    rc = pcre2_match(re.code, subj, len, start, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, mc);
                }
                if (rc == PCRE2_ERROR_NOMATCH) {
                    if (opts == 0) break;
                    // No non-empty match where the empty one was: move on one
                    // character, as std::regex_iterator does.
                    ++start;
                    if (!re.collapsed) {
                        while (start < len && (static_cast<uint8_t>(subject[start]) & 0xC0) == 0x80) ++start;
                    }
                    opts = 0;
                    continue;
                }
                if (rc < 0) throw TokenizerError("pre-tokenizer: regex match failed (PCRE2 error " + std::to_string(rc) + ")");
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                const size_t ms = ov[0], me = ov[1];
                // Text the regex skipped stays a word of its own.
                if (ms > last_end) ws.next.emplace_back(to_cp(last_end), to_cp(ms));
                if (me > ms) ws.next.emplace_back(to_cp(ms), to_cp(me));
                last_end = std::max(last_end, me);
                start = me;
                opts = me == ms ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
            }
            if (last_end < len) ws.next.emplace_back(to_cp(last_end), pe);
        }
        std::swap(ws.pieces, ws.next);
    }

    ws.words.reserve(ws.pieces.size());
    for (const auto& [b, e] : ws.pieces) {
        if (b < e) ws.words.emplace_back(ws.cp_offset[b], ws.cp_offset[e]);
    }
}

}  // namespace kiln::tok
