// Internal interfaces between the evaluator and the built-in operators, filters,
// tests, methods, globals, string formatting and JSON serialisation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/jinja/interpreter.h"
#include "model/jinja/value.h"

namespace kiln::jinja {

// ---- checked 64-bit integer arithmetic (true on overflow) ----
inline bool checked_add(std::int64_t a, std::int64_t b, std::int64_t* r) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_add_overflow(a, b, r);
#else
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return true;
  *r = a + b;
  return false;
#endif
}
inline bool checked_sub(std::int64_t a, std::int64_t b, std::int64_t* r) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_sub_overflow(a, b, r);
#else
  if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) return true;
  *r = a - b;
  return false;
#endif
}
inline bool checked_mul(std::int64_t a, std::int64_t b, std::int64_t* r) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_mul_overflow(a, b, r);
#else
  if (a == 0 || b == 0) {
    *r = 0;
    return false;
  }
  if ((a == -1 && b == INT64_MIN) || (b == -1 && a == INT64_MIN)) return true;
  bool over = a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a) : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b);
  if (over) return true;
  *r = a * b;
  return false;
#endif
}

// ---- operators (ops.cpp) ----
Value py_add(const Value& a, const Value& b);
Value py_sub(const Value& a, const Value& b);
Value py_mul(const Value& a, const Value& b);
Value py_truediv(const Value& a, const Value& b);
Value py_floordiv(const Value& a, const Value& b);
Value py_mod(const Value& a, const Value& b);
Value py_pow(const Value& a, const Value& b);
Value py_neg(const Value& a);
Value py_pos(const Value& a);
std::string html_escape(std::string_view s);
// Python slicing of a str/list/tuple; absent bounds are null.
Value py_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
// Python int() / float() conversions used by filters and methods (throw on failure).
std::int64_t py_to_int(const Value& v);
double py_to_float(const Value& v);

// ---- string formatting (format.cpp) ----
std::string percent_format(const std::string& fmt, const Value& args);  // fmt % args
std::string str_format(const std::string& fmt, const CallArgs& args);   // fmt.format(...)

// ---- filters (filters.cpp) / tests (tests.cpp) ----
bool has_filter(std::string_view name);
Value call_filter(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args);
bool has_test(std::string_view name);
bool call_test(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args);

// ---- methods and globals (methods.cpp) ----
// The bound method `obj.name` when obj's Python type has that attribute
// (a security-error Undefined for blocked mutating methods), or nullopt.
std::optional<Value> builtin_method(Interpreter& interp, const Value& obj, const std::string& name);
// Global functions every template sees: range, dict, namespace, cycler, joiner.
std::optional<Value> builtin_global(const std::string& name);

// ---- JSON (json.cpp) ----
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;                  // used when has_indent
  std::string item_separator = ", ";   // Python default (", " or "," with indent)
  std::string key_separator = ": ";
};
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

// ---- argument binding for builtins (filters.cpp) ----
// Binds positional and keyword arguments to a Python-like signature.
class ArgBinder {
 public:
  ArgBinder(const CallArgs& args, std::string_view func, std::initializer_list<const char*> names);
  bool has(std::size_t i) const { return slots_[i] != nullptr; }
  const Value& get(std::size_t i) const { return *slots_[i]; }
  Value get_or(std::size_t i, Value fallback) const { return slots_[i] ? *slots_[i] : fallback; }

 private:
  std::vector<const Value*> slots_;
};

}  // namespace kiln::jinja
