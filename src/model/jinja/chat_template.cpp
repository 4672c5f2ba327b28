// Chat-template front end (see chat_template.h).
#include "model/jinja/chat_template.h"

#include <ctime>

namespace kiln::jinja {

namespace {

TemplateOptions template_options(const ChatTemplateOptions& o) {
  TemplateOptions t;
  t.trim_blocks = o.trim_blocks;
  t.lstrip_blocks = o.lstrip_blocks;
  t.keep_trailing_newline = o.keep_trailing_newline;
  t.tojson = o.tojson;
  t.immutable_sandbox = o.immutable_sandbox;
  return t;
}

std::string local_strftime(const std::string& format) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
#if defined(_WIN32)
  localtime_s(&tm, &now);
#else
  localtime_r(&now, &tm);
#endif
  std::string buf(256 + format.size() * 4, '\0');
  std::size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
  buf.resize(n);
  return buf;
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  using t = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case t::null:
      return Value::none();
    case t::boolean:
      return Value(j.get<bool>());
    case t::number_integer:
      return Value(j.get<std::int64_t>());
    case t::number_unsigned: {
      auto u = j.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<std::int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case t::number_float:
      return Value(j.get<double>());
    case t::string:
      return Value(j.get<std::string>());
    case t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict_ref().set(Value(it.key()), from_json(it.value()));
      return d;
    }
    default:
      throw Error(Error::Kind::Type, "unsupported JSON value (binary or discarded)");
  }
}

Context chat_template_context(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) {
  Context ctx;
  ctx["messages"] = from_json(messages);
  ctx["tools"] = from_json(options.tools);
  ctx["documents"] = from_json(options.documents);
  ctx["add_generation_prompt"] = Value(options.add_generation_prompt);
  ctx["bos_token"] = Value(options.bos_token);
  ctx["eos_token"] = Value(options.eos_token);
  ctx["raise_exception"] = raise_exception_function();
  auto strftime_fn = options.strftime_now ? options.strftime_now : std::function<std::string(const std::string&)>(local_strftime);
  ctx["strftime_now"] = make_function("strftime_now", [strftime_fn](const CallArgs& args) -> Value {
    if (args.positional.size() != 1 || !args.positional[0].is_string() || !args.keyword.empty())
      throw Error(Error::Kind::Type, "strftime_now() takes exactly one string argument");
    return Value(strftime_fn(args.positional[0].str()));
  });
  if (options.extra_context.is_object()) {
    for (auto it = options.extra_context.begin(); it != options.extra_context.end(); ++it)
      ctx[it.key()] = from_json(it.value());
  } else if (!options.extra_context.is_null()) {
    throw Error(Error::Kind::Type, "extra_context must be a JSON object");
  }
  return ctx;
}

ChatTemplate::ChatTemplate(std::string_view source, const ChatTemplateOptions& options)
    : tmpl_(source, template_options(options)) {}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const {
  return tmpl_.render(chat_template_context(messages, options));
}

std::string apply_chat_template(std::string_view tmpl, const nlohmann::ordered_json& messages,
                                const ChatTemplateOptions& options) {
  return ChatTemplate(tmpl, options).apply(messages, options);
}

std::string apply_chat_template(std::string_view tmpl, const nlohmann::json& messages,
                                const ChatTemplateOptions& options) {
  return apply_chat_template(tmpl, nlohmann::ordered_json(messages), options);
}

}  // namespace kiln::jinja
