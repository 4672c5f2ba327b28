// Value model: construction, Python truthiness/equality/ordering, str()/repr().
#include "model/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "model/jinja/gc.h"

namespace kiln::jinja {

// ---------------------------------------------------------------- Error

static std::string decorate(Error::Kind kind, const std::string& message, int line) {
  if (kind == Error::Kind::Raised) return message;
  if (line <= 0) return message;
  return message + " (template line " + std::to_string(line) + ")";
}

Error::Error(Kind kind, std::string message, int line)
    : std::runtime_error(decorate(kind, message, line)), kind_(kind), message_(std::move(message)), line_(line) {}

Error Error::with_line(int line) const {
  if (line_ > 0 || line <= 0) return *this;
  return Error(kind_, message_, line);
}

void throw_type_error(const std::string& message) { throw Error(Error::Kind::Type, message); }

// ---------------------------------------------------------------- Dict

const Value* Dict::find(const Value& key) const {
  auto it = index_.find(py_hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

Value* Dict::find(const Value& key) {
  auto it = index_.find(py_hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(const Value& key, Value value) {
  std::string h = py_hash_key(key);
  auto it = index_.find(h);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(h), entries_.size());
  entries_.emplace_back(key, std::move(value));
}

bool Dict::erase(const Value& key) {
  auto it = index_.find(py_hash_key(key));
  if (it == index_.end()) return false;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (std::size_t i = 0; i < entries_.size(); ++i) index_.emplace(py_hash_key(entries_[i].first), i);
  return true;
}

void Dict::clear() {
  entries_.clear();
  index_.clear();
}

// ---------------------------------------------------------------- Value

Value Value::undefined(std::string hint, bool security) {
  Value v(Kind::Undefined);
  v.flag_ = security;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value::Value(std::string s, bool markup) : kind_(Kind::String), flag_(markup) {
  s_ = std::make_shared<const std::string>(std::move(s));
}

Value Value::list(ValueList items) {
  Value v(Kind::List);
  v.list_ = std::make_shared<ValueList>(std::move(items));
  gc_track(v.list_);
  return v;
}

Value Value::tuple(ValueList items) {
  Value v(Kind::Tuple);
  v.list_ = std::make_shared<ValueList>(std::move(items));
  gc_track(v.list_);
  return v;
}

Value Value::dict() { return dict(std::make_shared<Dict>()); }

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v(Kind::Dict);
  v.dict_ = std::move(d);
  gc_track(v.dict_);
  return v;
}

Value Value::namespace_(std::shared_ptr<Dict> d) {
  Value v(Kind::Namespace);
  v.dict_ = std::move(d);
  gc_track(v.dict_);
  return v;
}

Value Value::callable(std::shared_ptr<Callable> c) {
  Value v(Kind::Callable);
  v.callable_ = std::move(c);
  gc_track(v.callable_);
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v(Kind::Object);
  v.object_ = std::move(o);
  gc_track(v.object_);
  return v;
}

Value Value::iterator(IterFlavor flavor, std::vector<Value> items, std::string type_name, std::string origin) {
  Value v(Kind::Iterator);
  v.iter_ = std::make_shared<IterState>();
  v.iter_->flavor = flavor;
  v.iter_->items = std::move(items);
  v.iter_->type_name = std::move(type_name);
  v.iter_->origin = std::move(origin);
  gc_track(v.iter_);
  return v;
}

Value Value::group_tuple(Value grouper, Value list) {
  Value v = tuple({std::move(grouper), std::move(list)});
  v.flag_ = true;
  return v;
}

const std::string& Value::str() const {
  static const std::string empty;  // immutable
  return s_ ? *s_ : empty;
}

bool Value::is_callable() const {
  return kind_ == Kind::Callable || (kind_ == Kind::Object && object_->as_callable() != nullptr);
}

Callable* Value::callable_ptr() const {
  if (kind_ == Kind::Callable) return callable_.get();
  if (kind_ == Kind::Object) return object_->as_callable();
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0.0;
    case Kind::String:
      return !s_->empty();
    case Kind::List:
    case Kind::Tuple:
      return !list_->empty();
    case Kind::Dict:
      return !dict_->empty();
    case Kind::Iterator:
      return !iter_->is_view() || !iter_->items.empty();
    default:
      return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return flag_ ? "Markup" : "str";
    case Kind::List:
      return "list";
    case Kind::Tuple:
      return "tuple";
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Callable:
      return "function";
    case Kind::Object:
      return object_->type_name();
    case Kind::Iterator:
      return iter_->type_name;
  }
  return "object";
}

std::string Value::undefined_message() const {
  if (s_ && !s_->empty()) return *s_;
  return "value is undefined";
}

void Value::fail_undefined() const {
  throw Error(flag_ ? Error::Kind::Security : Error::Kind::Undefined, undefined_message());
}

// ---------------------------------------------------------------- UTF-8

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int n;
    if (c < 0x80) {
      cp = c;
      n = 1;
    } else if ((c >> 5) == 6) {
      cp = c & 0x1F;
      n = 2;
    } else if ((c >> 4) == 14) {
      cp = c & 0x0F;
      n = 3;
    } else if ((c >> 3) == 30) {
      cp = c & 0x07;
      n = 4;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    if (i + static_cast<std::size_t>(n) > s.size()) {
      out.push_back(0xFFFD);
      break;
    }
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((cc >> 6) != 2) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(n);
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t py_toupper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c == 0xB5) return 0x39C;
  if (c == 0xFF) return 0x178;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x1C4 && c <= 0x1CC) return c - (c - 0x1C4) % 3;  // DŽ Dž dž, LJ Lj lj, NJ Nj nj
  if (c >= 0x1F1 && c <= 0x1F3) return 0x1F1;
  if (c >= 0x1E00 && c <= 0x1EFF && !(c >= 0x1E96 && c <= 0x1E9F)) return (c % 2 == 1) ? c - 1 : c;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t py_tolower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x1C4 && c <= 0x1CC) return c + 2 - (c - 0x1C4) % 3;
  if (c >= 0x1F1 && c <= 0x1F3) return 0x1F3;
  if (c >= 0x1E00 && c <= 0x1EFF && !(c >= 0x1E96 && c <= 0x1E9F)) return (c % 2 == 0) ? c + 1 : c;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool py_isdigit(char32_t c) { return c >= '0' && c <= '9'; }

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (c < 0xC0 || c == 0xD7 || c == 0xF7) return false;
  if (py_isspace(c)) return false;
  if (c >= 0x2000 && c <= 0x2BFF) return false;  // punctuation, symbols, arrows...
  if (c >= 0x3000 && c <= 0x303F) return false;  // CJK punctuation
  if (c >= 0xFF00 && c <= 0xFF20) return false;
  if (c >= 0x1F000) return false;  // emoji and symbols
  if (c >= 0xE000 && c <= 0xF8FF) return false;
  return true;
}

bool py_isalnum(char32_t c) { return py_isalpha(c) || py_isdigit(c); }

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) {
    if (c == 0xDF) {
      out += "SS";
      continue;
    }
    utf8_append(out, py_toupper(c));
  }
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) {
    if (c == 0x130) {  // 'İ'.lower() == 'i̇'
      out += "i\xCC\x87";
      continue;
    }
    utf8_append(out, py_tolower(c));
  }
  return out;
}

std::string py_strip(std::string_view s, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && py_isspace(u[b])) ++b;
  if (right)
    while (e > b && py_isspace(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::string py_strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = utf8_decode(chars);
  auto in = [&](char32_t c) { return set.find(c) != std::u32string::npos; };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && in(u[b])) ++b;
  if (right)
    while (e > b && in(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

// ---------------------------------------------------------------- str() / repr()

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci = [-]D[.DDD]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  std::size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp10 = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;  // position of the decimal point relative to digits
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
    } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
      out = digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<std::size_t>(decpt)) + "." + digits.substr(static_cast<std::size_t>(decpt));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    int e = decpt - 1;
    out += e < 0 ? "e-" : "e+";
    int ae = e < 0 ? -e : e;
    if (ae < 10) out += "0";
    out += std::to_string(ae);
  }
  return neg ? "-" + out : out;
}

static bool py_isprintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD) return false;
  if (c >= 0x2000 && c <= 0x200F) return false;
  if (c >= 0x2028 && c <= 0x202F) return false;
  if (c >= 0x205F && c <= 0x206F) return false;
  if (c == 0x3000 || c == 0xFEFF) return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  if (c >= 0xE000 && c <= 0xF8FF) return false;
  if (c >= 0xFFF0 && c <= 0xFFFF) return false;
  return true;
}

std::string py_string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.push_back(quote);
  char buf[16];
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (py_isprintable(c)) {
      utf8_append(out, c);
    } else if (c < 0x100) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

static void repr_into(std::string& out, const Value& v);

namespace {

// The lists, tuples and dicts whose repr is being built on this thread: like
// Python's Py_ReprEnter, a container met again inside itself (a namespace or, in
// the mutable sandbox, a list or dict that holds itself) prints as [...], (...)
// or {...} instead of recursing forever.
thread_local std::vector<const void*> t_repr_active;

class ReprGuard {
 public:
  explicit ReprGuard(const void* container) {
    for (const void* p : t_repr_active) recursive_ = recursive_ || p == container;
    if (!recursive_) t_repr_active.push_back(container);
  }
  ~ReprGuard() {
    if (!recursive_) t_repr_active.pop_back();
  }
  ReprGuard(const ReprGuard&) = delete;
  ReprGuard& operator=(const ReprGuard&) = delete;
  bool recursive() const { return recursive_; }

 private:
  bool recursive_ = false;
};

}  // namespace

static void dict_repr_into(std::string& out, const Dict& d) {
  ReprGuard guard(&d);
  if (guard.recursive()) {
    out += "{...}";
    return;
  }
  out.push_back('{');
  bool first = true;
  for (const auto& [k, val] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    repr_into(out, k);
    out += ": ";
    repr_into(out, val);
  }
  out.push_back('}');
}

static void repr_into(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Kind::String:
      if (v.is_markup()) {
        out += "Markup(" + py_string_repr(v.str()) + ")";
      } else {
        out += py_string_repr(v.str());
      }
      return;
    case Kind::Undefined:
      out += "Undefined";
      return;
    case Kind::List:
    case Kind::Tuple: {
      bool tuple = v.is_tuple();
      ReprGuard guard(v.list_ptr().get());
      if (guard.recursive()) {
        out += tuple ? "(...)" : "[...]";
        return;
      }
      out.push_back(tuple ? '(' : '[');
      const auto& items = v.items();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, items[i]);
      }
      if (tuple && items.size() == 1) out.push_back(',');
      out.push_back(tuple ? ')' : ']');
      return;
    }
    case Kind::Dict:
      dict_repr_into(out, v.dict_ref());
      return;
    case Kind::Iterator: {
      const IterState& it = v.iter_state();
      if (it.is_view()) {
        out += it.type_name + "([";
        for (std::size_t i = 0; i < it.items.size(); ++i) {
          if (i) out += ", ";
          repr_into(out, it.items[i]);
        }
        out += "])";
      } else if (it.flavor == IterState::Flavor::Generator) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(&it));
        out += "<generator object " + it.origin + " at " + buf + ">";
      } else {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(&it));
        out += "<" + it.type_name + " object at " + buf + ">";
      }
      return;
    }
    default:
      out += py_str(v);
  }
}

std::string py_repr(const Value& v) {
  std::string out;
  repr_into(out, v);
  return out;
}

std::string py_str(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Kind::Int:
      return std::to_string(v.as_int());
    case Kind::Float:
      return py_float_repr(v.as_double());
    case Kind::String:
      return v.str();
    case Kind::Namespace: {
      std::string out = "<Namespace ";
      dict_repr_into(out, v.dict_ref());
      return out + ">";
    }
    case Kind::Callable:
      return v.callable_shared()->repr();
    case Kind::Object:
      return v.object_ptr()->repr();
    default:
      return py_repr(v);
  }
}

// ---------------------------------------------------------------- comparisons

namespace {

// Nesting depth of the list/tuple/dict comparisons running on this thread: two
// distinct containers that hold themselves (mutable sandbox) would otherwise
// compare forever; Python raises RecursionError there.
constexpr int kMaxCompareDepth = 500;
thread_local int t_compare_depth = 0;

class CompareDepth {
 public:
  CompareDepth() {
    if (t_compare_depth >= kMaxCompareDepth)
      throw Error(Error::Kind::Runtime, "maximum recursion depth exceeded in comparison");
    ++t_compare_depth;
  }
  ~CompareDepth() { --t_compare_depth; }
  CompareDepth(const CompareDepth&) = delete;
  CompareDepth& operator=(const CompareDepth&) = delete;
};

}  // namespace

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return a.str() == b.str();
    case Kind::List:
    case Kind::Tuple: {
      // A container equals itself: Python compares elements by identity first.
      if (a.list_ptr() == b.list_ptr()) return true;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      CompareDepth depth;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.dict_ptr() == b.dict_ptr()) return true;
      const Dict& x = a.dict_ref();
      const Dict& y = b.dict_ref();
      if (x.size() != y.size()) return false;
      CompareDepth depth;
      for (const auto& [k, v] : x.entries()) {
        const Value* o = y.find(k);
        if (!o || !py_equal(v, *o)) return false;
      }
      return true;
    }
    case Kind::Namespace:
      return a.dict_ptr() == b.dict_ptr();
    case Kind::Callable:
      return a.callable_shared() == b.callable_shared();
    case Kind::Object:
      return a.object_ptr() == b.object_ptr();
    case Kind::Iterator:
      return a.iter_ptr() == b.iter_ptr();
    default:
      return false;
  }
}

int py_compare(const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    std::int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    if (a.list_ptr() == b.list_ptr()) return 0;
    const auto& x = a.items();
    const auto& y = b.items();
    CompareDepth depth;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw_type_error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::string py_hash_key(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return "U";
    case Kind::None:
      return "N";
    case Kind::Bool:
    case Kind::Int:
      return "i" + std::to_string(v.as_int());
    case Kind::Float: {
      double d = v.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return "i" + std::to_string(static_cast<std::int64_t>(d));
      return "f" + py_float_repr(d);
    }
    case Kind::String:
      return "s" + v.str();
    case Kind::Tuple: {
      std::string out = "t";
      for (const auto& x : v.items()) {
        std::string k = py_hash_key(x);
        out += std::to_string(k.size()) + ":" + k;
      }
      return out;
    }
    case Kind::Namespace:
    case Kind::Callable:
    case Kind::Object:
    case Kind::Iterator: {
      if (v.is_iterator() && (v.iter_state().flavor == IterState::Flavor::DictKeys ||
                              v.iter_state().flavor == IterState::Flavor::DictItems))
        throw_type_error("unhashable type: '" + v.type_name() + "'");
      char buf[32];
      const void* p = v.is_namespace()               ? static_cast<const void*>(v.dict_ptr().get())
                      : v.kind() == Kind::Callable ? static_cast<const void*>(v.callable_shared().get())
                      : v.is_iterator()            ? static_cast<const void*>(v.iter_ptr().get())
                                                   : static_cast<const void*>(v.object_ptr());
      std::snprintf(buf, sizeof buf, "p%p", p);
      return buf;
    }
    default:
      throw_type_error("unhashable type: '" + v.type_name() + "'");
  }
}

bool py_is_iterable(const Value& v) {
  switch (v.kind()) {
    case Kind::Iterator:
    case Kind::Undefined:
    case Kind::String:
    case Kind::List:
    case Kind::Tuple:
    case Kind::Dict:
      return true;
    default:
      return false;
  }
}

ValueList py_iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return {};
    case Kind::String: {
      ValueList out;
      std::string ch;
      for (char32_t c : utf8_decode(v.str())) {
        ch.clear();
        utf8_append(ch, c);
        out.emplace_back(ch);
      }
      return out;
    }
    case Kind::List:
    case Kind::Tuple:
      return v.items();
    case Kind::Dict: {
      ValueList out;
      for (const auto& kv : v.dict_ref().entries()) out.push_back(kv.first);
      return out;
    }
    case Kind::Iterator: {
      IterState& it = v.iter_state();
      if (it.is_view()) return it.items;
      ValueList out(it.items.begin() + static_cast<std::ptrdiff_t>(it.pos), it.items.end());
      it.pos = it.items.size();
      return out;
    }
    default:
      throw_type_error("'" + v.type_name() + "' object is not iterable");
  }
}

std::int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return 0;
    case Kind::String:
      return static_cast<std::int64_t>(utf8_length(v.str()));
    case Kind::List:
    case Kind::Tuple:
      return static_cast<std::int64_t>(v.items().size());
    case Kind::Dict:
      return static_cast<std::int64_t>(v.dict_ref().size());
    case Kind::Iterator:
      if (v.iter_state().is_view()) return static_cast<std::int64_t>(v.iter_state().items.size());
      [[fallthrough]];
    default:
      throw_type_error("object of type '" + v.type_name() + "' has no len()");
  }
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::Undefined:
      return false;
    case Kind::String:
      if (!item.is_string())
        throw_type_error("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
      for (const auto& x : container.items())
        if (py_equal(x, item)) return true;
      return false;
    case Kind::Dict:
      return container.dict_ref().find(item) != nullptr;
    case Kind::Iterator: {
      IterState& it = container.iter_state();
      std::size_t start = it.is_view() ? 0 : it.pos;
      for (std::size_t i = start; i < it.items.size(); ++i) {
        if (py_equal(it.items[i], item)) {
          if (!it.is_view()) it.pos = i + 1;
          return true;
        }
      }
      if (!it.is_view()) it.pos = it.items.size();
      return false;
    }
    default:
      throw_type_error("argument of type '" + container.type_name() + "' is not iterable");
  }
}

}  // namespace kiln::jinja
