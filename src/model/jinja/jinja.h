// kiln::jinja — a Jinja template interpreter that renders like Python's jinja2
// (3.1, sandboxed), written for chat templates. Public entry points:
//
//   kiln::jinja::Template t(source, {.trim_blocks = true, .lstrip_blocks = true});
//   std::string out = t.render({{"name", kiln::jinja::Value("world")}});
//
// For chat templates see chat_template.h.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "model/jinja/interpreter.h"
#include "model/jinja/value.h"

namespace kiln::jinja {

struct TemplateOptions {
  bool trim_blocks = false;    // drop the first newline after a block tag
  bool lstrip_blocks = false;  // strip whitespace before a block tag at line start
  bool keep_trailing_newline = false;
  bool immutable_sandbox = true;  // block list.append, dict.update, ... like jinja2's ImmutableSandboxedEnvironment
  TojsonStyle tojson = TojsonStyle::Transformers;
};

using Context = std::unordered_map<std::string, Value>;

// A parsed template; parse once, render many times (render is const and
// thread-compatible: each call uses its own evaluator state).
class Template {
 public:
  // Throws Error (Kind::Syntax / Kind::Unsupported) when the source does not parse.
  explicit Template(std::string_view source, const TemplateOptions& options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Throws Error when rendering fails (undefined values misused, type errors,
  // raise_exception(...) -> Kind::Raised with the template's message).
  // Reference cycles the render builds (macros, namespaces that hold themselves, ...)
  // are freed before render returns, unless the caller still holds a value that
  // reaches them (then they are the caller's, as in Python). A context passed as an
  // rvalue belongs to the render, so its own lists and dicts that the template makes
  // cyclic (mutable sandbox: {{ l.append(l) }}) are freed too.
  std::string render(const Context& context) const;
  std::string render(Context&& context) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Wraps a C++ function as a template-callable value.
Value make_function(std::string name, std::function<Value(const CallArgs&)> fn);

// The global `raise_exception(message)` that HF transformers provides to chat templates.
Value raise_exception_function();

}  // namespace kiln::jinja
