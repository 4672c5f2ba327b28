// kiln::jinja parser: tokens -> syntax tree, following jinja2's grammar.
#pragma once

#include <string_view>

#include "model/jinja/ast.h"
#include "model/jinja/lexer.h"

namespace kiln::jinja {

// Parses a whole template. Throws Error(Kind::Syntax) on malformed input and
// Error(Kind::Unsupported) for statements this interpreter does not implement
// (extends, include, import, from, autoescape).
Body parse_template(std::string_view source, const LexerOptions& options);

}  // namespace kiln::jinja
