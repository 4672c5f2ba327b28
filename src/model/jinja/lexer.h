// kiln::jinja lexer: splits template source into data and tag tokens, applying
// Jinja's whitespace control ({%- -%} {{- -}} {#- -#}, {%+ +%}), trim_blocks,
// lstrip_blocks, comments and raw blocks exactly as jinja2's lexer does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::jinja {

enum class TokenType {
  Data,        // literal template text
  BlockBegin,  // {%
  BlockEnd,    // %}
  VarBegin,    // {{
  VarEnd,      // }}
  Name,
  String,
  Integer,
  Float,
  Operator,
  Eof,
};

struct Token {
  TokenType type = TokenType::Eof;
  std::string text;  // data, name, operator, decoded string literal
  std::int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
};

struct LexerOptions {
  bool trim_blocks = false;
  bool lstrip_blocks = false;
  bool keep_trailing_newline = false;
};

// Throws Error(Kind::Syntax) on malformed input.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

}  // namespace kiln::jinja
