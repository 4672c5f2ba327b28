// kiln::jinja value model: Python-like dynamic values as Jinja templates see them
// (None, bool, int, float, str, list, tuple, dict, namespace, callables, undefined),
// with Python's truthiness, equality, ordering and str()/repr() formatting.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::jinja {

// Error raised while parsing or rendering a template.
class Error : public std::runtime_error {
 public:
  enum class Kind {
    Syntax,       // template does not parse (jinja2 TemplateSyntaxError)
    Undefined,    // use of an undefined value (jinja2 UndefinedError)
    Type,         // wrong operand / argument types (Python TypeError / ValueError ...)
    Security,     // blocked by the sandbox (jinja2 SecurityError)
    Unsupported,  // construct this interpreter does not implement
    Raised,       // raise_exception('...') called by the template
    Runtime,      // other runtime failures (jinja2 TemplateRuntimeError ...)
  };
  Error(Kind kind, std::string message, int line = 0);
  Kind kind() const { return kind_; }
  int line() const { return line_; }
  // The message without the "line N" decoration (for Raised: exactly the text passed
  // to raise_exception).
  const std::string& message() const { return message_; }
  // Attaches a line number to an error thrown without one.
  Error with_line(int line) const;

 private:
  Kind kind_;
  std::string message_;
  int line_;
};

[[noreturn]] void throw_type_error(const std::string& message);

class Value;
class Interpreter;
struct CallArgs;

enum class Kind : std::uint8_t {
  Undefined,
  None,
  Bool,
  Int,
  Float,
  String,
  List,
  Tuple,
  Dict,
  Namespace,
  Callable,
  Object,
  Iterator,  // a Python generator / iterator (single pass) or dict view
};

// Kinds of Iterator values (see IterState).
enum class IterFlavor { Generator, ReverseIterator, DictKeys, DictValues, DictItems };
struct IterState;

using ValueList = std::vector<Value>;

class Dict;
class GcVisitor;

// A callable value: macro, builtin function, bound method, caller...
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Interpreter& interp, CallArgs& args) = 0;
  virtual std::string repr() const = 0;
  // For the render's cycle collector (gc.h): gc_trace reports every Value, frame,
  // callable or object this one holds a strong reference to, and gc_clear drops them
  // all. A subclass that holds any must override both (one that reports nothing is
  // never freed from a cycle, one that reports too much can lose live values).
  virtual void gc_trace(GcVisitor&) const {}
  virtual void gc_clear() {}
};

// An opaque object with attributes (loop, cycler, joiner).
class Object {
 public:
  virtual ~Object() = default;
  // Returns an Undefined value when there is no such attribute.
  virtual Value get_attr(const std::string& name) = 0;
  virtual std::string repr() const = 0;
  virtual const char* type_name() const = 0;
  // Makes the object callable (recursive loop); null when it is not.
  virtual Callable* as_callable() { return nullptr; }
  // As Callable::gc_trace / gc_clear.
  virtual void gc_trace(GcVisitor&) const {}
  virtual void gc_clear() {}
};

class Value {
 public:
  Value() : kind_(Kind::Undefined) {}
  static Value undefined(std::string hint = {}, bool security = false);
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), i_(b ? 1 : 0) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(std::int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s, bool markup = false);
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  static Value list(ValueList items = {});
  static Value tuple(ValueList items);
  static Value dict();
  static Value dict(std::shared_ptr<Dict> d);
  static Value namespace_(std::shared_ptr<Dict> d);
  static Value callable(std::shared_ptr<Callable> c);
  static Value object(std::shared_ptr<Object> o);
  static Value iterator(IterFlavor flavor, std::vector<Value> items, std::string type_name, std::string origin = {});
  static Value generator(std::vector<Value> items, std::string origin) {
    return iterator(IterFlavor::Generator, std::move(items), "generator", std::move(origin));
  }
  // The (grouper, list) named tuples of the groupby filter.
  static Value group_tuple(Value grouper, Value list);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }  // excludes bool
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::Tuple; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_mapping() const { return kind_ == Kind::Dict || kind_ == Kind::Namespace; }
  bool is_callable() const;
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_iterator() const { return kind_ == Kind::Iterator; }
  bool is_group_tuple() const { return kind_ == Kind::Tuple && flag_; }
  IterState& iter_state() const { return *iter_; }
  const std::shared_ptr<IterState>& iter_ptr() const { return iter_; }
  bool is_markup() const { return kind_ == Kind::String && flag_; }
  bool is_security_undefined() const { return kind_ == Kind::Undefined && flag_; }

  bool as_bool() const { return i_ != 0; }
  std::int64_t as_int() const { return kind_ == Kind::Float ? static_cast<std::int64_t>(f_) : i_; }
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  const std::string& str() const;           // String value or Undefined hint
  ValueList& items() const { return *list_; }  // List / Tuple
  Dict& dict_ref() const { return *dict_; }    // Dict / Namespace
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  const std::shared_ptr<ValueList>& list_ptr() const { return list_; }
  Callable* callable_ptr() const;  // Callable, or callable Object; null otherwise
  const std::shared_ptr<Callable>& callable_shared() const { return callable_; }
  Object* object_ptr() const { return object_.get(); }
  const std::shared_ptr<Object>& object_shared() const { return object_; }

  // Python semantics
  bool truthy() const;
  std::string type_name() const;  // Python type name ('str', 'dict', ...)
  // Message for using this undefined value ("'x' is undefined").
  std::string undefined_message() const;
  [[noreturn]] void fail_undefined() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_;
  bool flag_ = false;  // markup for strings, security error for undefined
  union {
    std::int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> callable_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<IterState> iter_;
};

// Insertion-ordered dictionary keyed by hashable values (like a Python dict).
class Dict {
 public:
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  void set(const Value& key, Value value);
  bool erase(const Value& key);
  void clear();
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, std::size_t> index_;
};

// Iterators that filters like map/select return (Python generators), reverse
// iterators, and dict views (keys()/values()/items(), which can be re-iterated).
struct IterState {
  using Flavor = IterFlavor;
  Flavor flavor = Flavor::Generator;
  std::string type_name;  // Python type name: generator, list_reverseiterator, dict_items...
  std::string origin;     // generator function name for repr (sync_do_map, ...)
  std::vector<Value> items;
  std::size_t pos = 0;
  bool is_view() const { return flavor == Flavor::DictKeys || flavor == Flavor::DictValues || flavor == Flavor::DictItems; }
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// ---- Python-like operations (throw Error on type errors) ----
std::string py_str(const Value& v);   // str(v)
std::string py_repr(const Value& v);  // repr(v)
std::string py_float_repr(double d);  // repr(float)
std::string py_string_repr(std::string_view s);
bool py_equal(const Value& a, const Value& b);
// Three-way comparison for <, <=, >, >=: -1, 0, 1; throws a type error when unorderable.
int py_compare(const Value& a, const Value& b);
// Key that identifies a hashable value for dict lookup (Python hash/eq classes).
std::string py_hash_key(const Value& v);
// Elements for iteration (for loops, list(), filters): strings yield characters,
// dicts their keys, undefined nothing. Throws for non-iterables.
ValueList py_iterate(const Value& v);
bool py_is_iterable(const Value& v);
// len(); throws for values without length.
std::int64_t py_len(const Value& v);
bool py_contains(const Value& container, const Value& item);  // `item in container`

// ---- UTF-8 helpers ----
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
std::size_t utf8_length(std::string_view s);
bool py_isspace(char32_t c);
char32_t py_toupper(char32_t c);
char32_t py_tolower(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
bool py_isalnum(char32_t c);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_strip(std::string_view s, bool left, bool right);
std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right);

}  // namespace kiln::jinja
