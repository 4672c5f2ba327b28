// Chat formatting for a model: its own template (tokenizer.chat_template) or,
// when the file has none, a built-in one chosen from the architecture.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

class Model;

// The Jinja source used for the model's chats.
std::string chat_template_for(const Model& model);

// Renders messages (a JSON array of {"role", "content", ...}) with the template (or the model's when
// tmpl is empty), with the model's BOS/EOS texts. extra: more template variables (tools, ...).
std::string apply_chat(const Model& model, const std::string& tmpl, const nlohmann::ordered_json& messages,
                       bool add_generation_prompt, const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace kiln
