// Jinja lexer (see lexer.h). The states mirror jinja2's: root text, block tag,
// variable tag, comment and raw; whitespace handling follows jinja2 3.1.
#include "model/jinja/lexer.h"

#include <cctype>

#include "model/jinja/value.h"

namespace kiln::jinja {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Length of the Python-whitespace code point at s[i] (0 if none).
std::size_t ws_len(std::string_view s, std::size_t i) {
  if (i >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return (is_ws(s[i]) || (c >= 0x1C && c <= 0x1F)) ? 1 : 0;
  std::size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) return 0;
  std::u32string u = utf8_decode(s.substr(i, n));
  return (u.size() == 1 && py_isspace(u[0])) ? n : 0;
}

std::size_t skip_ws(std::string_view s, std::size_t i) {
  while (std::size_t n = ws_len(s, i)) i += n;
  return i;
}

// Python str.rstrip() on UTF-8 text.
std::string_view rstrip_view(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (ws_len(s, start) != end - start) break;
    end = start;
  }
  return s.substr(0, end);
}

bool all_ws(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t n = ws_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

bool is_name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool is_name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes a string literal body the way Python's unicode-escape codec does.
std::string unescape(std::string_view s, int line) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c != '\\' || i + 1 >= s.size()) {
      out.push_back(c);
      continue;
    }
    char e = s[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (std::size_t k = 0; k < n; ++k) {
          int h = i + 1 + k < s.size() ? hex_val(s[i + 1 + k]) : -1;
          if (h < 0) throw Error(Error::Kind::Syntax, "truncated \\" + std::string(1, e) + " escape in string literal", line);
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) throw Error(Error::Kind::Syntax, "illegal Unicode character in string literal", line);
        i += n;
        utf8_append(out, cp);
        break;
      }
      case 'N':
        throw Error(Error::Kind::Unsupported, "\\N{...} escapes in string literals are not supported", line);
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<char32_t>(s[++i] - '0');
          utf8_append(out, cp);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                  "(",  ")",  "{",  "}",  ">",  "<",  "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  Lexer(std::string_view src, const LexerOptions& opt) : opt_(opt) {
    // Normalise newlines to \n and drop one trailing newline (jinja2 default).
    src_.reserve(src.size());
    for (std::size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_.push_back(src[i]);
      }
    }
    if (!opt_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    std::string_view s = src_;
    bool line_starting = true;
    while (pos_ < s.size()) {
      // Find the next tag opener.
      std::size_t p = pos_;
      char kind = 0;
      while (true) {
        p = s.find('{', p);
        if (p == std::string_view::npos || p + 1 >= s.size()) {
          p = std::string_view::npos;
          break;
        }
        char n = s[p + 1];
        if (n == '%' || n == '{' || n == '#') {
          kind = n;
          break;
        }
        ++p;
      }
      if (p == std::string_view::npos) {
        emit_data(s.substr(pos_));
        pos_ = s.size();
        break;
      }
      std::string_view text = s.substr(pos_, p - pos_);
      std::size_t q = p + 2;
      char sign = 0;
      if (q < s.size() && (s[q] == '-' || s[q] == '+')) sign = s[q++];
      // Raw block?
      bool raw = false;
      std::size_t raw_body = 0;
      if (kind == '%') {
        std::size_t r = skip_ws(s, q);
        if (s.substr(r, 3) == "raw") {
          r = skip_ws(s, r + 3);
          if (s.substr(r, 3) == "-%}") {
            raw = true;
            raw_body = skip_ws(s, r + 3);
          } else if (s.substr(r, 2) == "%}") {
            raw = true;
            raw_body = r + 2;
          }
        }
      }
      emit_data(strip_text(text, sign, kind == '{', line_starting));
      if (raw) {
        pos_ = raw_body;
        line_starting = lex_raw(raw_body > 0 && s[raw_body - 1] == '\n');
        continue;
      }
      if (kind == '#') {
        pos_ = q;
        line_starting = lex_comment();
        continue;
      }
      advance_to(p);
      push(kind == '%' ? TokenType::BlockBegin : TokenType::VarBegin, "");
      pos_ = q;
      line_starting = lex_tag(kind == '%');
    }
    advance_to(pos_);
    push(TokenType::Eof, "");
    return std::move(tokens_);
  }

 private:
  // Applies OptionalLStrip to the text before a tag.
  std::string_view strip_text(std::string_view text, char sign, bool is_variable, bool line_starting) {
    if (sign == '-') return rstrip_view(text);
    if (sign != '+' && opt_.lstrip_blocks && !is_variable) {
      std::size_t nl = text.rfind('\n');
      std::size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && all_ws(text.substr(l_pos))) return text.substr(0, l_pos);
    }
    return text;
  }

  void emit_data(std::string_view text) {
    advance_to(pos_);
    if (!text.empty()) push(TokenType::Data, std::string(text));
  }

  void advance_to(std::size_t p) {
    for (; line_pos_ < p && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
  }

  Token& push(TokenType t, std::string text) {
    Token tok;
    tok.type = t;
    tok.text = std::move(text);
    tok.line = line_;
    tokens_.push_back(std::move(tok));
    return tokens_.back();
  }

  [[noreturn]] void fail(const std::string& msg) {
    advance_to(pos_);
    throw Error(Error::Kind::Syntax, msg, line_);
  }

  // Returns whether the consumed end marker ended with a newline.
  bool lex_comment() {
    std::string_view s = src_;
    for (std::size_t k = pos_; k < s.size(); ++k) {
      if (s.substr(k, 3) == "+#}") {
        pos_ = k + 3;
        return false;
      }
      if (s.substr(k, 3) == "-#}") {
        std::size_t e = skip_ws(s, k + 3);
        bool nl = e > k + 3 && s[e - 1] == '\n';
        pos_ = e;
        return nl;
      }
      if (s.substr(k, 2) == "#}") {
        pos_ = k + 2;
        if (opt_.trim_blocks && pos_ < s.size() && s[pos_] == '\n') {
          ++pos_;
          return true;
        }
        return false;
      }
    }
    fail("Missing end of comment tag");
  }

  bool lex_raw(bool line_starting) {
    std::string_view s = src_;
    for (std::size_t k = pos_; k + 1 < s.size(); ++k) {
      if (s[k] != '{' || s[k + 1] != '%') continue;
      std::size_t q = k + 2;
      char sign = 0;
      if (q < s.size() && (s[q] == '-' || s[q] == '+')) sign = s[q++];
      q = skip_ws(s, q);
      if (s.substr(q, 6) != "endraw") continue;
      q = skip_ws(s, q + 6);
      std::size_t end;
      bool nl = false;
      if (s.substr(q, 3) == "+%}") {
        end = q + 3;
      } else if (s.substr(q, 3) == "-%}") {
        end = skip_ws(s, q + 3);
        nl = end > q + 3 && s[end - 1] == '\n';
      } else if (s.substr(q, 2) == "%}") {
        end = q + 2;
        if (opt_.trim_blocks && end < s.size() && s[end] == '\n') {
          ++end;
          nl = true;
        }
      } else {
        continue;
      }
      std::string_view text = s.substr(pos_, k - pos_);
      // The body of a raw block is stripped like text before a block tag.
      emit_data(strip_text(text, sign, false, line_starting));
      pos_ = end;
      return nl;
    }
    fail("Missing end of raw directive");
  }

  bool lex_tag(bool block) {
    std::string_view s = src_;
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s.size()) return false;  // parser reports the missing end
      if (balance.empty()) {
        if (block) {
          if (s.substr(pos_, 3) == "+%}") {
            advance_to(pos_);
            push(TokenType::BlockEnd, "");
            pos_ += 3;
            return false;
          }
          if (s.substr(pos_, 3) == "-%}") {
            advance_to(pos_);
            push(TokenType::BlockEnd, "");
            std::size_t e = skip_ws(s, pos_ + 3);
            bool nl = e > pos_ + 3 && s[e - 1] == '\n';
            pos_ = e;
            return nl;
          }
          if (s.substr(pos_, 2) == "%}") {
            advance_to(pos_);
            push(TokenType::BlockEnd, "");
            pos_ += 2;
            if (opt_.trim_blocks && pos_ < s.size() && s[pos_] == '\n') {
              ++pos_;
              return true;
            }
            return false;
          }
        } else {
          if (s.substr(pos_, 3) == "-}}") {
            advance_to(pos_);
            push(TokenType::VarEnd, "");
            std::size_t e = skip_ws(s, pos_ + 3);
            bool nl = e > pos_ + 3 && s[e - 1] == '\n';
            pos_ = e;
            return nl;
          }
          if (s.substr(pos_, 2) == "}}") {
            advance_to(pos_);
            push(TokenType::VarEnd, "");
            pos_ += 2;
            return false;
          }
        }
      }
      if (std::size_t e = skip_ws(s, pos_); e > pos_) {
        pos_ = e;
        continue;
      }
      advance_to(pos_);
      if (lex_number()) continue;
      unsigned char c = static_cast<unsigned char>(s[pos_]);
      if (is_name_start(c)) {
        std::size_t e = pos_ + 1;
        while (e < s.size() && is_name_char(static_cast<unsigned char>(s[e]))) ++e;
        push(TokenType::Name, std::string(s.substr(pos_, e - pos_)));
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        std::size_t e = pos_ + 1;
        while (e < s.size() && s[e] != static_cast<char>(c)) {
          if (s[e] == '\\') ++e;
          ++e;
        }
        if (e >= s.size()) fail("unexpected char " + std::string(1, static_cast<char>(c)) + " (unterminated string)");
        int line = line_;
        push(TokenType::String, unescape(s.substr(pos_ + 1, e - pos_ - 1), line));
        pos_ = e + 1;
        continue;
      }
      bool matched = false;
      for (const char* op : kOperators) {
        std::string_view o(op);
        if (s.substr(pos_, o.size()) != o) continue;
        if (o == "{" || o == "(" || o == "[") {
          balance.push_back(o == "{" ? '}' : o == "(" ? ')' : ']');
        } else if (o == "}" || o == ")" || o == "]") {
          if (balance.empty()) fail("unexpected '" + std::string(o) + "'");
          char expected = balance.back();
          balance.pop_back();
          if (expected != o[0])
            fail("unexpected '" + std::string(o) + "', expected '" + std::string(1, expected) + "'");
        }
        push(TokenType::Operator, std::string(o));
        pos_ += o.size();
        matched = true;
        break;
      }
      if (!matched) fail("unexpected char '" + std::string(1, static_cast<char>(c)) + "'");
    }
  }

  // Digits with optional single underscores between them, starting at i; returns end or i.
  std::size_t digits(std::size_t i, int base = 10) const {
    std::string_view s = src_;
    auto ok = [&](char c) {
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      if (base == 16) return hex_val(c) >= 0;
      return c >= '0' && c <= '9';
    };
    std::size_t e = i;
    while (e < s.size()) {
      if (ok(s[e])) {
        ++e;
      } else if (s[e] == '_' && e > i && e + 1 < s.size() && ok(s[e + 1])) {
        ++e;
      } else {
        break;
      }
    }
    return e;
  }

  bool lex_number() {
    std::string_view s = src_;
    if (!std::isdigit(static_cast<unsigned char>(s[pos_]))) return false;
    auto clean = [](std::string_view t) {
      std::string r;
      for (char c : t)
        if (c != '_') r.push_back(c);
      return r;
    };
    // Float: digits ( (.digits)? e[+-]digits | .digits ), not preceded by '.'
    if (pos_ == 0 || s[pos_ - 1] != '.') {
      std::size_t e = digits(pos_);
      std::size_t f = e;
      bool frac = false;
      if (f < s.size() && s[f] == '.' && f + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[f + 1]))) {
        f = digits(f + 1);
        frac = true;
      }
      std::size_t x = f;
      bool expo = false;
      if (x < s.size() && (s[x] == 'e' || s[x] == 'E')) {
        std::size_t y = x + 1;
        if (y < s.size() && (s[y] == '+' || s[y] == '-')) ++y;
        if (y < s.size() && std::isdigit(static_cast<unsigned char>(s[y]))) {
          x = digits(y);
          expo = true;
        }
      }
      if (frac || expo) {
        std::size_t end = expo ? x : f;
        std::string t = clean(s.substr(pos_, end - pos_));
        Token& tok = push(TokenType::Float, t);
        tok.float_value = std::strtod(t.c_str(), nullptr);
        pos_ = end;
        return true;
      }
    }
    // Integer
    std::size_t end;
    int base = 10;
    if (s[pos_] == '0' && pos_ + 1 < s.size() && std::string_view("bBoOxX").find(s[pos_ + 1]) != std::string_view::npos) {
      char b = static_cast<char>(std::tolower(static_cast<unsigned char>(s[pos_ + 1])));
      base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
      std::size_t st = pos_ + 2;
      if (st < s.size() && s[st] == '_') ++st;
      end = digits(st, base);
      if (end == st) {
        end = pos_ + 1;  // just "0"
        base = 10;
      }
    } else if (s[pos_] == '0') {
      end = pos_ + 1;
      while (end < s.size() && (s[end] == '0' || (s[end] == '_' && end + 1 < s.size() && s[end + 1] == '0'))) ++end;
    } else {
      end = digits(pos_);
    }
    std::string t = clean(s.substr(pos_, end - pos_));
    Token& tok = push(TokenType::Integer, t);
    std::string body = base == 10 ? t : t.substr(2);
    tok.int_value = static_cast<std::int64_t>(std::strtoull(body.c_str(), nullptr, base));
    pos_ = end;
    return true;
  }

  LexerOptions opt_;
  std::string src_;
  std::size_t pos_ = 0;
  std::size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace kiln::jinja
