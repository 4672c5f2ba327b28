// kiln::jinja evaluator: renders a parsed template against a set of variables with
// jinja2's scoping rules (loop bodies, macros and call blocks get their own frames;
// if-blocks do not), its Undefined semantics and its sandboxed attribute lookup.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "model/jinja/ast.h"
#include "model/jinja/gc.h"
#include "model/jinja/value.h"

namespace kiln::jinja {

enum class TojsonStyle {
  // HF transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
  // separators=None, sort_keys=False); accepts those keyword arguments.
  Transformers,
  // jinja2's built-in filter: json.dumps(x, sort_keys=True, indent=indent) made
  // HTML-safe (<, >, &, ' as \u003c \u003e \u0026 \u0027), returns Markup.
  Jinja2,
};

struct EnvironmentOptions {
  // jinja2.sandbox.ImmutableSandboxedEnvironment: methods that mutate lists/dicts
  // (append, update, ...) are blocked with a security error. When false they work.
  bool immutable_sandbox = true;
  TojsonStyle tojson = TojsonStyle::Transformers;
};

struct Frame {
  explicit Frame(std::shared_ptr<Frame> p = nullptr) : parent(std::move(p)) {}
  std::shared_ptr<Frame> parent;
  std::unordered_map<std::string, Value> vars;
  const Value* lookup(const std::string& name) const;
};

class Interpreter {
 public:
  Interpreter(const EnvironmentOptions& options, std::unordered_map<std::string, Value> variables);
  // Frees the reference cycles the render left (see gc.h).
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string render(const Body& body);

  const EnvironmentOptions& options() const { return options_; }

  // jinja2 sandbox attribute/item access (obj.name / obj[key]); returns Undefined
  // values where jinja2 does, throws where it raises.
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& fn, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& value, CallArgs& args);
  bool apply_test(const std::string& name, const Value& value, CallArgs& args);

  // Used by macro / loop objects.
  Value invoke_macro(const MacroDef& def, const std::shared_ptr<Frame>& closure, CallArgs& args,
                     const Value& caller);
  std::string run_loop(const ForStmt& stmt, const std::shared_ptr<Frame>& frame, const Value& iterable, int depth);

  int current_line() const { return line_; }

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow exec(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out);
  void exec_for(const ForStmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out);
  void loop_items(const ForStmt& stmt, const std::shared_ptr<Frame>& frame, const Value& iterable, int depth,
                  std::string& out);
  void assign(const Expr& target, const Value& value, Frame& frame);
  Value eval(const Expr& expr, const std::shared_ptr<Frame>& frame);
  Value eval_name(const NameExpr& e, const std::shared_ptr<Frame>& frame);
  Value eval_compare(const CompareExpr& e, const std::shared_ptr<Frame>& frame);
  Value eval_filter(const FilterExpr& e, const std::shared_ptr<Frame>& frame, const Value* operand);
  CallArgs eval_args(const CallArgsExpr& a, const std::shared_ptr<Frame>& frame);
  Value slice(const Value& obj, const SliceExpr& s, const std::shared_ptr<Frame>& frame);
  std::string render_block(const Body& body, const std::shared_ptr<Frame>& frame);

  GcHeap heap_;  // what the render created; collected when the interpreter goes away
  EnvironmentOptions options_;
  std::shared_ptr<Frame> root_;
  int line_ = 0;
  void enter_call();  // recursion guard; throws when too deep

  int depth_ = 0;
  std::uintptr_t stack_base_ = 0;
};

}  // namespace kiln::jinja
