// Python json.dumps formatting of Values (used by the tojson filter).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/jinja/builtins.h"

namespace kiln::jinja {

namespace {

void escape_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  auto u_escape = [&](unsigned cp) {
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    out += buf;
  };
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      u_escape(static_cast<unsigned>(c));
    } else if (ensure_ascii && c > 0x7E) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        u_escape(static_cast<unsigned>(0xD800 | (v >> 10)));
        u_escape(static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
      } else {
        u_escape(static_cast<unsigned>(c));
      }
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(d);
}

std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Kind::String:
      return k.str();
    case Kind::Bool:
      return k.as_bool() ? "true" : "false";
    case Kind::None:
      return "null";
    case Kind::Int:
      return std::to_string(k.as_int());
    case Kind::Float:
      return float_json(k.as_double());
    default:
      throw_type_error("keys must be str, int, float, bool or None, not " + k.type_name());
  }
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o) : o_(o) {}

  void dump(std::string& out, const Value& v, int level) {
    switch (v.kind()) {
      case Kind::None:
        out += "null";
        return;
      case Kind::Bool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Kind::Int:
        out += std::to_string(v.as_int());
        return;
      case Kind::Float:
        out += float_json(v.as_double());
        return;
      case Kind::String:
        escape_string(out, v.str(), o_.ensure_ascii);
        return;
      case Kind::List:
      case Kind::Tuple: {
        const auto& items = v.items();
        if (items.empty()) {
          out += "[]";
          return;
        }
        Marker marker(*this, &items);
        out.push_back('[');
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out += o_.item_separator;
          newline(out, level + 1);
          dump(out, items[i], level + 1);
        }
        newline(out, level);
        out.push_back(']');
        return;
      }
      case Kind::Dict: {
        const Dict& d = v.dict_ref();
        if (d.empty()) {
          out += "{}";
          return;
        }
        Marker marker(*this, &d);
        std::vector<const std::pair<Value, Value>*> entries;
        for (const auto& e : d.entries()) entries.push_back(&e);
        if (o_.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto* a, const auto* b) { return py_compare(a->first, b->first) < 0; });
        out.push_back('{');
        bool first = true;
        for (const auto* e : entries) {
          if (!first) out += o_.item_separator;
          first = false;
          newline(out, level + 1);
          escape_string(out, key_string(e->first), o_.ensure_ascii);
          out += o_.key_separator;
          dump(out, e->second, level + 1);
        }
        newline(out, level);
        out.push_back('}');
        return;
      }
      default: {
        std::string t = v.is_undefined() ? "Undefined" : v.type_name();
        throw_type_error("Object of type " + t + " is not JSON serializable");
      }
    }
  }

 private:
  // Python's check_circular: a list or dict met again inside itself (mutable
  // sandbox) is a ValueError instead of endless recursion.
  class Marker {
   public:
    Marker(Dumper& d, const void* container) : d_(d) {
      for (const void* p : d_.active_)
        if (p == container) throw Error(Error::Kind::Type, "Circular reference detected");
      d_.active_.push_back(container);
    }
    ~Marker() { d_.active_.pop_back(); }
    Marker(const Marker&) = delete;
    Marker& operator=(const Marker&) = delete;

   private:
    Dumper& d_;
  };

  void newline(std::string& out, int level) {
    if (!o_.has_indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += o_.indent;
  }
  const JsonDumpOptions& o_;
  std::vector<const void*> active_;  // containers being dumped
};

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  Dumper(options).dump(out, v, 0);
  return out;
}

}  // namespace kiln::jinja
