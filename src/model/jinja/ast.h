// kiln::jinja syntax tree: expressions and statements produced by the parser.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/jinja/value.h"

namespace kiln::jinja {

// ------------------------------------------------------------------ expressions

enum class ExprKind {
  Const,
  Name,
  List,
  Tuple,
  Dict,
  GetAttr,
  GetItem,
  Slice,
  Call,
  Filter,
  Test,
  Unary,
  Binary,
  Concat,
  Compare,
  Cond,
  NSRef,
};

struct Expr {
  Expr(ExprKind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  ExprKind kind;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr(Value v, int l) : Expr(ExprKind::Const, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(std::string n, int l) : Expr(ExprKind::Name, l), name(std::move(n)) {}
  std::string name;
};

struct SeqExpr : Expr {  // List or Tuple literal
  SeqExpr(ExprKind k, int l) : Expr(k, l) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(ExprKind::Dict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(ExprPtr o, std::string a, int l) : Expr(ExprKind::GetAttr, l), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct GetItemExpr : Expr {
  GetItemExpr(ExprPtr o, ExprPtr k, int l) : Expr(ExprKind::GetItem, l), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};

struct SliceExpr : Expr {  // only as the key of a GetItemExpr; parts may be null
  explicit SliceExpr(int l) : Expr(ExprKind::Slice, l) {}
  ExprPtr start, stop, step;
};

struct CallArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr dyn_args;    // *args
  ExprPtr dyn_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  explicit CallExpr(int l) : Expr(ExprKind::Call, l) {}
  ExprPtr callee;
  CallArgsExpr args;
};

struct FilterExpr : Expr {  // operand is null inside {% filter %} / {% set x | f %}
  explicit FilterExpr(int l) : Expr(ExprKind::Filter, l) {}
  ExprPtr operand;
  std::string name;
  CallArgsExpr args;
};

struct TestExpr : Expr {
  explicit TestExpr(int l) : Expr(ExprKind::Test, l) {}
  ExprPtr operand;
  std::string name;
  CallArgsExpr args;
};

enum class UnaryOp { Neg, Pos, Not };

struct UnaryExpr : Expr {
  UnaryExpr(UnaryOp o, ExprPtr e, int l) : Expr(ExprKind::Unary, l), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, And, Or };

struct BinaryExpr : Expr {
  BinaryExpr(BinOp o, ExprPtr a, ExprPtr b, int l)
      : Expr(ExprKind::Binary, l), op(o), left(std::move(a)), right(std::move(b)) {}
  BinOp op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(int l) : Expr(ExprKind::Concat, l) {}
  std::vector<ExprPtr> parts;
};

enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct CompareExpr : Expr {
  explicit CompareExpr(int l) : Expr(ExprKind::Compare, l) {}
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};

struct CondExpr : Expr {
  explicit CondExpr(int l) : Expr(ExprKind::Cond, l) {}
  ExprPtr test, then, otherwise;  // otherwise may be null
};

struct NSRefExpr : Expr {  // `ns.attr` as an assignment target
  NSRefExpr(std::string n, std::string a, int l) : Expr(ExprKind::NSRef, l), name(std::move(n)), attr(std::move(a)) {}
  std::string name, attr;
};

// ------------------------------------------------------------------ statements

enum class StmtKind { Text, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue, Scope };

struct Stmt {
  Stmt(StmtKind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(std::string t, int l) : Stmt(StmtKind::Text, l), text(std::move(t)) {}
  std::string text;
};

struct PrintStmt : Stmt {
  PrintStmt(ExprPtr e, int l) : Stmt(StmtKind::Print, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(int l) : Stmt(StmtKind::If, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if + elifs
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(StmtKind::For, l) {}
  ExprPtr target;
  ExprPtr iter;
  ExprPtr filter;  // may be null
  bool recursive = false;
  Body body, else_body;
};

struct SetStmt : Stmt {
  explicit SetStmt(int l) : Stmt(StmtKind::Set, l) {}
  ExprPtr target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(int l) : Stmt(StmtKind::SetBlock, l) {}
  ExprPtr target;
  ExprPtr filter;  // FilterExpr chain whose innermost operand is null; may be null
  Body body;
};

// Shared by macros and call blocks.
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(StmtKind::Macro, l) {}
  MacroDef def;
};

struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(int l) : Stmt(StmtKind::CallBlock, l) {}
  ExprPtr call;  // a CallExpr
  MacroDef def;  // the caller
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(int l) : Stmt(StmtKind::FilterBlock, l) {}
  ExprPtr filter;
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(int l) : Stmt(StmtKind::With, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;
  Body body;
};

struct ScopeStmt : Stmt {  // {% block %} rendered in place, {% generation %}
  explicit ScopeStmt(int l) : Stmt(StmtKind::Scope, l) {}
  Body body;
};

}  // namespace kiln::jinja
