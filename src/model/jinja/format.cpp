// Python string formatting: printf-style `fmt % args` and `str.format(...)`.
#include <cctype>
#include <cmath>
#include <cstdio>

#include "model/jinja/builtins.h"

namespace kiln::jinja {

namespace {

[[noreturn]] void format_error(const std::string& msg) { throw Error(Error::Kind::Type, msg); }

constexpr std::size_t kMaxWidth = std::size_t{1} << 24;

std::size_t checked_width(const std::string& digits) {
  if (digits.empty()) return 0;
  if (digits.size() > 8 || std::stoull(digits) > kMaxWidth)
    throw Error(Error::Kind::Runtime, "format width or precision too large");
  return static_cast<std::size_t>(std::stoull(digits));
}

std::string pad(const std::string& s, std::size_t width, char align, const std::string& fill) {
  std::size_t len = utf8_length(s);
  if (len >= width) return s;
  std::size_t total = width - len;
  auto rep = [&](std::size_t n) {
    std::string r;
    for (std::size_t i = 0; i < n; ++i) r += fill;
    return r;
  };
  if (align == '<') return s + rep(total);
  if (align == '^') return rep(total / 2) + s + rep(total - total / 2);
  return rep(total) + s;
}

std::string c_format(const std::string& spec, double d) {
  char buf[512];
  std::snprintf(buf, sizeof buf, spec.c_str(), d);
  return buf;
}

std::string c_format_int(const std::string& spec, long long v) {
  char buf[512];
  std::snprintf(buf, sizeof buf, spec.c_str(), v);
  return buf;
}

double number_arg(const Value& v, char conv) {
  if (v.is_number()) return v.as_double();
  format_error(std::string("%") + conv + " format: a real number is required, not " + v.type_name());
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  ValueList positional;
  const Dict* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.dict_ref();
  }
  std::size_t next = 0;
  bool used_mapping = false;
  std::string out;
  auto take = [&]() -> Value {
    if (next >= positional.size()) format_error("not enough arguments for format string");
    return positional[next++];
  };
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    if (++i >= fmt.size()) format_error("incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt[i] == '(') {
      if (!mapping) format_error("format requires a mapping");
      std::size_t close = fmt.find(')', i);
      if (close == std::string::npos) format_error("incomplete format key");
      std::string key = fmt.substr(i + 1, close - i - 1);
      const Value* v = mapping->find(Value(key));
      if (!v) throw Error(Error::Kind::Type, "KeyError: " + py_string_repr(key));
      arg = *v;
      have_arg = true;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) flags += fmt[i++];
    std::string width, precision;
    if (i < fmt.size() && fmt[i] == '*') {
      width = std::to_string(py_to_int(take()));
      ++i;
    } else {
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width += fmt[i++];
    }
    bool has_precision = false;
    if (i < fmt.size() && fmt[i] == '.') {
      has_precision = true;
      ++i;
      if (i < fmt.size() && fmt[i] == '*') {
        precision = std::to_string(py_to_int(take()));
        ++i;
      } else {
        while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) precision += fmt[i++];
      }
      if (precision.empty()) precision = "0";
    }
    checked_width(width);
    checked_width(precision);
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) format_error("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) arg = take();
    std::string body;
    std::string cflags = flags;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        body = conv == 's' ? py_str(arg) : py_repr(arg);
        if (has_precision) {
          std::u32string u = utf8_decode(body);
          std::size_t p = checked_width(precision);
          if (u.size() > p) body = utf8_encode(u.substr(0, p));
        }
        std::size_t w = checked_width(width);
        body = pad(body, w, flags.find('-') != std::string::npos ? '<' : '>', " ");
        out += body;
        continue;
      }
      case 'd':
      case 'i':
      case 'u': {
        double d = number_arg(arg, conv);
        long long v = arg.is_float() ? static_cast<long long>(std::trunc(d)) : static_cast<long long>(arg.as_int());
        out += c_format_int("%" + cflags + width + (has_precision ? "." + precision : "") + "lld", v);
        continue;
      }
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_integral()) format_error(std::string("%") + conv + " format: an integer is required, not " + arg.type_name());
        long long v = arg.as_int();
        std::string prefix;
        if (flags.find('#') != std::string::npos) prefix = conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X";
        std::string f = cflags;
        std::string::size_type h = f.find('#');
        if (h != std::string::npos) f.erase(h, 1);
        std::string digits = c_format_int(std::string("%") + (has_precision ? "." + precision : "") + "ll" + conv,
                                          v < 0 ? -v : v);
        std::string s = (v < 0 ? "-" : (f.find('+') != std::string::npos ? "+" : (f.find(' ') != std::string::npos ? " " : ""))) + prefix + digits;
        std::size_t w = checked_width(width);
        if (f.find('-') != std::string::npos) {
          s = pad(s, w, '<', " ");
        } else if (f.find('0') != std::string::npos && s.size() < w) {
          std::size_t sign_len = (s[0] == '-' || s[0] == '+' || s[0] == ' ' ? 1 : 0) + prefix.size();
          s.insert(sign_len, std::string(w - s.size(), '0'));
        } else {
          s = pad(s, w, '>', " ");
        }
        out += s;
        continue;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        double d = number_arg(arg, conv);
        std::string spec = "%" + cflags + width + "." + (has_precision ? precision : "6") + conv;
        std::string s = c_format(spec, d);
        if (std::isinf(d) || std::isnan(d)) {
          std::string word = std::isnan(d) ? "nan" : (d < 0 ? "-inf" : "inf");
          if (d > 0 && flags.find('+') != std::string::npos) word = "+" + word;
          if (conv == 'E' || conv == 'F' || conv == 'G') word = py_upper(word);
          std::size_t w = checked_width(width);
          s = pad(word, w, flags.find('-') != std::string::npos ? '<' : '>', " ");
        }
        out += s;
        continue;
      }
      case 'c': {
        std::string ch;
        if (arg.is_integral()) {
          utf8_append(ch, static_cast<char32_t>(arg.as_int()));
        } else if (arg.is_string() && utf8_length(arg.str()) == 1) {
          ch = arg.str();
        } else {
          format_error("%c requires int or char");
        }
        std::size_t w = checked_width(width);
        out += pad(ch, w, flags.find('-') != std::string::npos ? '<' : '>', " ");
        continue;
      }
      default:
        format_error(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!used_mapping && !mapping && next < positional.size())
    format_error("not all arguments converted during string formatting");
  return out;
}

// ---------------------------------------------------------------- str.format

namespace {

std::string apply_format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return py_str(v);
  std::size_t i = 0;
  std::string fill = " ";
  char align = 0;
  std::u32string u = utf8_decode(spec);
  std::string rest;
  // [[fill]align]
  if (u.size() >= 2 && std::u32string_view(U"<>=^").find(u[1]) != std::u32string_view::npos) {
    fill.clear();
    utf8_append(fill, u[0]);
    align = static_cast<char>(u[1]);
    rest = utf8_encode(std::u32string_view(u).substr(2));
  } else if (!u.empty() && std::u32string_view(U"<>=^").find(u[0]) != std::u32string_view::npos) {
    align = static_cast<char>(u[0]);
    rest = utf8_encode(std::u32string_view(u).substr(1));
  } else {
    rest = spec;
  }
  char sign = 0;
  if (i < rest.size() && (rest[i] == '+' || rest[i] == '-' || rest[i] == ' ')) sign = rest[i++];
  bool alt = false;
  if (i < rest.size() && rest[i] == '#') {
    alt = true;
    ++i;
  }
  bool zero = false;
  if (i < rest.size() && rest[i] == '0') {
    zero = true;
    ++i;
  }
  std::string width;
  while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) width += rest[i++];
  char grouping = 0;
  if (i < rest.size() && (rest[i] == ',' || rest[i] == '_')) grouping = rest[i++];
  std::string precision;
  bool has_precision = false;
  if (i < rest.size() && rest[i] == '.') {
    has_precision = true;
    ++i;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) precision += rest[i++];
  }
  char type = i < rest.size() ? rest[i++] : 0;
  if (i != rest.size()) format_error("Invalid format specifier");
  checked_width(precision);
  if (grouping) throw Error(Error::Kind::Unsupported, "grouping in format specifications is not supported");
  std::size_t w = checked_width(width);
  if (zero && !align) {
    align = '=';
    fill = "0";
  }
  std::string body;
  bool numeric = v.is_number();
  if (v.is_string() || (!numeric && (type == 0 || type == 's'))) {
    if (type != 0 && type != 's') format_error(std::string("Unknown format code '") + type + "' for object of type 'str'");
    body = py_str(v);
    if (has_precision) {
      std::u32string b = utf8_decode(body);
      std::size_t p = checked_width(precision);
      if (b.size() > p) body = utf8_encode(b.substr(0, p));
    }
    return pad(body, w, align ? (align == '=' ? '<' : align) : '<', fill);
  }
  if (!numeric) format_error("unsupported format string passed to " + v.type_name() + ".__format__");
  std::string sign_str;
  if (type == 0 && v.is_integral()) type = 'd';
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' || type == 'c' || type == 'n') {
    if (!v.is_integral()) format_error(std::string("Unknown format code '") + type + "' for object of type 'float'");
    long long n = v.as_int();
    unsigned long long a = n < 0 ? 0ULL - static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n);
    if (type == 'c') {
      utf8_append(body, static_cast<char32_t>(n));
    } else if (type == 'b') {
      if (a == 0) body = "0";
      while (a) {
        body.insert(body.begin(), static_cast<char>('0' + (a & 1)));
        a >>= 1;
      }
      if (alt) body = "0b" + body;
    } else {
      char buf[64];
      const char* f = type == 'x' ? "%llx" : type == 'X' ? "%llX" : type == 'o' ? "%llo" : "%llu";
      std::snprintf(buf, sizeof buf, f, a);
      body = buf;
      if (alt && type != 'd' && type != 'n') body = (type == 'o' ? "0o" : type == 'x' ? "0x" : "0X") + body;
    }
    if (n < 0) sign_str = "-";
  } else {
    double d = v.as_double();
    if (type == 0 && !has_precision) {
      body = py_float_repr(std::fabs(d));
    } else {
      char t = type == 0 ? 'g' : type;
      std::string p = has_precision ? (precision.empty() ? "0" : precision) : "6";
      double x = std::fabs(d);
      if (t == '%') {
        body = c_format("%." + p + "f", x * 100.0) + "%";
      } else {
        std::string f = std::string("%") + (alt ? "#" : "") + "." + p + t;
        body = c_format(f, x);
        if (type == 0 && body.find_first_of(".e") == std::string::npos && std::isfinite(x)) body += ".0";
      }
    }
    if (std::signbit(d) && !std::isnan(d)) sign_str = "-";
  }
  if (sign_str.empty()) {
    if (sign == '+') sign_str = "+";
    if (sign == ' ') sign_str = " ";
  }
  if (align == '=') {
    std::size_t len = utf8_length(sign_str) + utf8_length(body);
    std::string padding;
    for (std::size_t k = len; k < w; ++k) padding += fill;
    return sign_str + padding + body;
  }
  return pad(sign_str + body, w, align ? align : '>', fill);
}

}  // namespace

std::string str_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  bool manual = false, automatic = false;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      format_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    // parse field up to the matching '}' (nested braces in the spec allowed once)
    std::size_t j = i + 1;
    int depth = 1;
    while (j < fmt.size() && depth > 0) {
      if (fmt[j] == '{') ++depth;
      if (fmt[j] == '}') --depth;
      if (depth > 0) ++j;
    }
    if (j >= fmt.size()) format_error("expected '}' before end of string");
    std::string field = fmt.substr(i + 1, j - i - 1);
    i = j;
    std::string spec, conversion;
    std::size_t colon = std::string::npos;
    int bracket = 0;
    for (std::size_t k = 0; k < field.size(); ++k) {
      if (field[k] == '[') ++bracket;
      if (field[k] == ']') --bracket;
      if (bracket == 0 && (field[k] == ':' || field[k] == '!')) {
        colon = k;
        break;
      }
    }
    std::string name = colon == std::string::npos ? field : field.substr(0, colon);
    if (colon != std::string::npos) {
      std::string tail = field.substr(colon);
      if (tail[0] == '!') {
        if (tail.size() < 2) format_error("end of string while looking for conversion specifier");
        conversion = tail.substr(1, 1);
        tail = tail.substr(2);
        if (!tail.empty() && tail[0] != ':') format_error("expected ':' after conversion specifier");
      }
      if (!tail.empty()) spec = tail.substr(1);
    }
    if (spec.find('{') != std::string::npos)
      throw Error(Error::Kind::Unsupported, "nested replacement fields in format specifications are not supported");
    // first part of the name: index or keyword
    std::size_t end = name.find_first_of(".[");
    std::string head = name.substr(0, end);
    Value v;
    if (head.empty()) {
      if (manual) format_error("cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      if (auto_index >= args.positional.size())
        format_error("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      v = args.positional[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(head[0]))) {
      if (automatic) format_error("cannot switch from automatic field numbering to manual field specification");
      manual = true;
      std::size_t idx = static_cast<std::size_t>(std::stoull(head));
      if (idx >= args.positional.size())
        format_error("Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, kv] : args.keyword)
        if (k == head) {
          v = kv;
          found = true;
        }
      if (!found) throw Error(Error::Kind::Type, "KeyError: " + py_string_repr(head));
    }
    // attribute / index accessors
    std::size_t p = end;
    while (p != std::string::npos && p < name.size()) {
      if (name[p] == '.') {
        std::size_t q = name.find_first_of(".[", p + 1);
        std::string attr = name.substr(p + 1, q == std::string::npos ? std::string::npos : q - p - 1);
        if (v.is_dict()) {
          throw Error(Error::Kind::Type, "'dict' object has no attribute '" + attr + "'");
        }
        throw Error(Error::Kind::Unsupported, "attribute access in format fields is not supported");
      }
      std::size_t q = name.find(']', p);
      if (q == std::string::npos) format_error("Missing ']' in format string");
      std::string key = name.substr(p + 1, q - p - 1);
      bool all_digits = !key.empty();
      for (char ch : key) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(ch));
      if (v.is_dict()) {
        const Value* x = all_digits ? v.dict_ref().find(Value(static_cast<std::int64_t>(std::stoll(key))))
                                    : v.dict_ref().find(Value(key));
        if (!x) throw Error(Error::Kind::Type, "KeyError: " + key);
        v = *x;
      } else if (v.is_sequence() && all_digits) {
        std::size_t idx = static_cast<std::size_t>(std::stoull(key));
        if (idx >= v.items().size()) format_error("list index out of range");
        v = v.items()[idx];
      } else {
        format_error("'" + v.type_name() + "' object is not subscriptable");
      }
      p = q + 1;
    }
    if (conversion == "r" || conversion == "a") {
      v = Value(py_repr(v));
    } else if (conversion == "s") {
      v = Value(py_str(v));
    } else if (!conversion.empty()) {
      format_error("Unknown conversion specifier " + conversion);
    }
    out += apply_format_spec(v, spec);
  }
  return out;
}

}  // namespace kiln::jinja
