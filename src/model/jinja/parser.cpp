// Recursive-descent parser for Jinja templates (grammar and precedence as in jinja2).
#include "model/jinja/parser.h"

#include "model/jinja/builtins.h"

#include <functional>
#include <initializer_list>

namespace kiln::jinja {

namespace {

using ExprVisitor = std::function<void(const Expr&, bool soft)>;

void walk_body(const Body& body, bool soft, const ExprVisitor& fn);

void walk_args(const CallArgsExpr& a, bool soft, const ExprVisitor& fn);

// Visits every expression node; `soft` is true inside if-statements and inline
// if-expressions (jinja2's "soft frames", where unknown filters and tests are
// only an error when they are reached at runtime).
void walk_expr(const Expr* e, bool soft, const ExprVisitor& fn) {
  if (!e) return;
  fn(*e, soft);
  switch (e->kind) {
    case ExprKind::List:
    case ExprKind::Tuple:
      for (const auto& x : static_cast<const SeqExpr*>(e)->items) walk_expr(x.get(), soft, fn);
      break;
    case ExprKind::Dict:
      for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
        walk_expr(k.get(), soft, fn);
        walk_expr(v.get(), soft, fn);
      }
      break;
    case ExprKind::GetAttr:
      walk_expr(static_cast<const GetAttrExpr*>(e)->object.get(), soft, fn);
      break;
    case ExprKind::GetItem:
      walk_expr(static_cast<const GetItemExpr*>(e)->object.get(), soft, fn);
      walk_expr(static_cast<const GetItemExpr*>(e)->key.get(), soft, fn);
      break;
    case ExprKind::Slice: {
      auto* s = static_cast<const SliceExpr*>(e);
      walk_expr(s->start.get(), soft, fn);
      walk_expr(s->stop.get(), soft, fn);
      walk_expr(s->step.get(), soft, fn);
      break;
    }
    case ExprKind::Call:
      walk_expr(static_cast<const CallExpr*>(e)->callee.get(), soft, fn);
      walk_args(static_cast<const CallExpr*>(e)->args, soft, fn);
      break;
    case ExprKind::Filter:
      walk_expr(static_cast<const FilterExpr*>(e)->operand.get(), soft, fn);
      walk_args(static_cast<const FilterExpr*>(e)->args, soft, fn);
      break;
    case ExprKind::Test:
      walk_expr(static_cast<const TestExpr*>(e)->operand.get(), soft, fn);
      walk_args(static_cast<const TestExpr*>(e)->args, soft, fn);
      break;
    case ExprKind::Unary:
      walk_expr(static_cast<const UnaryExpr*>(e)->operand.get(), soft, fn);
      break;
    case ExprKind::Binary:
      walk_expr(static_cast<const BinaryExpr*>(e)->left.get(), soft, fn);
      walk_expr(static_cast<const BinaryExpr*>(e)->right.get(), soft, fn);
      break;
    case ExprKind::Concat:
      for (const auto& x : static_cast<const ConcatExpr*>(e)->parts) walk_expr(x.get(), soft, fn);
      break;
    case ExprKind::Compare:
      walk_expr(static_cast<const CompareExpr*>(e)->first.get(), soft, fn);
      for (const auto& [op, x] : static_cast<const CompareExpr*>(e)->rest) walk_expr(x.get(), soft, fn);
      break;
    case ExprKind::Cond: {
      auto* c = static_cast<const CondExpr*>(e);
      walk_expr(c->test.get(), true, fn);
      walk_expr(c->then.get(), true, fn);
      walk_expr(c->otherwise.get(), true, fn);
      break;
    }
    default:
      break;
  }
}

void walk_args(const CallArgsExpr& a, bool soft, const ExprVisitor& fn) {
  for (const auto& x : a.positional) walk_expr(x.get(), soft, fn);
  for (const auto& [k, x] : a.keyword) walk_expr(x.get(), soft, fn);
  walk_expr(a.dyn_args.get(), soft, fn);
  walk_expr(a.dyn_kwargs.get(), soft, fn);
}

void walk_body(const Body& body, bool soft, const ExprVisitor& fn) {
  for (const auto& st : body) {
    const Stmt* s = st.get();
    switch (s->kind) {
      case StmtKind::Print:
        walk_expr(static_cast<const PrintStmt*>(s)->expr.get(), soft, fn);
        break;
      case StmtKind::If:
        for (const auto& [t, b] : static_cast<const IfStmt*>(s)->branches) {
          walk_expr(t.get(), true, fn);
          walk_body(b, true, fn);
        }
        walk_body(static_cast<const IfStmt*>(s)->else_body, true, fn);
        break;
      case StmtKind::For: {
        auto* f = static_cast<const ForStmt*>(s);
        walk_expr(f->iter.get(), soft, fn);
        walk_expr(f->filter.get(), false, fn);
        walk_body(f->body, false, fn);
        walk_body(f->else_body, false, fn);
        break;
      }
      case StmtKind::Set:
        walk_expr(static_cast<const SetStmt*>(s)->value.get(), soft, fn);
        break;
      case StmtKind::SetBlock:
        walk_expr(static_cast<const SetBlockStmt*>(s)->filter.get(), soft, fn);
        walk_body(static_cast<const SetBlockStmt*>(s)->body, false, fn);
        break;
      case StmtKind::Macro:
        for (const auto& d : static_cast<const MacroStmt*>(s)->def.defaults) walk_expr(d.get(), false, fn);
        walk_body(static_cast<const MacroStmt*>(s)->def.body, false, fn);
        break;
      case StmtKind::CallBlock:
        walk_expr(static_cast<const CallBlockStmt*>(s)->call.get(), soft, fn);
        for (const auto& d : static_cast<const CallBlockStmt*>(s)->def.defaults) walk_expr(d.get(), false, fn);
        walk_body(static_cast<const CallBlockStmt*>(s)->def.body, false, fn);
        break;
      case StmtKind::FilterBlock:
        walk_expr(static_cast<const FilterBlockStmt*>(s)->filter.get(), soft, fn);
        walk_body(static_cast<const FilterBlockStmt*>(s)->body, false, fn);
        break;
      case StmtKind::With:
        for (const auto& [t, v] : static_cast<const WithStmt*>(s)->assignments) walk_expr(v.get(), soft, fn);
        walk_body(static_cast<const WithStmt*>(s)->body, false, fn);
        break;
      case StmtKind::Scope:
        walk_body(static_cast<const ScopeStmt*>(s)->body, false, fn);
        break;
      default:
        break;
    }
  }
}

// jinja2 rejects unknown filters and tests when compiling, except in soft frames.
void check_filters_and_tests(const Body& body) {
  walk_body(body, false, [](const Expr& e, bool soft) {
    if (soft) return;
    if (e.kind == ExprKind::Filter) {
      const auto& name = static_cast<const FilterExpr&>(e).name;
      if (!has_filter(name)) throw Error(Error::Kind::Syntax, "No filter named '" + name + "'.", e.line);
    } else if (e.kind == ExprKind::Test) {
      const auto& name = static_cast<const TestExpr&>(e).name;
      if (!has_test(name)) throw Error(Error::Kind::Syntax, "No test named '" + name + "'.", e.line);
    }
  });
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_root() {
    Body body = subparse({});
    if (cur().type != TokenType::Eof) fail("unexpected token");
    return body;
  }

 private:
  // ---------------------------------------------------------------- token stream
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  static bool is_op(const Token& t, std::string_view op) { return t.type == TokenType::Operator && t.text == op; }
  static bool is_name(const Token& t, std::string_view n) { return t.type == TokenType::Name && t.text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(cur(), op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(cur(), n)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Data:
        return "template data";
      case TokenType::BlockBegin:
        return "begin of statement block";
      case TokenType::BlockEnd:
        return "end of statement block";
      case TokenType::VarBegin:
        return "begin of print statement";
      case TokenType::VarEnd:
        return "end of print statement";
      case TokenType::Eof:
        return "end of template";
      case TokenType::String:
        return "string";
      case TokenType::Integer:
        return "integer";
      case TokenType::Float:
        return "float";
      default:
        return t.text;
    }
  }

  [[noreturn]] void fail(const std::string& msg, int line = 0) const {
    throw Error(Error::Kind::Syntax, msg, line ? line : cur().line);
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected token '" + std::string(op) + "', got '" + describe(cur()) + "'");
  }
  void expect_name(std::string_view n) {
    if (!skip_name(n)) fail("expected token '" + std::string(n) + "', got '" + describe(cur()) + "'");
  }
  std::string expect_any_name() {
    if (cur().type != TokenType::Name) fail("expected token 'name', got '" + describe(cur()) + "'");
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != TokenType::BlockEnd)
      fail("expected token 'end of statement block', got '" + describe(cur()) + "'");
    next();
  }

  // ---------------------------------------------------------------- statements
  // Parses until one of end_tags is the current tag name (the block begin has been
  // consumed and the current token is that name) or EOF.
  Body subparse(std::vector<std::string> end_tags) {
    Body body;
    while (cur().type != TokenType::Eof) {
      const Token& t = cur();
      if (t.type == TokenType::Data) {
        body.push_back(std::make_unique<TextStmt>(t.text, t.line));
        next();
      } else if (t.type == TokenType::VarBegin) {
        int line = next().line;
        ExprPtr e = parse_tuple(false, true, {}, false);
        if (cur().type != TokenType::VarEnd)
          fail("expected token 'end of print statement', got '" + describe(cur()) + "'");
        next();
        body.push_back(std::make_unique<PrintStmt>(std::move(e), line));
      } else if (t.type == TokenType::BlockBegin) {
        next();
        if (cur().type == TokenType::Name) {
          for (const auto& e : end_tags)
            if (cur().text == e) return body;
        }
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        fail("unexpected '" + describe(t) + "'");
      }
    }
    return body;
  }

  Body parse_statements(std::vector<std::string> end_tags, bool drop_needle, const std::string& tag, int start_line) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(end_tags);
    if (cur().type == TokenType::Eof) {
      std::string want;
      for (const auto& e : end_tags) want += (want.empty() ? "'" : " or '") + e + "'";
      fail("Unexpected end of template. Jinja was looking for the following tags: " + want +
               ". The innermost block that needs to be closed is '" + tag + "' (opened at line " +
               std::to_string(start_line) + ").",
           cur().line);
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    const Token& t = cur();
    if (t.type != TokenType::Name) fail("tag name expected");
    const std::string name = t.text;
    int line = t.line;
    if (name == "for") return parse_for();
    if (name == "if") return parse_if();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "with") return parse_with();
    if (name == "print") {
      next();
      ExprPtr e = parse_tuple(false, true, {}, false);
      return std::make_unique<PrintStmt>(std::move(e), line);
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a for loop is not allowed", line);
      next();
      return std::make_unique<Stmt>(name == "break" ? StmtKind::Break : StmtKind::Continue, line);
    }
    if (name == "generation") {
      next();
      auto s = std::make_unique<ScopeStmt>(line);
      s->body = parse_statements({"endgeneration"}, true, "generation", line);
      return s;
    }
    if (name == "block") {
      next();
      std::string block_name = expect_any_name();
      skip_name("scoped");
      skip_name("required");
      auto s = std::make_unique<ScopeStmt>(line);
      s->body = parse_statements({"endblock"}, true, "block", line);
      skip_name(block_name);
      return s;
    }
    if (name == "extends" || name == "include" || name == "import" || name == "from" || name == "autoescape")
      throw Error(Error::Kind::Unsupported, "unsupported template construct '{% " + name + " %}'", line);
    fail("Encountered unknown tag '" + name + "'.", line);
  }

  StmtPtr parse_for() {
    int line = next().line;
    auto s = std::make_unique<ForStmt>(line);
    s->target = parse_assign_target(true, false, {"in"}, false);
    expect_name("in");
    s->iter = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false, "for", line);
    --loop_depth_;
    if (next().text == "endfor") return s;
    s->else_body = parse_statements({"endfor"}, true, "for", line);
    return s;
  }

  StmtPtr parse_if() {
    int line = next().line;
    auto s = std::make_unique<IfStmt>(line);
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false, "if", line);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = next();
      if (t.text == "elif") continue;
      if (t.text == "else") s->else_body = parse_statements({"endif"}, true, "if", line);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    int line = next().line;
    ExprPtr target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      auto s = std::make_unique<SetStmt>(line);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = std::make_unique<SetBlockStmt>(line);
    s->target = std::move(target);
    if (is_op(cur(), "|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true, "set", line);
    return s;
  }

  void parse_signature(MacroDef& def) {
    expect_op("(");
    while (!is_op(cur(), ")")) {
      if (!def.params.empty()) expect_op(",");
      std::string arg = expect_any_name();
      if (skip_op("=")) {
        def.defaults.push_back(parse_expression(true));
      } else if (!def.defaults.empty()) {
        fail("non-default argument follows default argument");
      }
      def.params.push_back(arg);
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    int line = next().line;
    auto s = std::make_unique<MacroStmt>(line);
    s->def.name = expect_any_name();
    parse_signature(s->def);
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->def.body = parse_statements({"endmacro"}, true, "macro", line);
    loop_depth_ = saved;
    scan_special_names(s->def);
    return s;
  }

  StmtPtr parse_call_block() {
    int line = next().line;
    auto s = std::make_unique<CallBlockStmt>(line);
    s->def.name = "";  // anonymous, like jinja2's call-block macro
    if (is_op(cur(), "(")) parse_signature(s->def);
    ExprPtr call = parse_expression(true);
    if (call->kind != ExprKind::Call) fail("expected call", line);
    s->call = std::move(call);
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->def.body = parse_statements({"endcall"}, true, "call", line);
    loop_depth_ = saved;
    scan_special_names(s->def);
    return s;
  }

  StmtPtr parse_filter_block() {
    int line = next().line;
    auto s = std::make_unique<FilterBlockStmt>(line);
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true, "filter", line);
    return s;
  }

  StmtPtr parse_with() {
    int line = next().line;
    auto s = std::make_unique<WithStmt>(line);
    while (cur().type != TokenType::BlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      ExprPtr target = parse_assign_target(true, false, {}, false);
      expect_op("=");
      ExprPtr value = parse_expression(true);
      s->assignments.emplace_back(std::move(target), std::move(value));
    }
    s->body = parse_statements({"endwith"}, true, "with", line);
    return s;
  }

  // Finds references to caller/varargs/kwargs in a macro body (as jinja2 does to
  // decide which extra arguments a macro accepts).
  static void scan_special_names(MacroDef& def) {
    auto fn = [&def](const Expr& e, bool) {
      if (e.kind != ExprKind::Name) return;
      const auto& n = static_cast<const NameExpr&>(e).name;
      if (n == "caller") def.uses_caller = true;
      if (n == "varargs") def.uses_varargs = true;
      if (n == "kwargs") def.uses_kwargs = true;
    };
    for (const auto& d : def.defaults) walk_expr(d.get(), false, fn);
    walk_body(def.body, false, fn);
  }

  // ---------------------------------------------------------------- expressions
  ExprPtr parse_assign_target(bool with_tuple, bool name_only, std::vector<std::string> extra_end, bool with_namespace) {
    ExprPtr target;
    int line = cur().line;
    if (name_only) {
      target = std::make_unique<NameExpr>(expect_any_name(), line);
    } else if (with_tuple) {
      target = parse_tuple(true, true, extra_end, false, with_namespace);
    } else {
      target = parse_primary(with_namespace);
    }
    check_assignable(target.get());
    return target;
  }

  void check_assignable(const Expr* e) const {
    if (e->kind == ExprKind::Name) {
      const auto& n = static_cast<const NameExpr*>(e)->name;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        fail("can't assign to '" + n + "'", e->line);
      return;
    }
    if (e->kind == ExprKind::NSRef) return;
    if (e->kind == ExprKind::Tuple) {
      for (const auto& x : static_cast<const SeqExpr*>(e)->items) check_assignable(x.get());
      return;
    }
    fail("can't assign to this expression", e->line);
  }

  // Bounds recursion on pathological input (deeply nested brackets or blocks).
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) p_.fail("template nested too deeply");
    }
    ~DepthGuard() { --p_.nesting_; }
    Parser& p_;
  };
  static constexpr int kMaxNesting = 256;

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      auto c = std::make_unique<CondExpr>(line);
      c->test = parse_or();
      if (skip_name("else")) c->otherwise = parse_condexpr();
      c->then = std::move(expr1);
      expr1 = std::move(c);
      line = cur().line;
    }
    return expr1;
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      ExprPtr right = parse_and();
      left = std::make_unique<BinaryExpr>(BinOp::Or, std::move(left), std::move(right), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      ExprPtr right = parse_not();
      left = std::make_unique<BinaryExpr>(BinOp::And, std::move(left), std::move(right), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name(cur(), "not")) {
      int line = next().line;
      return std::make_unique<UnaryExpr>(UnaryOp::Not, parse_not(), line);
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    auto cmp = std::make_unique<CompareExpr>(line);
    while (true) {
      const Token& t = cur();
      CmpOp op;
      if (t.type == TokenType::Operator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text == "==" ? CmpOp::Eq
             : t.text == "!=" ? CmpOp::Ne
             : t.text == "<"  ? CmpOp::Lt
             : t.text == "<=" ? CmpOp::Le
             : t.text == ">"  ? CmpOp::Gt
                              : CmpOp::Ge;
        next();
      } else if (is_name(t, "in")) {
        next();
        op = CmpOp::In;
      } else if (is_name(t, "not") && is_name(look(), "in")) {
        next();
        next();
        op = CmpOp::NotIn;
      } else {
        break;
      }
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp->rest.empty()) return expr;
    cmp->first = std::move(expr);
    return cmp;
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op(cur(), "+") || is_op(cur(), "-")) {
      BinOp op = next().text == "+" ? BinOp::Add : BinOp::Sub;
      ExprPtr right = parse_concat();
      left = std::make_unique<BinaryExpr>(op, std::move(left), std::move(right), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op(cur(), "~")) return first;
    auto c = std::make_unique<ConcatExpr>(line);
    c->parts.push_back(std::move(first));
    while (skip_op("~")) c->parts.push_back(parse_math2());
    return c;
  }

  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op(cur(), "*") || is_op(cur(), "/") || is_op(cur(), "//") || is_op(cur(), "%")) {
      const std::string& o = next().text;
      BinOp op = o == "*" ? BinOp::Mul : o == "/" ? BinOp::Div : o == "//" ? BinOp::FloorDiv : BinOp::Mod;
      ExprPtr right = parse_pow();
      left = std::make_unique<BinaryExpr>(op, std::move(left), std::move(right), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      ExprPtr right = parse_unary(true);
      left = std::make_unique<BinaryExpr>(BinOp::Pow, std::move(left), std::move(right), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    int line = cur().line;
    ExprPtr node;
    if (skip_op("-")) {
      node = std::make_unique<UnaryExpr>(UnaryOp::Neg, parse_unary(false), line);
    } else if (skip_op("+")) {
      node = std::make_unique<UnaryExpr>(UnaryOp::Pos, parse_unary(false), line);
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary(bool with_namespace) {
    const Token& t = cur();
    int line = t.line;
    if (t.type == TokenType::Name) {
      std::string v = next().text;
      if (v == "true" || v == "True") return std::make_unique<ConstExpr>(Value(true), line);
      if (v == "false" || v == "False") return std::make_unique<ConstExpr>(Value(false), line);
      if (v == "none" || v == "None") return std::make_unique<ConstExpr>(Value::none(), line);
      if (with_namespace && is_op(cur(), ".")) {
        next();
        std::string attr = expect_any_name();
        return std::make_unique<NSRefExpr>(v, attr, line);
      }
      return std::make_unique<NameExpr>(v, line);
    }
    if (t.type == TokenType::String) {
      std::string buf;
      while (cur().type == TokenType::String) buf += next().text;
      return std::make_unique<ConstExpr>(Value(std::move(buf)), line);
    }
    if (t.type == TokenType::Integer) return std::make_unique<ConstExpr>(Value(next().int_value), line);
    if (t.type == TokenType::Float) return std::make_unique<ConstExpr>(Value(next().float_value), line);
    if (is_op(t, "(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op(t, "[")) return parse_list();
    if (is_op(t, "{")) return parse_dict();
    fail("unexpected '" + describe(t) + "'");
  }

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || is_op(t, ")")) return true;
    if (t.type == TokenType::Name)
      for (const auto& e : extra_end)
        if (t.text == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::vector<std::string> extra_end, bool explicit_parens,
                      bool with_namespace = false) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (is_op(cur(), ",")) {
        is_tuple = true;
      } else {
        break;
      }
      line = cur().line;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("Expected an expression, got '" + describe(cur()) + "'");
    }
    auto tup = std::make_unique<SeqExpr>(ExprKind::Tuple, line);
    tup->items = std::move(args);
    return tup;
  }

  ExprPtr parse_list() {
    int line = next().line;
    auto l = std::make_unique<SeqExpr>(ExprKind::List, line);
    while (!is_op(cur(), "]")) {
      if (!l->items.empty()) expect_op(",");
      if (is_op(cur(), "]")) break;
      l->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return l;
  }

  ExprPtr parse_dict() {
    int line = next().line;
    auto d = std::make_unique<DictExpr>(line);
    while (!is_op(cur(), "}")) {
      if (!d->items.empty()) expect_op(",");
      if (is_op(cur(), "}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      ExprPtr value = parse_expression(true);
      d->items.emplace_back(std::move(key), std::move(value));
    }
    expect_op("}");
    return d;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(cur(), ".") || is_op(cur(), "[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op(cur(), "(")) {
        node = parse_call(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op(cur(), "|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name(cur(), "is")) {
        node = parse_test(std::move(node));
      } else if (is_op(cur(), "(")) {
        node = parse_call(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    int line = t.line;
    if (t.text == ".") {
      const Token& a = next();
      if (a.type == TokenType::Name) return std::make_unique<GetAttrExpr>(std::move(node), a.text, line);
      if (a.type != TokenType::Integer) fail("expected name or number", a.line);
      auto key = std::make_unique<ConstExpr>(Value(a.int_value), a.line);
      return std::make_unique<GetItemExpr>(std::move(node), std::move(key), line);
    }
    std::vector<ExprPtr> args;
    while (!is_op(cur(), "]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      auto tup = std::make_unique<SeqExpr>(ExprKind::Tuple, line);
      tup->items = std::move(args);
      key = std::move(tup);
    }
    return std::make_unique<GetItemExpr>(std::move(node), std::move(key), line);
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    auto slice = std::make_unique<SliceExpr>(line);
    if (is_op(cur(), ":")) {
      next();
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(cur(), ":")) return node;
      next();
      slice->start = std::move(node);
    }
    if (!is_op(cur(), ":") && !is_op(cur(), "]") && !is_op(cur(), ",")) slice->stop = parse_expression(true);
    if (is_op(cur(), ":")) {
      next();
      if (!is_op(cur(), "]") && !is_op(cur(), ",")) slice->step = parse_expression(true);
    }
    return slice;
  }

  CallArgsExpr parse_call_args() {
    const Token& open = cur();
    int line = open.line;
    expect_op("(");
    CallArgsExpr a;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail("invalid syntax for function call expression", line);
    };
    while (!is_op(cur(), ")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(cur(), ")")) break;
      }
      if (is_op(cur(), "*")) {
        ensure(!a.dyn_args && !a.dyn_kwargs);
        next();
        a.dyn_args = parse_expression(true);
      } else if (is_op(cur(), "**")) {
        ensure(!a.dyn_kwargs);
        next();
        a.dyn_kwargs = parse_expression(true);
      } else if (cur().type == TokenType::Name && is_op(look(), "=")) {
        ensure(!a.dyn_kwargs);
        std::string key = next().text;
        next();
        a.keyword.emplace_back(key, parse_expression(true));
      } else {
        ensure(!a.dyn_args && !a.dyn_kwargs && a.keyword.empty());
        a.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_call(ExprPtr node) {
    int line = cur().line;
    auto c = std::make_unique<CallExpr>(line);
    c->args = parse_call_args();
    c->callee = std::move(node);
    return c;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op(cur(), "|") || start_inline) {
      if (!start_inline) next();
      int line = cur().line;
      std::string name = expect_any_name();
      while (skip_op(".")) name += "." + expect_any_name();
      auto f = std::make_unique<FilterExpr>(line);
      f->name = name;
      if (is_op(cur(), "(")) f->args = parse_call_args();
      f->operand = std::move(node);
      node = std::move(f);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = next().line;  // 'is'
    bool negated = skip_name("not");
    std::string name = expect_any_name();
    while (skip_op(".")) name += "." + expect_any_name();
    auto t = std::make_unique<TestExpr>(line);
    t->name = name;
    const Token& c = cur();
    if (is_op(c, "(")) {
      t->args = parse_call_args();
    } else if ((c.type == TokenType::Name || c.type == TokenType::String || c.type == TokenType::Integer ||
                c.type == TokenType::Float || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
      if (is_name(c, "is")) fail("You cannot chain multiple tests with is");
      ExprPtr arg = parse_primary(false);
      arg = parse_postfix(std::move(arg));
      t->args.positional.push_back(std::move(arg));
    }
    t->operand = std::move(node);
    if (negated) return std::make_unique<UnaryExpr>(UnaryOp::Not, std::move(t), line);
    return t;
  }

  std::vector<Token> toks_;
  std::size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse_template(std::string_view source, const LexerOptions& options) {
  Body body = Parser(tokenize(source, options)).parse_root();
  check_filters_and_tests(body);
  return body;
}

}  // namespace kiln::jinja
