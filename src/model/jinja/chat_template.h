// Chat-template front end: renders a model's `tokenizer.chat_template` with the
// variables HF transformers passes (messages, tools, documents,
// add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now),
// in the environment transformers uses (sandboxed, trim_blocks, lstrip_blocks,
// loop controls, its tojson override).
//
//   std::string prompt = kiln::jinja::apply_chat_template(tmpl, messages,
//       {.add_generation_prompt = true, .bos_token = "<s>", .eos_token = "</s>"});
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/jinja/jinja.h"

namespace kiln::jinja {

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  std::string bos_token{};
  std::string eos_token{};
  // Tool schemas (a JSON array) or null; null renders `tools` as None, as
  // transformers does when no tools are given.
  nlohmann::ordered_json tools = nullptr;
  nlohmann::ordered_json documents = nullptr;  // likewise for `documents`
  // More variables (a JSON object), e.g. {"enable_thinking": false}; they
  // override the ones above.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  // strftime_now(format) for templates that print today's date; defaults to the
  // local time via std::strftime.
  std::function<std::string(const std::string& format)> strftime_now{};
  // Parsing options (used by apply_chat_template and the ChatTemplate constructor).
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
  TojsonStyle tojson = TojsonStyle::Transformers;
  bool immutable_sandbox = true;
};

// A parsed chat template.
class ChatTemplate {
 public:
  // Uses only the parsing options of `options`. Throws Error on syntax errors.
  explicit ChatTemplate(std::string_view source, const ChatTemplateOptions& options = {});
  // messages: a JSON array of {"role", "content", ...} objects; content may be a
  // string or a list of parts; tool_calls / tool_call_id / name are passed through.
  std::string apply(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options = {}) const;

 private:
  Template tmpl_;
};

std::string apply_chat_template(std::string_view tmpl, const nlohmann::ordered_json& messages,
                                const ChatTemplateOptions& options = {});
std::string apply_chat_template(std::string_view tmpl, const nlohmann::json& messages,
                                const ChatTemplateOptions& options = {});

// JSON <-> template values (object key order is kept).
Value from_json(const nlohmann::ordered_json& j);

// The render context transformers builds for a chat template.
Context chat_template_context(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options);

}  // namespace kiln::jinja
