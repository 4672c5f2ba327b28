// Python methods of str/dict/list/tuple values as templates call them
// (`s.strip()`, `d.items()`, ...) under jinja2's immutable sandbox, and the global
// functions range, dict, namespace, cycler and joiner.
#include <algorithm>
#include <cstring>

#include "model/jinja/builtins.h"

namespace kiln::jinja {

namespace {

[[noreturn]] void value_error(const std::string& msg) { throw Error(Error::Kind::Type, msg); }

const char* const kStrMethods[] = {
    "capitalize", "casefold",   "center",    "count",        "encode",     "endswith",  "expandtabs",
    "find",       "format",     "format_map", "index",       "isalnum",    "isalpha",   "isascii",
    "isdecimal",  "isdigit",    "isidentifier", "islower",   "isnumeric",  "isprintable", "isspace",
    "istitle",    "isupper",    "join",      "ljust",        "lower",      "lstrip",    "maketrans",
    "partition",  "removeprefix", "removesuffix", "replace", "rfind",      "rindex",    "rjust",
    "rpartition", "rsplit",     "rstrip",    "split",        "splitlines", "startswith", "strip",
    "swapcase",   "title",      "translate", "upper",        "zfill"};
const char* const kDictMethods[] = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                    "pop",   "popitem", "setdefault", "update", "values"};
const char* const kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
const char* const kListMethods[] = {"append", "clear", "copy", "count", "extend", "index",
                                    "insert", "pop",   "remove", "reverse", "sort"};
const char* const kListUnsafe[] = {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"};
const char* const kTupleMethods[] = {"count", "index"};

template <std::size_t N>
bool in_list(const char* const (&list)[N], const std::string& name) {
  for (const char* n : list)
    if (name == n) return true;
  return false;
}

// ---------------------------------------------------------------- str methods

std::int64_t norm_index(std::int64_t i, std::int64_t n) {
  if (i < 0) i += n;
  return std::clamp<std::int64_t>(i, 0, n);
}

struct Range {
  std::int64_t start, end;
};

Range arg_range(const ArgBinder& b, std::size_t first, std::int64_t n) {
  Range r{0, n};
  if (b.has(first) && !b.get(first).is_none()) r.start = norm_index(b.get(first).as_int(), n);
  if (b.has(first + 1) && !b.get(first + 1).is_none()) r.end = norm_index(b.get(first + 1).as_int(), n);
  return r;
}

const std::string& need_str(const Value& v, const char* method) {
  if (!v.is_string())
    throw Error(Error::Kind::Type, std::string(method) + "() argument must be str, not " + v.type_name());
  return v.str();
}

std::int64_t u32_find(const std::u32string& h, const std::u32string& n, Range r, bool reverse) {
  if (r.end < r.start || static_cast<std::int64_t>(n.size()) > r.end - r.start) return -1;
  std::u32string_view view(h.data() + r.start, static_cast<std::size_t>(r.end - r.start));
  std::size_t p = reverse ? view.rfind(n) : view.find(n);
  return p == std::u32string_view::npos ? -1 : static_cast<std::int64_t>(p) + r.start;
}

ValueList split_ws(const std::u32string& u, std::int64_t maxsplit, bool from_right) {
  std::vector<std::u32string> parts;
  if (!from_right) {
    std::size_t i = 0;
    while (true) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
        parts.push_back(u.substr(i));
        break;
      }
      std::size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      parts.push_back(u.substr(i, j - i));
      i = j;
    }
  } else {
    std::size_t e = u.size();
    while (true) {
      while (e > 0 && py_isspace(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
        parts.push_back(u.substr(0, e));
        break;
      }
      std::size_t s = e;
      while (s > 0 && !py_isspace(u[s - 1])) --s;
      parts.push_back(u.substr(s, e - s));
      e = s;
    }
    std::reverse(parts.begin(), parts.end());
  }
  ValueList out;
  for (const auto& p : parts) out.emplace_back(utf8_encode(p));
  return out;
}

ValueList split_sep(const std::string& s, const std::string& sep, std::int64_t maxsplit, bool from_right) {
  if (sep.empty()) value_error("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit) {
      std::size_t f = s.find(sep, pos);
      if (f == std::string::npos) break;
      parts.push_back(s.substr(pos, f - pos));
      pos = f + sep.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    std::size_t end = s.size();
    std::int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      if (end < sep.size()) break;
      std::size_t f = s.rfind(sep, end - sep.size());
      if (f == std::string::npos) break;
      parts.push_back(s.substr(f + sep.size(), end - f - sep.size()));
      end = f;
      ++n;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  ValueList out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

bool affix_match(const std::u32string& u, const Value& affix, Range r, bool suffix, const char* method) {
  ValueList options;
  if (affix.is_tuple()) {
    options = affix.items();
  } else if (affix.is_string()) {
    options.push_back(affix);
  } else {
    throw Error(Error::Kind::Type, std::string(method) + " first arg must be str or a tuple of str, not " +
                                       affix.type_name());
  }
  for (const auto& o : options) {
    std::u32string a = utf8_decode(need_str(o, method));
    if (r.end < r.start) continue;
    std::int64_t len = r.end - r.start;
    if (static_cast<std::int64_t>(a.size()) > len) continue;
    std::size_t at = suffix ? static_cast<std::size_t>(r.end) - a.size() : static_cast<std::size_t>(r.start);
    if (u.compare(at, a.size(), a) == 0) return true;
  }
  return false;
}

std::string title_case(const std::u32string& u) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t c : u) {
    bool cased = py_toupper(c) != c || py_tolower(c) != c;
    if (cased) {
      out.push_back(prev_cased ? py_tolower(c) : py_toupper(c));
    } else {
      out.push_back(c);
    }
    prev_cased = cased;
  }
  return utf8_encode(out);
}

std::string justify(const std::string& s, std::int64_t width, const std::string& fill, char how) {
  if (width > (std::int64_t{1} << 24)) throw Error(Error::Kind::Runtime, "width too large");
  std::int64_t len = static_cast<std::int64_t>(utf8_length(s));
  if (width <= len) return s;
  std::int64_t marg = width - len;
  std::int64_t left = how == '<' ? 0 : how == '>' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

Value str_method(const Value& self, const std::string& name, const CallArgs& args) {
  const std::string& s = self.str();
  auto strip_impl = [&](bool l, bool r) {
    ArgBinder b(args, name, {"chars"});
    if (b.has(0) && !b.get(0).is_none()) return Value(py_strip_chars(s, need_str(b.get(0), name.c_str()), l, r));
    return Value(py_strip(s, l, r));
  };
  if (name == "strip") return strip_impl(true, true);
  if (name == "lstrip") return strip_impl(true, false);
  if (name == "rstrip") return strip_impl(false, true);
  if (name == "upper") {
    ArgBinder(args, name, {});
    return Value(py_upper(s));
  }
  if (name == "lower" || name == "casefold") {
    ArgBinder(args, name, {});
    return Value(py_lower(s));
  }
  if (name == "title") {
    ArgBinder(args, name, {});
    return Value(title_case(utf8_decode(s)));
  }
  if (name == "capitalize") {
    ArgBinder(args, name, {});
    std::u32string u = utf8_decode(s);
    for (std::size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? py_toupper(u[i]) : py_tolower(u[i]);
    return Value(utf8_encode(u));
  }
  if (name == "swapcase") {
    ArgBinder(args, name, {});
    std::u32string u = utf8_decode(s);
    for (auto& c : u) c = py_toupper(c) != c ? py_toupper(c) : py_tolower(c);
    return Value(utf8_encode(u));
  }
  if (name == "split" || name == "rsplit") {
    ArgBinder b(args, name, {"sep", "maxsplit"});
    std::int64_t maxsplit = b.has(1) ? b.get(1).as_int() : -1;
    bool right = name == "rsplit";
    if (!b.has(0) || b.get(0).is_none()) return Value::list(split_ws(utf8_decode(s), maxsplit, right));
    return Value::list(split_sep(s, need_str(b.get(0), name.c_str()), maxsplit, right));
  }
  if (name == "splitlines") {
    ArgBinder b(args, name, {"keepends"});
    bool keep = b.has(0) && b.get(0).truthy();
    std::u32string u = utf8_decode(s);
    ValueList out;
    std::size_t start = 0;
    for (std::size_t i = 0; i < u.size(); ++i) {
      char32_t c = u[i];
      bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                 c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!brk) continue;
      std::size_t eol = i;
      if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      out.emplace_back(utf8_encode(u.substr(start, (keep ? i + 1 : eol) - start)));
      start = i + 1;
    }
    if (start < u.size()) out.emplace_back(utf8_encode(u.substr(start)));
    return Value::list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    ArgBinder b(args, name, {"prefix", "start", "end"});
    if (!b.has(0)) value_error(name + "() takes at least 1 argument (0 given)");
    std::u32string u = utf8_decode(s);
    return Value(affix_match(u, b.get(0), arg_range(b, 1, static_cast<std::int64_t>(u.size())), name == "endswith",
                             name.c_str()));
  }
  if (name == "replace") {
    ArgBinder b(args, name, {"old", "new", "count"});
    if (!b.has(0) || !b.has(1)) value_error("replace expected at least 2 arguments");
    std::string old = need_str(b.get(0), "replace"), repl = need_str(b.get(1), "replace");
    std::int64_t count = b.has(2) ? b.get(2).as_int() : -1;
    std::string out;
    if (old.empty()) {
      std::u32string u = utf8_decode(s);
      std::int64_t n = 0;
      for (std::size_t i = 0; i <= u.size(); ++i) {
        if (count < 0 || n < count) {
          out += repl;
          ++n;
        }
        if (i < u.size()) utf8_append(out, u[i]);
      }
      return Value(out);
    }
    std::size_t pos = 0;
    std::int64_t n = 0;
    while (count < 0 || n < count) {
      std::size_t f = s.find(old, pos);
      if (f == std::string::npos) break;
      out.append(s, pos, f - pos);
      out += repl;
      pos = f + old.size();
      ++n;
    }
    out.append(s, pos, std::string::npos);
    return Value(out);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ArgBinder b(args, name, {"sub", "start", "end"});
    if (!b.has(0)) value_error(name + "() takes at least 1 argument (0 given)");
    std::u32string u = utf8_decode(s), sub = utf8_decode(need_str(b.get(0), name.c_str()));
    Range r = arg_range(b, 1, static_cast<std::int64_t>(u.size()));
    if (name == "count") {
      if (r.end < r.start) return Value(0);
      if (sub.empty()) return Value(r.end - r.start + 1);
      std::int64_t n = 0;
      for (std::int64_t i = r.start; i + static_cast<std::int64_t>(sub.size()) <= r.end;) {
        if (u.compare(static_cast<std::size_t>(i), sub.size(), sub) == 0) {
          ++n;
          i += static_cast<std::int64_t>(sub.size());
        } else {
          ++i;
        }
      }
      return Value(n);
    }
    std::int64_t p = u32_find(u, sub, r, name[0] == 'r');
    if (p < 0 && (name == "index" || name == "rindex")) value_error("substring not found");
    return Value(p);
  }
  if (name == "join") {
    ArgBinder b(args, name, {"iterable"});
    if (!b.has(0)) value_error("join() takes exactly one argument (0 given)");
    std::string out;
    ValueList items = py_iterate(b.get(0));
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        throw Error(Error::Kind::Type, "sequence item " + std::to_string(i) + ": expected str instance, " +
                                           items[i].type_name() + " found");
      if (i) out += s;
      out += items[i].str();
    }
    return Value(out);
  }
  if (name == "format") return Value(str_format(s, args));
  if (name == "center" || name == "ljust" || name == "rjust") {
    ArgBinder b(args, name, {"width", "fillchar"});
    if (!b.has(0)) value_error(name + "() takes at least 1 argument (0 given)");
    std::string fill = b.has(1) ? need_str(b.get(1), name.c_str()) : " ";
    if (utf8_length(fill) != 1) value_error("The fill character must be exactly one character long");
    char how = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    return Value(justify(s, b.get(0).as_int(), fill, how));
  }
  if (name == "zfill") {
    ArgBinder b(args, name, {"width"});
    std::int64_t width = b.has(0) ? b.get(0).as_int() : 0;
    if (width > (std::int64_t{1} << 24)) throw Error(Error::Kind::Runtime, "width too large");
    std::int64_t len = static_cast<std::int64_t>(utf8_length(s));
    if (width <= len) return Value(s);
    std::string pad(static_cast<std::size_t>(width - len), '0');
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) return Value(s.substr(0, 1) + pad + s.substr(1));
    return Value(pad + s);
  }
  if (name == "partition" || name == "rpartition") {
    ArgBinder b(args, name, {"sep"});
    if (!b.has(0)) value_error(name + "() takes exactly one argument (0 given)");
    const std::string& sep = need_str(b.get(0), name.c_str());
    if (sep.empty()) value_error("empty separator");
    std::size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos) {
      if (name == "partition") return Value::tuple({Value(s), Value(""), Value("")});
      return Value::tuple({Value(""), Value(""), Value(s)});
    }
    return Value::tuple({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgBinder b(args, name, {"affix"});
    if (!b.has(0)) value_error(name + "() takes exactly one argument (0 given)");
    const std::string& a = need_str(b.get(0), name.c_str());
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0) return Value(s.substr(a.size()));
    if (name == "removesuffix" && !a.empty() && s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0)
      return Value(s.substr(0, s.size() - a.size()));
    return Value(s);
  }
  if (name.rfind("is", 0) == 0) {
    ArgBinder(args, name, {});
    std::u32string u = utf8_decode(s);
    if (name == "islower" || name == "isupper") {
      bool cased = false;
      for (char32_t c : u) {
        bool lower = py_toupper(c) != c, upper = py_tolower(c) != c;
        if (name == "islower" ? upper : lower) return Value(false);
        cased = cased || lower || upper;
      }
      return Value(cased);
    }
    if (name == "istitle") return Value(!u.empty() && title_case(u) == s && (py_upper(s) != s || py_lower(s) != s));
    if (u.empty()) return Value(false);
    for (char32_t c : u) {
      bool ok;
      if (name == "isalpha") ok = py_isalpha(c);
      else if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") ok = py_isdigit(c);
      else if (name == "isalnum") ok = py_isalnum(c);
      else if (name == "isspace") ok = py_isspace(c);
      else if (name == "isascii") ok = c < 0x80;
      else throw Error(Error::Kind::Unsupported, "str." + name + "() is not supported");
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  throw Error(Error::Kind::Unsupported, "str." + name + "() is not supported");
}

// ---------------------------------------------------------------- dict / list methods

Value dict_method(const Value& self, const std::string& name, const CallArgs& args) {
  Dict& d = self.dict_ref();
  if (name == "get") {
    ArgBinder b(args, name, {"key", "default"});
    if (!b.has(0)) value_error("get expected at least 1 argument, got 0");
    if (b.get(0).is_list() || b.get(0).is_dict()) throw_type_error("unhashable type: '" + b.get(0).type_name() + "'");
    if (const Value* v = d.find(b.get(0))) return *v;
    return b.get_or(1, Value::none());
  }
  if (name == "items" || name == "keys" || name == "values") {
    ArgBinder(args, name, {});
    ValueList out;
    for (const auto& [k, v] : d.entries())
      out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
    auto flavor = name == "items"  ? IterState::Flavor::DictItems
                  : name == "keys" ? IterState::Flavor::DictKeys
                                   : IterState::Flavor::DictValues;
    return Value::iterator(flavor, std::move(out), "dict_" + name);
  }
  if (name == "copy") {
    ArgBinder(args, name, {});
    return Value::dict(std::make_shared<Dict>(d));
  }
  if (name == "clear") {
    ArgBinder(args, name, {});
    d.clear();
    return Value::none();
  }
  if (name == "pop" || name == "setdefault") {
    if (name == "setdefault") gc_adopt(self);
    ArgBinder b(args, name, {"key", "default"});
    if (!b.has(0)) value_error(name + " expected at least 1 argument, got 0");
    if (const Value* v = d.find(b.get(0))) {
      Value r = *v;
      if (name == "pop") d.erase(b.get(0));
      return r;
    }
    if (name == "setdefault") {
      Value def = b.get_or(1, Value::none());
      d.set(b.get(0), def);
      return def;
    }
    if (!b.has(1)) throw Error(Error::Kind::Type, "KeyError: " + py_repr(b.get(0)));
    return b.get(1);
  }
  if (name == "update") {
    gc_adopt(self);
    if (args.positional.size() > 1) value_error("update expected at most 1 argument");
    if (!args.positional.empty()) {
      const Value& o = args.positional[0];
      if (o.is_dict()) {
        for (const auto& [k, v] : o.dict_ref().entries()) d.set(k, v);
      } else {
        for (const auto& p : py_iterate(o)) {
          ValueList kv = py_iterate(p);
          if (kv.size() != 2) value_error("dictionary update sequence element has wrong length");
          d.set(kv[0], kv[1]);
        }
      }
    }
    for (const auto& [k, v] : args.keyword) d.set(Value(k), v);
    return Value::none();
  }
  if (name == "popitem") {
    ArgBinder(args, name, {});
    if (d.empty()) throw Error(Error::Kind::Type, "KeyError: 'popitem(): dictionary is empty'");
    auto last = d.entries().back();
    d.erase(last.first);
    return Value::tuple({last.first, last.second});
  }
  throw Error(Error::Kind::Unsupported, "dict." + name + "() is not supported");
}

Value list_method(const Value& self, const std::string& name, const CallArgs& args) {
  ValueList& items = self.items();
  if (name == "count") {
    ArgBinder b(args, name, {"value"});
    if (!b.has(0)) value_error("count() takes exactly one argument (0 given)");
    std::int64_t n = 0;
    for (const auto& x : items) n += py_equal(x, b.get(0)) ? 1 : 0;
    return Value(n);
  }
  if (name == "index") {
    ArgBinder b(args, name, {"value", "start", "stop"});
    if (!b.has(0)) value_error("index expected at least 1 argument, got 0");
    Range r = arg_range(b, 1, static_cast<std::int64_t>(items.size()));
    for (std::int64_t i = r.start; i < r.end; ++i)
      if (py_equal(items[static_cast<std::size_t>(i)], b.get(0))) return Value(i);
    value_error(py_repr(b.get(0)) + " is not in list");
  }
  if (name == "copy") {
    ArgBinder(args, name, {});
    return Value::list(items);
  }
  if (name == "clear") {
    ArgBinder(args, name, {});
    items.clear();
    return Value::none();
  }
  if (name == "pop") {
    ArgBinder b(args, name, {"index"});
    std::int64_t n = static_cast<std::int64_t>(items.size());
    if (n == 0) value_error("pop from empty list");
    std::int64_t i = b.has(0) ? b.get(0).as_int() : -1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) value_error("pop index out of range");
    Value r = items[static_cast<std::size_t>(i)];
    items.erase(items.begin() + i);
    return r;
  }
  if (name == "append" || name == "extend" || name == "insert") gc_adopt(self);
  if (name == "append") {
    ArgBinder b(args, name, {"object"});
    if (!b.has(0)) value_error("append() takes exactly one argument (0 given)");
    items.push_back(b.get(0));
    return Value::none();
  }
  if (name == "extend") {
    ArgBinder b(args, name, {"iterable"});
    if (!b.has(0)) value_error("extend() takes exactly one argument (0 given)");
    for (auto& x : py_iterate(b.get(0))) items.push_back(x);
    return Value::none();
  }
  if (name == "insert") {
    ArgBinder b(args, name, {"index", "object"});
    if (!b.has(1)) value_error("insert expected 2 arguments");
    std::int64_t n = static_cast<std::int64_t>(items.size());
    std::int64_t i = b.get(0).as_int();
    if (i < 0) i = std::max<std::int64_t>(0, i + n);
    i = std::min(i, n);
    items.insert(items.begin() + i, b.get(1));
    return Value::none();
  }
  if (name == "remove") {
    ArgBinder b(args, name, {"value"});
    for (auto it = items.begin(); it != items.end(); ++it) {
      if (py_equal(*it, b.get(0))) {
        items.erase(it);
        return Value::none();
      }
    }
    value_error("list.remove(x): x not in list");
  }
  if (name == "reverse") {
    ArgBinder(args, name, {});
    std::reverse(items.begin(), items.end());
    return Value::none();
  }
  throw Error(Error::Kind::Unsupported, "list." + name + "() is not supported");
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  Value call(Interpreter&, CallArgs& args) override {
    if (self_.is_string()) return str_method(self_, name_, args);
    if (self_.is_dict()) return dict_method(self_, name_, args);
    return list_method(self_, name_, args);
  }
  std::string repr() const override {
    return "<built-in method " + name_ + " of " + self_.type_name() + " object>";
  }
  void gc_trace(GcVisitor& v) const override { v.value(self_); }
  void gc_clear() override { self_ = Value(); }

 private:
  Value self_;
  std::string name_;
};

// ---------------------------------------------------------------- globals

class NativeFunction : public Callable {
 public:
  using Fn = Value (*)(CallArgs&);
  NativeFunction(const char* name, Fn fn) : name_(name), fn_(fn) {}
  Value call(Interpreter&, CallArgs& args) override { return fn_(args); }
  std::string repr() const override { return std::string("<function ") + name_ + ">"; }

 private:
  const char* name_;
  Fn fn_;
};

Value g_range(CallArgs& a) {
  if (!a.keyword.empty()) throw_type_error("range() takes no keyword arguments");
  std::size_t n = a.positional.size();
  if (n < 1 || n > 3) throw_type_error("range expected at most 3 arguments, got " + std::to_string(n));
  for (const auto& v : a.positional)
    if (!v.is_integral()) throw_type_error("'" + v.type_name() + "' object cannot be interpreted as an integer");
  std::int64_t start = 0, stop, step = 1;
  if (n == 1) {
    stop = a.positional[0].as_int();
  } else {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (n == 3) step = a.positional[2].as_int();
  }
  if (step == 0) value_error("range() arg 3 must not be zero");
  std::int64_t count = 0;
  if (step > 0 && stop > start) count = (stop - start + step - 1) / step;
  if (step < 0 && stop < start) count = (start - stop - step - 1) / (-step);
  if (count > 100000)
    throw Error(Error::Kind::Security,
                "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  ValueList out;
  for (std::int64_t i = 0; i < count; ++i) out.emplace_back(start + i * step);
  return Value::list(std::move(out));
}

void fill_dict(Dict& d, CallArgs& a, const char* fname) {
  if (a.positional.size() > 1)
    throw_type_error(std::string(fname) + " expected at most 1 argument, got " + std::to_string(a.positional.size()));
  if (!a.positional.empty()) {
    const Value& o = a.positional[0];
    if (o.is_mapping()) {
      for (const auto& [k, v] : o.dict_ref().entries()) d.set(k, v);
    } else {
      for (const auto& p : py_iterate(o)) {
        ValueList kv = py_iterate(p);
        if (kv.size() != 2) value_error("dictionary update sequence element has wrong length");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
}

Value g_dict(CallArgs& a) {
  auto d = std::make_shared<Dict>();
  fill_dict(*d, a, "dict");
  return Value::dict(std::move(d));
}

Value g_namespace(CallArgs& a) {
  auto d = std::make_shared<Dict>();
  fill_dict(*d, a, "namespace");
  return Value::namespace_(std::move(d));
}

class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(ValueList items) : items_(std::move(items)) {}
  Value get_attr(const std::string& name) override;
  std::string repr() const override { return "<Cycler>"; }
  const char* type_name() const override { return "Cycler"; }
  void gc_trace(GcVisitor& v) const override { v.values(items_); }
  void gc_clear() override { ValueList().swap(items_); }
  Value current() const { return items_[pos_]; }
  Value next() {
    Value v = items_[pos_];
    pos_ = (pos_ + 1) % items_.size();
    return v;
  }
  void reset() { pos_ = 0; }

 private:
  ValueList items_;
  std::size_t pos_ = 0;
};

class CyclerMethod : public Callable {
 public:
  CyclerMethod(std::shared_ptr<Cycler> c, std::string name) : c_(std::move(c)), name_(std::move(name)) {}
  Value call(Interpreter&, CallArgs& args) override {
    ArgBinder(args, name_, {});
    if (name_ == "next") return c_->next();
    c_->reset();
    return Value::none();
  }
  std::string repr() const override { return "<bound method Cycler." + name_ + ">"; }
  void gc_trace(GcVisitor& v) const override { v.object(c_); }
  void gc_clear() override { c_.reset(); }

 private:
  std::shared_ptr<Cycler> c_;
  std::string name_;
};

Value Cycler::get_attr(const std::string& name) {
  if (name == "current") return current();
  if (name == "next" || name == "reset") return Value::callable(std::make_shared<CyclerMethod>(shared_from_this(), name));
  return Value::undefined("'Cycler object' has no attribute '" + name + "'");
}

Value g_cycler(CallArgs& a) {
  if (a.positional.empty()) throw_type_error("at least one item has to be provided");
  return Value::object(std::make_shared<Cycler>(a.positional));
}

class Joiner : public Callable {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  Value call(Interpreter&, CallArgs& args) override {
    ArgBinder(args, "joiner", {});
    if (!used_) {
      used_ = true;
      return Value("");
    }
    return Value(sep_);
  }
  std::string repr() const override { return "<Joiner>"; }

 private:
  std::string sep_;
  bool used_ = false;
};

Value g_joiner(CallArgs& a) {
  ArgBinder b(a, "joiner", {"sep"});
  return Value::callable(std::make_shared<Joiner>(b.has(0) ? py_str(b.get(0)) : ", "));
}

Value g_lipsum(CallArgs&) { throw Error(Error::Kind::Unsupported, "lipsum() is not supported"); }

}  // namespace

std::optional<Value> builtin_method(Interpreter& interp, const Value& obj, const std::string& name) {
  bool immutable = interp.options().immutable_sandbox;
  auto unsafe = [&](const char* type) {
    return Value::undefined("access to attribute '" + name + "' of '" + type + "' object is unsafe.", true);
  };
  switch (obj.kind()) {
    case Kind::String:
      if (in_list(kStrMethods, name)) return Value::callable(std::make_shared<BoundMethod>(obj, name));
      return std::nullopt;
    case Kind::Dict:
      if (!in_list(kDictMethods, name)) return std::nullopt;
      if (immutable && in_list(kDictUnsafe, name)) return unsafe("dict");
      return Value::callable(std::make_shared<BoundMethod>(obj, name));
    case Kind::List:
      if (!in_list(kListMethods, name)) return std::nullopt;
      if (immutable && in_list(kListUnsafe, name)) return unsafe("list");
      return Value::callable(std::make_shared<BoundMethod>(obj, name));
    case Kind::Tuple:
      if (!in_list(kTupleMethods, name)) return std::nullopt;
      return Value::callable(std::make_shared<BoundMethod>(obj, name));
    default:
      return std::nullopt;
  }
}

std::optional<Value> builtin_global(const std::string& name) {
  NativeFunction::Fn fn = nullptr;
  if (name == "range") fn = g_range;
  else if (name == "dict") fn = g_dict;
  else if (name == "namespace") fn = g_namespace;
  else if (name == "cycler") fn = g_cycler;
  else if (name == "joiner") fn = g_joiner;
  else if (name == "lipsum") fn = g_lipsum;
  if (!fn) return std::nullopt;
  return Value::callable(std::make_shared<NativeFunction>(name == "range"       ? "range"
                                                          : name == "dict"      ? "dict"
                                                          : name == "namespace" ? "namespace"
                                                          : name == "cycler"    ? "cycler"
                                                          : name == "joiner"    ? "joiner"
                                                                                : "lipsum",
                                                          fn));
}

}  // namespace kiln::jinja
