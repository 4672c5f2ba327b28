// Built-in Jinja tests (`x is defined`, `x is divisibleby 3`, ...), as in jinja2's tests.py.
#include "model/jinja/builtins.h"

namespace kiln::jinja {

namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

const Value& one_arg(const CallArgs& a, const char* name) {
  ArgBinder b(a, name, {"other"});
  if (!b.has(0)) throw Error(Error::Kind::Type, std::string(name) + "() missing 1 required positional argument");
  return b.get(0);
}

void no_args(const CallArgs& a, const char* name) { ArgBinder(a, name, {}); }

Value int_mod(const Value& v, const Value& m) {
  if (v.is_undefined()) v.fail_undefined();
  return py_mod(v, m);
}

bool t_odd(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "odd");
  return py_equal(int_mod(v, Value(2)), Value(1));
}
bool t_even(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "even");
  return py_equal(int_mod(v, Value(2)), Value(0));
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "divisibleby", {"num"});
  if (!b.has(0)) throw Error(Error::Kind::Type, "divisibleby() missing 1 required positional argument: 'num'");
  return py_equal(int_mod(v, b.get(0)), Value(0));
}
bool t_defined(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "defined");
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "undefined");
  return v.is_undefined();
}
bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "filter");
  return v.is_string() && has_filter(v.str());
}
bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "test");
  return v.is_string() && has_test(v.str());
}
bool t_none(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "none");
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "boolean");
  return v.is_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "false");
  return v.is_bool() && !v.as_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "true");
  return v.is_bool() && v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "integer");
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "float");
  return v.is_float();
}
bool has_cased(const std::u32string& u, bool want_lower) {
  bool cased = false;
  for (char32_t c : u) {
    bool is_lower = py_toupper(c) != c;
    bool is_upper = py_tolower(c) != c;
    if (want_lower ? is_upper : is_lower) return false;
    if (is_lower || is_upper) cased = true;
  }
  return cased;
}
bool t_lower(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "lower");
  return has_cased(utf8_decode(py_str(v)), true);
}
bool t_upper(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "upper");
  return has_cased(utf8_decode(py_str(v)), false);
}
bool t_string(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "string");
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "mapping");
  return v.is_dict();
}
bool t_number(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "number");
  return v.is_number();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "sequence");
  return v.is_string() || v.is_sequence() || v.is_dict();
}
bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "iterable");
  return py_is_iterable(v);
}
bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "callable");
  return v.is_callable() || v.is_undefined();
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = one_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::None:
    case Kind::Undefined:
      return v.is_none() || false;
    case Kind::Bool:
      return v.as_bool() == o.as_bool();
    case Kind::Int:
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Kind::List:
    case Kind::Tuple:
      return v.list_ptr() == o.list_ptr();
    case Kind::Dict:
    case Kind::Namespace:
      return v.dict_ptr() == o.dict_ptr();
    case Kind::Callable:
    case Kind::Object:
    case Kind::Iterator:
      return py_equal(v, o);
    case Kind::String:  // string constants are interned by Python
      return v.str() == o.str();
    default:
      return false;
  }
}
bool t_escaped(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "escaped");
  return v.is_markup();
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "in", {"seq"});
  if (!b.has(0)) throw Error(Error::Kind::Type, "test_in() missing 1 required positional argument: 'seq'");
  return py_contains(b.get(0), v);
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return py_equal(v, one_arg(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !py_equal(v, one_arg(a, "ne")); }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, one_arg(a, "gt")) > 0; }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, one_arg(a, "ge")) >= 0; }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, one_arg(a, "lt")) < 0; }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, one_arg(a, "le")) <= 0; }

struct TestEntry {
  const char* name;
  TestFn fn;
};

const TestEntry kTests[] = {
    {"odd", t_odd},         {"even", t_even},         {"divisibleby", t_divisibleby},
    {"defined", t_defined}, {"undefined", t_undefined}, {"filter", t_filter},
    {"test", t_test},       {"none", t_none},         {"boolean", t_boolean},
    {"false", t_false},     {"true", t_true},         {"integer", t_integer},
    {"float", t_float},     {"lower", t_lower},       {"upper", t_upper},
    {"string", t_string},   {"mapping", t_mapping},   {"number", t_number},
    {"sequence", t_sequence}, {"iterable", t_iterable}, {"callable", t_callable},
    {"sameas", t_sameas},   {"escaped", t_escaped},   {"in", t_in},
    {"==", t_eq},           {"eq", t_eq},             {"equalto", t_eq},
    {"!=", t_ne},           {"ne", t_ne},             {">", t_gt},
    {"gt", t_gt},           {"greaterthan", t_gt},    {"ge", t_ge},
    {">=", t_ge},           {"<", t_lt},              {"lt", t_lt},
    {"lessthan", t_lt},     {"<=", t_le},             {"le", t_le},
};

const TestEntry* find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (name == t.name) return &t;
  return nullptr;
}

}  // namespace

bool has_test(std::string_view name) { return find_test(name) != nullptr; }

bool call_test(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args) {
  const TestEntry* t = find_test(name);
  if (!t) throw Error(Error::Kind::Unsupported, "No test named '" + name + "'.");
  return t->fn(interp, value, args);
}

}  // namespace kiln::jinja
