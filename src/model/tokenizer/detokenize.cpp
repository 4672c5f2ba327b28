// Token ids back to text: per-token pieces (byte tokens, U+2581 -> ' ',
// byte-level BPE decoding), llama.cpp's detokenize() with its leading-space
// removal and clean-up passes, and the UTF-8-safe stream decoder.
#include <cstdio>

#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/unicode.h"

namespace kiln {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

std::string unescape_spaces(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
            out += ' ';
            i += kSpaceMarker.size();
        } else {
            out += s[i++];
        }
    }
    return out;
}

// Byte-level BPE text -> bytes. A code point outside GPT-2's byte alphabet is
// reported inline the way llama.cpp does it.
std::string decode_byte_level(std::string_view text) {
    std::string out;
    for (size_t pos = 0; pos < text.size();) {
        const uint32_t cp = unicode::decode_utf8(text, pos);
        const int b = tok::unicode_to_byte(cp);
        if (b >= 0) {
            out += static_cast<char>(b);
            continue;
        }
        std::string utf8;
        unicode::append_utf8(utf8, cp);
        out += "[UNK_BYTE_0x";
        for (char c : utf8) {
            char hex[3];
            std::snprintf(hex, sizeof hex, "%02x", static_cast<uint8_t>(c));
            out += hex;
        }
        out.append(text);
        out += ']';
    }
    return out;
}

// "<0x0A>" -> '\n'
std::string byte_token_piece(std::string_view text) {
    if (text.size() < 5) return {};
    unsigned value = 0;
    for (char c : text.substr(3, 2)) {
        value <<= 4;
        if (c >= '0' && c <= '9') value |= unsigned(c - '0');
        else if (c >= 'A' && c <= 'F') value |= unsigned(c - 'A' + 10);
        else if (c >= 'a' && c <= 'f') value |= unsigned(c - 'a' + 10);
        else return {};
    }
    return std::string(1, static_cast<char>(value));
}

// llama.cpp's clean_up_tokenization_spaces, three passes over the bytes.
std::string clean_up_spaces(const std::string& s) {
    if (s.empty()) return s;
    // 1: drop a space before ? ! . ,
    std::string a;
    a.reserve(s.size());
    a += s[0];
    for (size_t i = 1; i < s.size(); ++i) {
        const char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
        a += x;
    }
    // 2: " ' " -> "'" (the space after is skipped, and the next step then
    // sees no space before it)
    std::string b;
    b.reserve(a.size());
    b += a[0];
    bool skipped = false;
    for (size_t i = 1; i < a.size(); ++i) {
        const char x = a[i];
        const char prev = skipped ? '\0' : a[i - 1];
        skipped = false;
        if (x == '\'' && i + 1 < a.size() && prev == ' ' && a[i + 1] == ' ') {
            b.pop_back();
            ++i;
            skipped = true;
        }
        b += x;
    }
    // 3: " 's", " 'm", " 're", " 've" lose their space
    std::string c;
    c.reserve(b.size());
    c += b[0];
    for (size_t i = 1; i < b.size(); ++i) {
        const char x = b[i];
        if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
            const char x1 = b[i + 1];
            if (x1 == 's' || x1 == 'm') {
                c.pop_back();
            } else if (x1 != 't' && x1 != 'd' && i + 2 < b.size()) {
                const char x2 = b[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) c.pop_back();
            }
        }
        c += x;
    }
    return c;
}

}  // namespace

void Tokenizer::Impl::build_pieces() {
    const tok::Vocab& v = vocab;
    pieces.resize(v.n_tokens());
    for (int32_t id = 0; id < v.n_tokens(); ++id) {
        const std::string_view text = v.text(id);
        std::string& piece = pieces[id];
        if (v.has(id, token_attr::Unknown | token_attr::Control | token_attr::UserDefined)) {
            piece = text;
        } else if (v.has(id, token_attr::Normal)) {
            if (v.type == VocabType::BPE && !v.escape_whitespace) {
                piece = decode_byte_level(text);
            } else {
                piece = unescape_spaces(text);
            }
        } else if (v.has(id, token_attr::Byte) && v.type != VocabType::WPM) {
            piece = byte_token_piece(text);
        }
        // Unused and undefined tokens have no text (llama.cpp prints nothing).
    }
}

const std::string& Tokenizer::Impl::piece(int32_t id, bool special) const {
    static const std::string kEmpty;
    if (!vocab.valid(id)) {
        throw TokenizerError("token id " + std::to_string(id) + " is out of range (vocabulary of " +
                             std::to_string(vocab.n_tokens()) + ")");
    }
    if (!special && vocab.has(id, token_attr::Unknown | token_attr::Control)) return kEmpty;
    return pieces[id];
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const { return impl_->piece(id, special); }

std::string Tokenizer::detokenize(std::span<const int32_t> ids, const DetokenizeOptions& opts) const {
    const tok::Vocab& v = impl_->vocab;
    bool remove_space = opts.remove_leading_space.value_or(v.add_space_prefix);
    if (opts.remove_special && v.add_bos && !ids.empty() && ids.front() == v.bos) {
        remove_space = false;  // llama.cpp keeps the space when it drops BOS
        ids = ids.subspan(1);
    }
    if (opts.remove_special && v.add_eos && !ids.empty() && ids.back() == v.eos) ids = ids.first(ids.size() - 1);

    std::string text;
    for (int32_t id : ids) {
        std::string_view piece = impl_->piece(id, opts.unparse_special);
        if (remove_space && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
        remove_space = false;  // only the first token, even if it printed nothing
        text += piece;
    }
    return opts.clean_spaces.value_or(v.clean_spaces) ? clean_up_spaces(text) : text;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, DetokenizeOptions opts) : impl_(tok.impl_.get()), opts_(opts) { reset(); }

void StreamDecoder::reset() {
    pending_.clear();
    first_ = true;
    strip_space_ = opts_.remove_leading_space.value_or(impl_->vocab.add_space_prefix);
}

std::string StreamDecoder::push(int32_t id) {
    const tok::Vocab& v = impl_->vocab;
    const bool first = first_;
    first_ = false;
    if (opts_.remove_special) {
        // Same rules as detokenize(): a leading BOS goes (and the space after
        // it stays); EOS goes too, since we cannot know it is the last token.
        if (first && v.add_bos && id == v.bos) {
            strip_space_ = false;
            return {};
        }
        if (v.add_eos && id == v.eos) return {};
    }
    std::string_view piece = impl_->piece(id, opts_.unparse_special);
    if (strip_space_ && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    strip_space_ = false;
    pending_ += piece;

    // Emit every complete character; hold back a valid but unfinished one.
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
        const int len = unicode::utf8_complete_len(std::string_view(pending_).substr(i));
        if (len == 0) break;
        if (len < 0) {
            out += "\xEF\xBF\xBD";  // can never become a character
            ++i;
        } else {
            out.append(pending_, i, static_cast<size_t>(len));
            i += static_cast<size_t>(len);
        }
    }
    pending_.erase(0, i);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out = pending_.empty() ? std::string() : std::string("\xEF\xBF\xBD");
    pending_.clear();
    return out;
}

}  // namespace kiln
