// Template: parse once, render with a fresh evaluator per call.
#include "model/jinja/jinja.h"

#include "model/jinja/ast.h"
#include "model/jinja/parser.h"

namespace kiln::jinja {

struct Template::Impl {
  Body body;
  TemplateOptions options;
};

Template::Template(std::string_view source, const TemplateOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  LexerOptions lex;
  lex.trim_blocks = options.trim_blocks;
  lex.lstrip_blocks = options.lstrip_blocks;
  lex.keep_trailing_newline = options.keep_trailing_newline;
  try {
    impl_->body = parse_template(source, lex);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // e.g. std::bad_alloc
    throw Error(Error::Kind::Runtime, std::string("template parsing failed: ") + e.what());
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Context& context) const { return render(Context(context)); }

std::string Template::render(Context&& context) const {
  EnvironmentOptions env;
  env.immutable_sandbox = impl_->options.immutable_sandbox;
  env.tojson = impl_->options.tojson;
  Interpreter interp(env, std::move(context));
  try {
    return interp.render(impl_->body);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // e.g. std::bad_alloc, std::out_of_range
    throw Error(Error::Kind::Runtime, std::string("template rendering failed: ") + e.what(), interp.current_line());
  }
}

namespace {

class FunctionValue : public Callable {
 public:
  FunctionValue(std::string name, std::function<Value(const CallArgs&)> fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  Value call(Interpreter&, CallArgs& args) override { return fn_(args); }
  std::string repr() const override { return "<function " + name_ + ">"; }

 private:
  std::string name_;
  std::function<Value(const CallArgs&)> fn_;
};

}  // namespace

Value make_function(std::string name, std::function<Value(const CallArgs&)> fn) {
  return Value::callable(std::make_shared<FunctionValue>(std::move(name), std::move(fn)));
}

Value raise_exception_function() {
  return make_function("raise_exception", [](const CallArgs& args) -> Value {
    std::string msg;
    if (!args.positional.empty()) {
      msg = py_str(args.positional[0]);
    } else {
      for (const auto& [k, v] : args.keyword)
        if (k == "message") msg = py_str(v);
    }
    throw Error(Error::Kind::Raised, msg);
  });
}

}  // namespace kiln::jinja
