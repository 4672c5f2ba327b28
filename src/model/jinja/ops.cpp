// Python arithmetic, slicing and numeric conversions on Values.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "model/jinja/builtins.h"

namespace kiln::jinja {

namespace {

void check_defined(const Value& a, const Value& b) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
}

[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  throw_type_error(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
}

[[noreturn]] void overflow() { throw Error(Error::Kind::Unsupported, "integer overflow (beyond 64 bits)"); }

[[noreturn]] void zero_division(const char* what) { throw Error(Error::Kind::Type, what); }

Value repeat(const Value& seq, std::int64_t n) {
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 28;
  std::int64_t unit = seq.is_string() ? static_cast<std::int64_t>(seq.str().size())
                                      : static_cast<std::int64_t>(seq.items().size());
  if (n > 0 && unit > 0 && n > kMaxElements / unit)
    throw Error(Error::Kind::Runtime, "sequence repetition result too large");
  if (seq.is_string()) {
    std::string out;
    for (std::int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out), seq.is_markup());
  }
  ValueList out;
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
  if (m == 0.0) m = std::copysign(0.0, b);
  return m;
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

Value py_add(const Value& a, const Value& b) {
  check_defined(a, b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_double() + b.as_double());
    std::int64_t r;
    if (checked_add(a.as_int(), b.as_int(), &r)) overflow();
    return Value(r);
  }
  if (a.is_string() && b.is_string()) {
    if (a.is_markup() && !b.is_markup()) return Value(a.str() + html_escape(b.str()), true);
    if (!a.is_markup() && b.is_markup()) return Value(html_escape(a.str()) + b.str(), true);  // Markup.__radd__
    return Value(a.str() + b.str(), a.is_markup());
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    ValueList out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (a.is_string() && !b.is_string())
    throw_type_error("can only concatenate str (not \"" + b.type_name() + "\") to str");
  if (a.is_list() && !b.is_list())
    throw_type_error("can only concatenate list (not \"" + b.type_name() + "\") to list");
  unsupported_operands("+", a, b);
}

Value py_sub(const Value& a, const Value& b) {
  check_defined(a, b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_double() - b.as_double());
    std::int64_t r;
    if (checked_sub(a.as_int(), b.as_int(), &r)) overflow();
    return Value(r);
  }
  unsupported_operands("-", a, b);
}

Value py_mul(const Value& a, const Value& b) {
  check_defined(a, b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_double() * b.as_double());
    std::int64_t r;
    if (checked_mul(a.as_int(), b.as_int(), &r)) overflow();
    return Value(r);
  }
  if ((a.is_string() || a.is_sequence()) && b.is_integral()) return repeat(a, b.as_int());
  if (a.is_integral() && (b.is_string() || b.is_sequence())) return repeat(b, a.as_int());
  if ((a.is_string() || a.is_sequence()) || (b.is_string() || b.is_sequence()))
    throw_type_error("can't multiply sequence by non-int of type '" +
                     ((a.is_string() || a.is_sequence()) ? b.type_name() : a.type_name()) + "'");
  unsupported_operands("*", a, b);
}

Value py_truediv(const Value& a, const Value& b) {
  check_defined(a, b);
  if (a.is_number() && b.is_number()) {
    if (b.as_double() == 0.0) zero_division(b.is_float() ? "float division by zero" : "division by zero");
    return Value(a.as_double() / b.as_double());
  }
  unsupported_operands("/", a, b);
}

Value py_floordiv(const Value& a, const Value& b) {
  check_defined(a, b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      if (y == 0.0) zero_division("float floor division by zero");
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0.0 && ((y < 0) != (mod < 0))) div -= 1.0;
      if (div == 0.0) return Value(std::copysign(0.0, x / y));
      double fl = std::floor(div);
      if (div - fl > 0.5) fl += 1.0;
      return Value(fl);
    }
    std::int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) zero_division("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) overflow();
    std::int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value(q);
  }
  unsupported_operands("//", a, b);
}

Value py_mod(const Value& a, const Value& b) {
  if (a.is_string()) {
    std::string r = percent_format(a.str(), b);
    return Value(std::move(r), a.is_markup());
  }
  check_defined(a, b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      if (b.as_double() == 0.0) zero_division("float modulo");
      return Value(float_mod(a.as_double(), b.as_double()));
    }
    std::int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) zero_division("integer division or modulo by zero");
    if (y == -1) return Value(static_cast<std::int64_t>(0));
    std::int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  unsupported_operands("%", a, b);
}

Value py_pow(const Value& a, const Value& b) {
  check_defined(a, b);
  if (!a.is_number() || !b.is_number()) unsupported_operands("** or pow()", a, b);
  if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
    std::int64_t base = a.as_int(), e = b.as_int(), r = 1;
    while (e > 0) {
      if (e & 1) {
        if (checked_mul(r, base, &r)) overflow();
      }
      e >>= 1;
      if (e > 0 && checked_mul(base, base, &base)) overflow();
    }
    return Value(r);
  }
  double x = a.as_double(), y = b.as_double();
  if (x == 0.0 && y < 0) zero_division("0.0 cannot be raised to a negative power");
  return Value(std::pow(x, y));
}

Value py_neg(const Value& a) {
  if (a.is_undefined()) a.fail_undefined();
  if (a.is_float()) return Value(-a.as_double());
  if (a.is_integral()) {
    if (a.as_int() == INT64_MIN) overflow();
    return Value(-a.as_int());
  }
  throw_type_error("bad operand type for unary -: '" + a.type_name() + "'");
}

Value py_pos(const Value& a) {
  if (a.is_undefined()) a.fail_undefined();
  if (a.is_float()) return a;
  if (a.is_integral()) return Value(a.as_int());
  throw_type_error("bad operand type for unary +: '" + a.type_name() + "'");
}

// ---------------------------------------------------------------- slicing

static std::int64_t slice_index(const Value& v) {
  if (v.is_none()) throw_type_error("internal: none index");
  if (!v.is_integral())
    throw_type_error("slice indices must be integers or None or have an __index__ method");
  return v.as_int();
}

Value py_slice(const Value& obj, const Value* start_v, const Value* stop_v, const Value* step_v) {
  std::int64_t n;
  std::u32string u;
  if (obj.is_string()) {
    u = utf8_decode(obj.str());
    n = static_cast<std::int64_t>(u.size());
  } else if (obj.is_sequence()) {
    n = static_cast<std::int64_t>(obj.items().size());
  } else {
    throw_type_error("'" + obj.type_name() + "' object is not subscriptable");
  }
  auto present = [](const Value* v) { return v && !v->is_none(); };
  std::int64_t step = present(step_v) ? slice_index(*step_v) : 1;
  if (step == 0) throw Error(Error::Kind::Type, "slice step cannot be zero");
  std::int64_t start, stop;
  if (step > 0) {
    start = present(start_v) ? slice_index(*start_v) : 0;
    stop = present(stop_v) ? slice_index(*stop_v) : n;
    if (start < 0) start = std::max<std::int64_t>(0, start + n);
    if (stop < 0) stop = std::max<std::int64_t>(0, stop + n);
    start = std::min(start, n);
    stop = std::min(stop, n);
  } else {
    start = present(start_v) ? slice_index(*start_v) : n - 1;
    stop = present(stop_v) ? slice_index(*stop_v) : -n - 1;
    if (start < 0) start = std::max<std::int64_t>(-1, start + n);
    if (start >= n) start = n - 1;
    if (present(stop_v) && stop < 0) stop = std::max<std::int64_t>(-1, stop + n);
    if (!present(stop_v)) stop = -1;
    if (stop >= n) stop = n - 1;
  }
  std::vector<std::int64_t> idx;
  if (step > 0) {
    for (std::int64_t i = start; i < stop; i += step) idx.push_back(i);
  } else {
    for (std::int64_t i = start; i > stop; i += step) idx.push_back(i);
  }
  if (obj.is_string()) {
    std::u32string r;
    for (auto i : idx) r.push_back(u[static_cast<std::size_t>(i)]);
    return Value(utf8_encode(r), obj.is_markup());
  }
  ValueList out;
  for (auto i : idx) out.push_back(obj.items()[static_cast<std::size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// ---------------------------------------------------------------- conversions

static std::string clean_number_text(const std::string& s, bool allow_underscore) {
  std::string t = py_strip(s, true, true);
  if (!allow_underscore) return t;
  std::string r;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      bool ok = i > 0 && i + 1 < t.size() && std::isalnum(static_cast<unsigned char>(t[i - 1])) &&
                std::isalnum(static_cast<unsigned char>(t[i + 1]));
      if (!ok) return "!";
      continue;
    }
    r.push_back(t[i]);
  }
  return r;
}

std::int64_t py_to_int(const Value& v) {
  if (v.is_integral()) return v.as_int();
  if (v.is_float()) {
    double d = v.as_double();
    if (std::isnan(d)) throw Error(Error::Kind::Type, "cannot convert float NaN to integer");
    if (std::isinf(d)) throw Error(Error::Kind::Type, "cannot convert float infinity to integer");
    if (std::fabs(d) >= 9.2233720368547758e18) overflow();
    return static_cast<std::int64_t>(d);
  }
  if (v.is_string()) {
    std::string t = clean_number_text(v.str(), true);
    std::size_t i = 0;
    bool neg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
    if (i >= t.size()) throw Error(Error::Kind::Type, "invalid literal for int() with base 10: " + py_repr(v));
    std::int64_t r = 0;
    for (; i < t.size(); ++i) {
      if (t[i] < '0' || t[i] > '9')
        throw Error(Error::Kind::Type, "invalid literal for int() with base 10: " + py_repr(v));
      if (checked_mul(r, 10, &r) || checked_add(r, t[i] - '0', &r)) overflow();
    }
    return neg ? -r : r;
  }
  if (v.is_undefined()) v.fail_undefined();
  throw_type_error("int() argument must be a string, a bytes-like object or a real number, not '" + v.type_name() +
                   "'");
}

double py_to_float(const Value& v) {
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    std::string t = clean_number_text(v.str(), true);
    std::string low = py_lower(t);
    std::string body = low;
    bool neg = false;
    if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
      neg = body[0] == '-';
      body = body.substr(1);
    }
    if (body == "inf" || body == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
    if (body == "nan") return std::nan("");
    bool digit = false, ok = !body.empty();
    for (char c : body) {
      if (std::isdigit(static_cast<unsigned char>(c))) digit = true;
      else if (c != '.' && c != 'e' && c != '+' && c != '-') ok = false;
    }
    if (ok && digit) {
      char* end = nullptr;
      double d = std::strtod(t.c_str(), &end);
      if (end && *end == '\0') return d;
    }
    throw Error(Error::Kind::Type, "could not convert string to float: " + py_repr(v));
  }
  if (v.is_undefined()) v.fail_undefined();
  throw_type_error("float() argument must be a string or a real number, not '" + v.type_name() + "'");
}

}  // namespace kiln::jinja
