#include "model/chat.h"

#include "model/jinja/chat_template.h"
#include "model/model.h"

namespace kiln {
namespace {

// Gemma's turn format: roles user / model, a system message is prepended to the
// first user turn (Gemma has no system role). Used for gemma* models whose GGUF
// carries no template.
constexpr const char* kGemmaTemplate = R"({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set first_user_prefix = "" -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") + message['content'] | trim + '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<start_of_turn>model\n' }}
{%- endif -%})";

// ChatML, the generic fallback.
constexpr const char* kChatMlTemplate = R"({%- for message in messages -%}
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|im_start|>assistant\n' }}
{%- endif -%})";

}  // namespace

std::string chat_template_for(const Model& model) {
    if (auto t = model.file().get_string("tokenizer.chat_template")) return *t;
    if (model.hparams().arch.rfind("gemma", 0) == 0) return kGemmaTemplate;
    return kChatMlTemplate;
}

std::string apply_chat(const Model& model, const std::string& tmpl, const nlohmann::ordered_json& messages,
                       bool add_generation_prompt, const nlohmann::ordered_json& extra) {
    jinja::ChatTemplateOptions opts;
    opts.add_generation_prompt = add_generation_prompt;
    if (model.has_tokenizer()) {
        const Tokenizer& tok = model.tokenizer();
        if (tok.bos() != kNoToken) opts.bos_token = std::string(tok.token_text(tok.bos()));
        if (tok.eos() != kNoToken) opts.eos_token = std::string(tok.token_text(tok.eos()));
    }
    if (extra.contains("tools")) opts.tools = extra["tools"];
    opts.extra_context = extra;
    return jinja::apply_chat_template(tmpl.empty() ? chat_template_for(model) : tmpl, messages, opts);
}

}  // namespace kiln
