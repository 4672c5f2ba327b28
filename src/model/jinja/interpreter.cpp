// Tree-walking evaluator for Jinja templates (see interpreter.h).
#include "model/jinja/interpreter.h"

#include "model/jinja/builtins.h"

namespace kiln::jinja {

namespace {

constexpr int kMaxDepth = 500;  // nested macro calls / recursive loops
// Stack the evaluator may use below render() before recursion is refused; keeps
// deep macro recursion an error instead of a crash on threads with small stacks.
constexpr std::uintptr_t kStackBudget = 256 * 1024;

// A macro or call-block caller, closed over the frame it was defined in.
class MacroCallable : public Callable {
 public:
  MacroCallable(const MacroDef* def, std::shared_ptr<Frame> closure, Value caller = Value())
      : def_(def), closure_(std::move(closure)), caller_(std::move(caller)) {}
  Value call(Interpreter& interp, CallArgs& args) override { return interp.invoke_macro(*def_, closure_, args, caller_); }
  std::string repr() const override {
    return def_->name.empty() ? "<Macro anonymous>" : "<Macro '" + def_->name + "'>";
  }
  // The closure frame usually holds this macro: a cycle the render's GcHeap frees.
  void gc_trace(GcVisitor& v) const override {
    v.frame(closure_);
    v.value(caller_);
  }
  void gc_clear() override {
    closure_.reset();
    caller_ = Value();
  }

 private:
  const MacroDef* def_;
  std::shared_ptr<Frame> closure_;
  Value caller_;
};

class LoopObject;

class LoopMethod : public Callable {
 public:
  LoopMethod(std::shared_ptr<LoopObject> loop, std::string name) : loop_(std::move(loop)), name_(std::move(name)) {}
  Value call(Interpreter& interp, CallArgs& args) override;
  std::string repr() const override { return "<bound method LoopContext." + name_ + ">"; }
  void gc_trace(GcVisitor& v) const override { v.object(loop_); }
  void gc_clear() override { loop_.reset(); }

 private:
  std::shared_ptr<LoopObject> loop_;
  std::string name_;
};

// The `loop` variable of a for loop.
class LoopObject : public Object, public Callable, public std::enable_shared_from_this<LoopObject> {
 public:
  LoopObject(ValueList items, int depth, const ForStmt* stmt, std::shared_ptr<Frame> frame)
      : items_(std::move(items)), depth_(depth), stmt_(stmt), frame_(std::move(frame)) {}

  std::int64_t index0 = 0;

  Value get_attr(const std::string& name) override {
    const auto n = static_cast<std::int64_t>(items_.size());
    if (name == "index0") return Value(index0);
    if (name == "index") return Value(index0 + 1);
    if (name == "revindex0") return Value(n - index0 - 1);
    if (name == "revindex") return Value(n - index0);
    if (name == "first") return Value(index0 == 0);
    if (name == "last") return Value(index0 == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth0") return Value(static_cast<std::int64_t>(depth_));
    if (name == "depth") return Value(static_cast<std::int64_t>(depth_ + 1));
    if (name == "previtem") {
      if (index0 == 0) return Value::undefined("there is no previous item");
      return items_[static_cast<std::size_t>(index0 - 1)];
    }
    if (name == "nextitem") {
      if (index0 + 1 >= n) return Value::undefined("there is no next item");
      return items_[static_cast<std::size_t>(index0 + 1)];
    }
    if (name == "cycle" || name == "changed")
      return Value::callable(std::make_shared<LoopMethod>(shared_from_this(), name));
    return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
  }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items_.size()) + ">";
  }
  const char* type_name() const override { return "LoopContext"; }
  Callable* as_callable() override { return this; }
  // (Overrides both Object's and Callable's.)
  void gc_trace(GcVisitor& v) const override {
    v.values(items_);
    v.frame(frame_);
    v.value(last_changed_);
  }
  void gc_clear() override {
    ValueList().swap(items_);
    frame_.reset();
    last_changed_ = Value();
  }

  // loop(iterable) in a recursive loop
  Value call(Interpreter& interp, CallArgs& args) override {
    if (!stmt_->recursive)
      throw Error(Error::Kind::Type, "The loop must be marked 'recursive' to be called recursively.");
    if (args.positional.size() != 1 || !args.keyword.empty())
      throw Error(Error::Kind::Type, "loop() takes exactly one argument");
    return Value(interp.run_loop(*stmt_, frame_, args.positional[0], depth_ + 1));
  }

  Value cycle(const CallArgs& args) {
    if (args.positional.empty()) throw Error(Error::Kind::Type, "no items for cycling given");
    return args.positional[static_cast<std::size_t>(index0) % args.positional.size()];
  }
  Value changed(const CallArgs& args) {
    Value now = Value::list(args.positional);
    if (has_last_ && py_equal(now, last_changed_)) return Value(false);
    last_changed_ = now;
    has_last_ = true;
    return Value(true);
  }

 private:
  ValueList items_;
  int depth_;
  const ForStmt* stmt_;
  std::shared_ptr<Frame> frame_;
  Value last_changed_;
  bool has_last_ = false;
};

Value LoopMethod::call(Interpreter&, CallArgs& args) {
  return name_ == "cycle" ? loop_->cycle(args) : loop_->changed(args);
}

std::string output_string(const Value& v) { return py_str(v); }

}  // namespace

const Value* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(const EnvironmentOptions& options, std::unordered_map<std::string, Value> variables)
    : options_(options), root_(std::make_shared<Frame>()) {
  root_->vars = std::move(variables);
  // The root frame is the render's own: the collection may clear it when only
  // cycles keep it (a top-level macro), and examines the variables it holds.
  heap_.add(root_, GcKind::Frame, root_.get());
}

Interpreter::~Interpreter() {
  // The root frame goes to the collection, which holds it (and everything it
  // reaches) while telling apart what only cycles keep alive (macros closed over
  // it, a namespace holding itself, ...) from what the caller still holds.
  heap_.collect(std::move(root_));
}

void Interpreter::enter_call() {
  char marker;
  auto here = reinterpret_cast<std::uintptr_t>(&marker);
  std::uintptr_t used = here > stack_base_ ? here - stack_base_ : stack_base_ - here;
  if (++depth_ > kMaxDepth || used > kStackBudget) {
    --depth_;
    throw Error(Error::Kind::Runtime, "maximum recursion depth exceeded");
  }
}

std::string Interpreter::render(const Body& body) {
  GcScope gc_scope(heap_);
  char marker;
  stack_base_ = reinterpret_cast<std::uintptr_t>(&marker);
  std::string out;
  try {
    exec_body(body, root_, out);
  } catch (const Error& e) {
    if (e.line() == 0) throw e.with_line(line_);
    throw;
  }
  return out;
}

std::string Interpreter::render_block(const Body& body, const std::shared_ptr<Frame>& frame) {
  std::string out;
  exec_body(body, frame, out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, frame, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out) {
  line_ = stmt.line;
  switch (stmt.kind) {
    case StmtKind::Text:
      out += static_cast<const TextStmt&>(stmt).text;
      return Flow::Normal;
    case StmtKind::Print:
      out += output_string(eval(*static_cast<const PrintStmt&>(stmt).expr, frame));
      return Flow::Normal;
    case StmtKind::If: {
      const auto& s = static_cast<const IfStmt&>(stmt);
      for (const auto& [test, body] : s.branches) {
        if (eval(*test, frame).truthy()) return exec_body(body, frame, out);
      }
      return exec_body(s.else_body, frame, out);
    }
    case StmtKind::For:
      exec_for(static_cast<const ForStmt&>(stmt), frame, out);
      return Flow::Normal;
    case StmtKind::Set: {
      const auto& s = static_cast<const SetStmt&>(stmt);
      Value v = eval(*s.value, frame);
      assign(*s.target, v, *frame);
      return Flow::Normal;
    }
    case StmtKind::SetBlock: {
      const auto& s = static_cast<const SetBlockStmt&>(stmt);
      Value v(render_block(s.body, std::make_shared<Frame>(frame)));
      if (s.filter) v = eval_filter(static_cast<const FilterExpr&>(*s.filter), frame, &v);
      line_ = stmt.line;
      assign(*s.target, v, *frame);
      return Flow::Normal;
    }
    case StmtKind::Macro: {
      const auto& s = static_cast<const MacroStmt&>(stmt);
      frame->vars[s.def.name] = Value::callable(std::make_shared<MacroCallable>(&s.def, frame));
      return Flow::Normal;
    }
    case StmtKind::CallBlock: {
      const auto& s = static_cast<const CallBlockStmt&>(stmt);
      const auto& call = static_cast<const CallExpr&>(*s.call);
      Value callee = eval(*call.callee, frame);
      CallArgs args = eval_args(call.args, frame);
      args.keyword.emplace_back("caller", Value::callable(std::make_shared<MacroCallable>(&s.def, frame)));
      line_ = stmt.line;
      out += output_string(this->call(callee, args));
      return Flow::Normal;
    }
    case StmtKind::FilterBlock: {
      const auto& s = static_cast<const FilterBlockStmt&>(stmt);
      Value v(render_block(s.body, std::make_shared<Frame>(frame)));
      out += output_string(eval_filter(static_cast<const FilterExpr&>(*s.filter), frame, &v));
      return Flow::Normal;
    }
    case StmtKind::With: {
      const auto& s = static_cast<const WithStmt&>(stmt);
      auto inner = std::make_shared<Frame>(frame);
      for (const auto& [target, value] : s.assignments) assign(*target, eval(*value, frame), *inner);
      return exec_body(s.body, inner, out);
    }
    case StmtKind::Break:
      return Flow::Break;
    case StmtKind::Continue:
      return Flow::Continue;
    case StmtKind::Scope:
      return exec_body(static_cast<const ScopeStmt&>(stmt).body, std::make_shared<Frame>(frame), out);
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const ForStmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out) {
  Value iterable = eval(*stmt.iter, frame);
  loop_items(stmt, frame, iterable, 0, out);
}

std::string Interpreter::run_loop(const ForStmt& stmt, const std::shared_ptr<Frame>& frame, const Value& iterable,
                                  int depth) {
  enter_call();
  std::string out;
  try {
    loop_items(stmt, frame, iterable, depth, out);
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  return out;
}

void Interpreter::loop_items(const ForStmt& stmt, const std::shared_ptr<Frame>& frame, const Value& iterable,
                             int depth, std::string& out) {
  ValueList items = py_iterate(iterable);
  if (stmt.filter) {
    ValueList kept;
    for (auto& item : items) {
      auto f = std::make_shared<Frame>(frame);
      assign(*stmt.target, item, *f);
      if (eval(*stmt.filter, f).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(stmt.else_body, std::make_shared<Frame>(frame), out);
    return;
  }
  auto loop = std::make_shared<LoopObject>(items, depth, &stmt, frame);
  Value loop_value = Value::object(loop);
  // As in jinja2, the else block runs unless some iteration ran to the end of
  // the body (break and continue skip the "iterated" mark).
  bool completed = false;
  for (std::size_t i = 0; i < items.size(); ++i) {
    loop->index0 = static_cast<std::int64_t>(i);
    auto f = std::make_shared<Frame>(frame);
    f->vars["loop"] = loop_value;
    line_ = stmt.line;
    assign(*stmt.target, items[i], *f);
    Flow flow = exec_body(stmt.body, f, out);
    if (flow == Flow::Break) break;
    if (flow == Flow::Normal) completed = true;
  }
  if (!completed && !stmt.else_body.empty()) exec_body(stmt.else_body, std::make_shared<Frame>(frame), out);
}

void Interpreter::assign(const Expr& target, const Value& value, Frame& frame) {
  switch (target.kind) {
    case ExprKind::Name:
      frame.vars[static_cast<const NameExpr&>(target).name] = value;
      return;
    case ExprKind::Tuple: {
      const auto& t = static_cast<const SeqExpr&>(target);
      ValueList items = py_iterate(value);
      if (items.size() > t.items.size())
        throw Error(Error::Kind::Type, "too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
      if (items.size() < t.items.size())
        throw Error(Error::Kind::Type, "not enough values to unpack (expected " + std::to_string(t.items.size()) +
                                           ", got " + std::to_string(items.size()) + ")");
      for (std::size_t i = 0; i < items.size(); ++i) assign(*t.items[i], items[i], frame);
      return;
    }
    case ExprKind::NSRef: {
      const auto& r = static_cast<const NSRefExpr&>(target);
      const Value* ns = frame.lookup(r.name);
      if (!ns || !ns->is_namespace())
        throw Error(Error::Kind::Runtime, "cannot assign attribute on non-namespace object");
      gc_adopt(*ns);
      ns->dict_ref().set(Value(r.attr), value);
      return;
    }
    default:
      throw Error(Error::Kind::Syntax, "can't assign to this expression");
  }
}

Value Interpreter::eval_name(const NameExpr& e, const std::shared_ptr<Frame>& frame) {
  if (const Value* v = frame->lookup(e.name)) return *v;
  if (auto g = builtin_global(e.name)) return *g;
  return Value::undefined("'" + e.name + "' is undefined");
}

CallArgs Interpreter::eval_args(const CallArgsExpr& a, const std::shared_ptr<Frame>& frame) {
  CallArgs out;
  for (const auto& x : a.positional) out.positional.push_back(eval(*x, frame));
  for (const auto& [k, x] : a.keyword) out.keyword.emplace_back(k, eval(*x, frame));
  if (a.dyn_args) {
    for (auto& v : py_iterate(eval(*a.dyn_args, frame))) out.positional.push_back(std::move(v));
  }
  if (a.dyn_kwargs) {
    Value d = eval(*a.dyn_kwargs, frame);
    if (!d.is_dict()) throw Error(Error::Kind::Type, "argument after ** must be a mapping, not " + d.type_name());
    for (const auto& [k, v] : d.dict_ref().entries()) {
      if (!k.is_string()) throw Error(Error::Kind::Type, "keywords must be strings");
      out.keyword.emplace_back(k.str(), v);
    }
  }
  return out;
}

Value Interpreter::eval_filter(const FilterExpr& e, const std::shared_ptr<Frame>& frame, const Value* operand) {
  Value v;
  if (e.operand) {
    if (e.operand->kind == ExprKind::Filter) {
      v = eval_filter(static_cast<const FilterExpr&>(*e.operand), frame, operand);
    } else {
      v = eval(*e.operand, frame);
    }
  } else if (operand) {
    v = *operand;
  }
  CallArgs args = eval_args(e.args, frame);
  line_ = e.line;
  return apply_filter(e.name, v, args);
}

Value Interpreter::eval_compare(const CompareExpr& e, const std::shared_ptr<Frame>& frame) {
  Value left = eval(*e.first, frame);
  for (const auto& [op, expr] : e.rest) {
    Value right = eval(*expr, frame);
    bool r = false;
    switch (op) {
      case CmpOp::Eq:
        r = py_equal(left, right);
        break;
      case CmpOp::Ne:
        r = !py_equal(left, right);
        break;
      case CmpOp::Lt:
        r = py_compare(left, right) < 0;
        break;
      case CmpOp::Le:
        r = py_compare(left, right) <= 0;
        break;
      case CmpOp::Gt:
        r = py_compare(left, right) > 0;
        break;
      case CmpOp::Ge:
        r = py_compare(left, right) >= 0;
        break;
      case CmpOp::In:
        r = py_contains(right, left);
        break;
      case CmpOp::NotIn:
        r = !py_contains(right, left);
        break;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::slice(const Value& obj, const SliceExpr& s, const std::shared_ptr<Frame>& frame) {
  Value a, b, c;
  if (s.start) a = eval(*s.start, frame);
  if (s.stop) b = eval(*s.stop, frame);
  if (s.step) c = eval(*s.step, frame);
  if (obj.is_undefined()) obj.fail_undefined();
  return py_slice(obj, s.start ? &a : nullptr, s.stop ? &b : nullptr, s.step ? &c : nullptr);
}

Value Interpreter::eval(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  switch (expr.kind) {
    case ExprKind::Const:
      return static_cast<const ConstExpr&>(expr).value;
    case ExprKind::Name:
      return eval_name(static_cast<const NameExpr&>(expr), frame);
    case ExprKind::List:
    case ExprKind::Tuple: {
      ValueList items;
      for (const auto& x : static_cast<const SeqExpr&>(expr).items) items.push_back(eval(*x, frame));
      return expr.kind == ExprKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Value d = Value::dict();
      for (const auto& [k, v] : static_cast<const DictExpr&>(expr).items) {
        Value key = eval(*k, frame);
        d.dict_ref().set(key, eval(*v, frame));
      }
      return d;
    }
    case ExprKind::GetAttr: {
      const auto& e = static_cast<const GetAttrExpr&>(expr);
      Value obj = eval(*e.object, frame);
      line_ = e.line;
      if (obj.is_undefined()) obj.fail_undefined();
      return getattr(obj, e.attr);
    }
    case ExprKind::GetItem: {
      const auto& e = static_cast<const GetItemExpr&>(expr);
      Value obj = eval(*e.object, frame);
      if (e.key->kind == ExprKind::Slice) return slice(obj, static_cast<const SliceExpr&>(*e.key), frame);
      Value key = eval(*e.key, frame);
      line_ = e.line;
      if (obj.is_undefined()) obj.fail_undefined();
      return getitem(obj, key);
    }
    case ExprKind::Slice:
      throw Error(Error::Kind::Syntax, "slice outside of a subscript");
    case ExprKind::Call: {
      const auto& e = static_cast<const CallExpr&>(expr);
      Value callee = eval(*e.callee, frame);
      CallArgs args = eval_args(e.args, frame);
      line_ = e.line;
      return call(callee, args);
    }
    case ExprKind::Filter:
      return eval_filter(static_cast<const FilterExpr&>(expr), frame, nullptr);
    case ExprKind::Test: {
      const auto& e = static_cast<const TestExpr&>(expr);
      Value v = eval(*e.operand, frame);
      CallArgs args = eval_args(e.args, frame);
      line_ = e.line;
      return Value(apply_test(e.name, v, args));
    }
    case ExprKind::Unary: {
      const auto& e = static_cast<const UnaryExpr&>(expr);
      Value v = eval(*e.operand, frame);
      switch (e.op) {
        case UnaryOp::Not:
          return Value(!v.truthy());
        case UnaryOp::Neg:
          return py_neg(v);
        case UnaryOp::Pos:
          return py_pos(v);
      }
      return v;
    }
    case ExprKind::Binary: {
      const auto& e = static_cast<const BinaryExpr&>(expr);
      Value a = eval(*e.left, frame);
      if (e.op == BinOp::And) return a.truthy() ? eval(*e.right, frame) : a;
      if (e.op == BinOp::Or) return a.truthy() ? a : eval(*e.right, frame);
      Value b = eval(*e.right, frame);
      line_ = e.line;
      switch (e.op) {
        case BinOp::Add:
          return py_add(a, b);
        case BinOp::Sub:
          return py_sub(a, b);
        case BinOp::Mul:
          return py_mul(a, b);
        case BinOp::Div:
          return py_truediv(a, b);
        case BinOp::FloorDiv:
          return py_floordiv(a, b);
        case BinOp::Mod:
          return py_mod(a, b);
        case BinOp::Pow:
          return py_pow(a, b);
        default:
          break;
      }
      return Value();
    }
    case ExprKind::Concat: {
      std::string s;
      for (const auto& p : static_cast<const ConcatExpr&>(expr).parts) s += py_str(eval(*p, frame));
      return Value(std::move(s));
    }
    case ExprKind::Compare:
      return eval_compare(static_cast<const CompareExpr&>(expr), frame);
    case ExprKind::Cond: {
      const auto& e = static_cast<const CondExpr&>(expr);
      if (eval(*e.test, frame).truthy()) return eval(*e.then, frame);
      if (e.otherwise) return eval(*e.otherwise, frame);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::NSRef:
      throw Error(Error::Kind::Syntax, "namespace reference outside of an assignment");
  }
  return Value();
}

// ---------------------------------------------------------------- access and calls

static std::string object_type_repr(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.type_name() + " object";
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Namespace:
      if (const Value* v = obj.dict_ref().find(Value(name))) return *v;
      break;
    case Kind::Object:
      return obj.object_ptr()->get_attr(name);
    case Kind::Tuple:
      if (obj.is_group_tuple() && (name == "grouper" || name == "list"))
        return obj.items()[name == "grouper" ? 0 : 1];
      break;
    default:
      break;
  }
  if (auto m = builtin_method(*this, obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(Value(name))) return *v;
  }
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Dict:
      if (key.is_list() || key.is_dict()) throw_type_error("unhashable type: '" + key.type_name() + "'");
      if (const Value* v = obj.dict_ref().find(key)) return *v;
      break;
    case Kind::List:
    case Kind::Tuple:
    case Kind::String:
      if (key.is_integral()) {
        std::int64_t n = py_len(obj);
        std::int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          if (obj.is_string()) {
            std::u32string u = utf8_decode(obj.str());
            return Value(utf8_encode(u.substr(static_cast<std::size_t>(i), 1)));
          }
          return obj.items()[static_cast<std::size_t>(i)];
        }
        return Value::undefined(object_type_repr(obj) + " has no element " + py_repr(key));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (obj.is_namespace()) {
      if (const Value* v = obj.dict_ref().find(key)) return *v;
    } else if (obj.is_object()) {
      Value v = obj.object_ptr()->get_attr(key.str());
      if (!v.is_undefined()) return v;
    } else if (auto m = builtin_method(*this, obj, key.str())) {
      return *m;
    }
    return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + key.str() + "'");
  }
  return Value::undefined(object_type_repr(obj) + " has no element " + py_repr(key));
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (Callable* c = fn.callable_ptr()) {
    enter_call();
    try {
      Value r = c->call(*this, args);
      --depth_;
      return r;
    } catch (...) {
      --depth_;
      throw;
    }
  }
  if (fn.is_undefined()) fn.fail_undefined();
  throw Error(Error::Kind::Type, "'" + fn.type_name() + "' object is not callable");
}

Value Interpreter::apply_filter(const std::string& name, const Value& value, CallArgs& args) {
  if (!has_filter(name)) throw Error(Error::Kind::Runtime, "No filter named '" + name + "' found.");
  return call_filter(*this, name, value, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& value, CallArgs& args) {
  if (!has_test(name)) throw Error(Error::Kind::Runtime, "No test named '" + name + "' found.");
  return call_test(*this, name, value, args);
}

Value Interpreter::invoke_macro(const MacroDef& def, const std::shared_ptr<Frame>& closure, CallArgs& args,
                                const Value& caller) {
  // Argument binding follows jinja2's Macro.__call__.
  auto f = std::make_shared<Frame>(closure);
  const std::string macro_name = def.name.empty() ? "None" : "'" + def.name + "'";
  const std::size_t np = def.params.size();
  const std::size_t npos = args.positional.size();
  std::vector<std::pair<std::string, Value>> kwargs = args.keyword;
  auto pop_kwarg = [&](const std::string& name, Value& out) {
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      if (it->first == name) {
        out = it->second;
        kwargs.erase(it);
        return true;
      }
    }
    return false;
  };
  std::vector<bool> given(np, false);
  bool explicit_caller = false;
  for (std::size_t i = 0; i < np; ++i) {
    if (def.params[i] == "caller") explicit_caller = true;
    if (i < npos) {
      f->vars[def.params[i]] = args.positional[i];
      given[i] = true;
    } else {
      Value v;
      if (pop_kwarg(def.params[i], v)) {
        f->vars[def.params[i]] = v;
        given[i] = true;
      }
    }
  }
  Value caller_value = caller;
  if (def.uses_caller && !explicit_caller) {
    Value v;
    if (pop_kwarg("caller", v)) caller_value = v;
  }
  Value kwargs_value = Value::dict();
  if (def.uses_kwargs) {
    for (const auto& [k, v] : kwargs) kwargs_value.dict_ref().set(Value(k), v);
  } else if (!kwargs.empty()) {
    for (const auto& kv : kwargs)
      if (kv.first == "caller")
        throw Error(Error::Kind::Type, "macro " + macro_name +
                                           " was invoked with two values for the special caller argument. This is "
                                           "most likely a bug.");
    throw Error(Error::Kind::Type, "macro " + macro_name + " takes no keyword argument '" + kwargs.front().first + "'");
  }
  ValueList extra_pos;
  if (npos > np) extra_pos.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(np), args.positional.end());
  if (!extra_pos.empty() && !def.uses_varargs)
    throw Error(Error::Kind::Type, "macro " + macro_name + " takes not more than " + std::to_string(np) +
                                       " argument(s)");
  const std::size_t first_default = np - def.defaults.size();
  for (std::size_t i = 0; i < np; ++i) {
    if (given[i]) continue;
    if (i >= first_default) {
      f->vars[def.params[i]] = eval(*def.defaults[i - first_default], f);
    } else {
      f->vars[def.params[i]] = Value::undefined("parameter '" + def.params[i] + "' was not provided");
    }
  }
  if (def.uses_varargs) f->vars["varargs"] = Value::tuple(std::move(extra_pos));
  if (def.uses_kwargs) f->vars["kwargs"] = kwargs_value;
  if (def.uses_caller && !explicit_caller)
    f->vars["caller"] = caller_value.is_undefined() ? Value::undefined("No caller defined") : caller_value;
  int saved_line = line_;
  std::string out;
  exec_body(def.body, f, out);
  line_ = saved_line;
  return Value(std::move(out));
}

}  // namespace kiln::jinja
