// Built-in Jinja filters, following jinja2 3.1's filters.py semantics.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <unordered_set>

#include "model/jinja/builtins.h"

namespace kiln::jinja {

// ---------------------------------------------------------------- ArgBinder

ArgBinder::ArgBinder(const CallArgs& args, std::string_view func, std::initializer_list<const char*> names)
    : slots_(names.size(), nullptr) {
  if (args.positional.size() > names.size())
    throw Error(Error::Kind::Type, std::string(func) + "() takes at most " + std::to_string(names.size()) +
                                       " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  for (std::size_t i = 0; i < args.positional.size(); ++i) slots_[i] = &args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    std::size_t i = 0;
    for (const char* n : names) {
      if (k == n) break;
      ++i;
    }
    if (i == names.size())
      throw Error(Error::Kind::Type, std::string(func) + "() got an unexpected keyword argument '" + k + "'");
    if (slots_[i]) throw Error(Error::Kind::Type, std::string(func) + "() got multiple values for argument '" + k + "'");
    slots_[i] = &v;
  }
}

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

[[noreturn]] void filter_error(const std::string& msg) { throw Error(Error::Kind::Runtime, msg); }

// str() that keeps Markup (jinja2's soft_str)
Value soft_str(const Value& v) {
  if (v.is_string()) return v;
  return Value(py_str(v));
}

std::string s_of(const Value& v) { return py_str(v); }

bool arg_bool(const Value& v) { return v.truthy(); }

std::int64_t arg_int(const Value& v, const char* what) {
  if (!v.is_integral()) {
    if (v.is_float()) return static_cast<std::int64_t>(v.as_double());
    throw Error(Error::Kind::Type, std::string(what) + ": an integer is required, got " + v.type_name());
  }
  return v.as_int();
}

Value lower_if_string(const Value& v) {
  if (v.is_string()) return Value(py_lower(v.str()));
  return v;
}

// jinja2's make_attrgetter: "a.b.0" -> successive getitem lookups.
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none() || attribute.is_undefined()) return parts;
  if (!attribute.is_string()) {
    parts.push_back(attribute);
    return parts;
  }
  const std::string& s = attribute.str();
  std::size_t start = 0;
  while (true) {
    std::size_t dot = s.find('.', start);
    std::string p = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) {
      parts.emplace_back(static_cast<std::int64_t>(std::stoll(p)));
    } else {
      parts.emplace_back(p);
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

Value lookup_parts(Interpreter& interp, Value item, const std::vector<Value>& parts, const Value* fallback) {
  for (const auto& p : parts) {
    if (item.is_undefined()) item.fail_undefined();
    item = interp.getitem(item, p);
    if (fallback && item.is_undefined()) item = *fallback;
  }
  return item;
}

// Key function for sort/min/max/unique/groupby.
struct KeyFn {
  Interpreter& interp;
  std::vector<std::vector<Value>> parts;  // one entry per comma-separated attribute
  bool multi = false;
  bool ignore_case = false;
  const Value* fallback = nullptr;

  KeyFn(Interpreter& i, const Value& attribute, bool allow_multi, bool icase, const Value* def = nullptr)
      : interp(i), ignore_case(icase), fallback(def) {
    if (allow_multi && attribute.is_string()) {
      multi = true;
      const std::string& s = attribute.str();
      std::size_t start = 0;
      while (true) {
        std::size_t comma = s.find(',', start);
        parts.push_back(attribute_parts(Value(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start))));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else {
      parts.push_back(attribute_parts(attribute));
    }
  }

  Value operator()(const Value& item) const {
    if (!multi) {
      Value v = lookup_parts(interp, item, parts[0], fallback);
      return ignore_case ? lower_if_string(v) : v;
    }
    ValueList out;
    for (const auto& p : parts) {
      Value v = lookup_parts(interp, item, p, nullptr);
      out.push_back(ignore_case ? lower_if_string(v) : v);
    }
    return Value::list(std::move(out));
  }
};

void stable_sort_by_key(ValueList& items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, std::size_t>> keyed;
  keyed.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? py_compare(b.first, a.first) < 0 : py_compare(a.first, b.first) < 0;
  });
  ValueList out;
  out.reserve(items.size());
  for (const auto& k : keyed) out.push_back(items[k.second]);
  items = std::move(out);
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  std::u32string u = utf8_decode(s);
  std::u32string cur;
  for (std::size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    lines.push_back(utf8_encode(cur));
    cur.clear();
  }
  if (!cur.empty()) lines.push_back(utf8_encode(cur));
  return lines;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, std::int64_t count) {
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
    return out;
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
  return out;
}

// ---------------------------------------------------------------- the filters

Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "abs", {});
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_integral()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_undefined()) v.fail_undefined();
  throw_type_error("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_attr(Interpreter& interp, const Value& v, CallArgs& a) {
  ArgBinder b(a, "attr", {"name"});
  if (!b.has(0)) throw_type_error("attr() missing required argument 'name'");
  if (v.is_undefined()) v.fail_undefined();
  std::string name = s_of(b.get(0));
  if (v.is_dict()) {  // attributes only, never keys
    if (auto m = builtin_method(interp, v, name)) return *m;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  return interp.getattr(v, name);
}

Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "batch", {"linecount", "fill_with"});
  if (!b.has(0)) throw_type_error("batch() missing required argument 'linecount'");
  std::int64_t n = arg_int(b.get(0), "batch");
  Value fill = b.get_or(1, Value::none());
  ValueList out, tmp;
  for (auto& item : py_iterate(v)) {
    if (static_cast<std::int64_t>(tmp.size()) == n) {
      out.push_back(Value::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (!fill.is_none())
      while (static_cast<std::int64_t>(tmp.size()) < n) tmp.push_back(fill);
    out.push_back(Value::list(std::move(tmp)));
  }
  return Value::generator(std::move(out), "do_batch");
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "capitalize", {});
  std::u32string u = utf8_decode(s_of(v));
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? py_toupper(u[i]) : py_tolower(u[i]);
  return Value(utf8_encode(u));
}

std::string py_center(const std::string& s, std::int64_t width, const std::string& fill = " ") {
  if (width > (std::int64_t{1} << 24)) throw Error(Error::Kind::Runtime, "width too large");
  std::int64_t len = static_cast<std::int64_t>(utf8_length(s));
  if (width <= len) return s;
  std::int64_t marg = width - len;
  std::int64_t left = marg / 2 + (marg & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

Value f_center(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "center", {"width"});
  return Value(py_center(s_of(v), arg_int(b.get_or(0, Value(80)), "center")));
}

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "length", {});
  if (v.is_namespace() || v.is_object()) throw_type_error("object of type '" + v.type_name() + "' has no len()");
  return Value(py_len(v));
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "default", {"default_value", "boolean"});
  Value def = b.get_or(0, Value(""));
  bool boolean = b.has(1) && arg_bool(b.get(1));
  if (v.is_undefined() || (boolean && !v.truthy())) return def;
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "dictsort", {"case_sensitive", "by", "reverse"});
  bool cs = b.has(0) && arg_bool(b.get(0));
  std::string by = b.has(1) ? s_of(b.get(1)) : "key";
  bool reverse = b.has(2) && arg_bool(b.get(2));
  int pos;
  if (by == "key") {
    pos = 0;
  } else if (by == "value") {
    pos = 1;
  } else {
    filter_error("You can only sort by either \"key\" or \"value\"");
  }
  if (!v.is_dict()) {
    if (v.is_undefined()) v.fail_undefined();
    throw Error(Error::Kind::Type, "'" + v.type_name() + "' object has no attribute 'items'");
  }
  ValueList items;
  for (const auto& [k, x] : v.dict_ref().entries()) items.push_back(Value::tuple({k, x}));
  stable_sort_by_key(
      items,
      [&](const Value& item) {
        Value x = item.items()[static_cast<std::size_t>(pos)];
        return cs ? x : lower_if_string(x);
      },
      reverse);
  return Value::list(std::move(items));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "escape", {});
  if (v.is_markup()) return v;
  return Value(html_escape(py_str(v)), true);
}

Value f_forceescape(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "forceescape", {});
  return Value(html_escape(py_str(v)), true);
}

Value f_first(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "first", {});
  if (v.is_iterator() && !v.iter_state().is_view()) {  // next(iter(generator)) consumes one item
    IterState& it = v.iter_state();
    if (it.pos >= it.items.size()) return Value::undefined("No first item, sequence was empty.");
    return it.items[it.pos++];
  }
  ValueList items = py_iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "last", {});
  if (v.is_iterator() && !v.iter_state().is_view()) throw_type_error("'" + v.type_name() + "' object is not reversible");
  ValueList items = py_iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "float", {"default"});
  Value def = b.get_or(0, Value(0.0));
  if (v.is_undefined()) v.fail_undefined();
  try {
    return Value(py_to_float(v));
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::Type) throw;
    return def;
  }
}

Value parse_int_base(const std::string& text, std::int64_t base, bool& ok) {
  std::string t = py_strip(text, true, true);
  ok = false;
  std::string clean;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (i == 0 || i + 1 >= t.size()) return Value();
      continue;
    }
    clean.push_back(t[i]);
  }
  std::size_t i = 0;
  bool neg = false;
  if (i < clean.size() && (clean[i] == '+' || clean[i] == '-')) neg = clean[i++] == '-';
  std::string body = clean.substr(i);
  std::string low = py_lower(body);
  if (body.size() > 2 && low[0] == '0' && (low[1] == 'x' || low[1] == 'o' || low[1] == 'b')) {
    std::int64_t pb = low[1] == 'x' ? 16 : low[1] == 'o' ? 8 : 2;
    if (base == 0 || base == pb) {
      base = pb;
      body = body.substr(2);
    }
  }
  if (base == 0) base = 10;
  if (body.empty()) return Value();
  std::int64_t r = 0;
  for (char c : body) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'z') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'Z') {
      d = c - 'A' + 10;
    } else {
      return Value();
    }
    if (d >= base) return Value();
    if (checked_mul(r, base, &r) || checked_add(r, d, &r)) return Value();
  }
  ok = true;
  return Value(neg ? -r : r);
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "int", {"default", "base"});
  Value def = b.get_or(0, Value(0));
  std::int64_t base = b.has(1) ? arg_int(b.get(1), "int") : 10;
  if (v.is_undefined()) v.fail_undefined();
  if (v.is_string()) {
    bool ok;
    Value r = parse_int_base(v.str(), base, ok);
    if (ok) return r;
  } else if (v.is_number()) {
    try {
      return Value(py_to_int(v));
    } catch (const Error& e) {
      if (e.kind() != Error::Kind::Type) throw;
    }
  }
  try {
    double d = py_to_float(v);
    return Value(py_to_int(Value(d)));
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::Type) throw;
  }
  return def;
}

Value f_format(Interpreter&, const Value& v, CallArgs& a) {
  if (!a.positional.empty() && !a.keyword.empty())
    filter_error("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.keyword.empty()) {
    args = Value::dict();
    for (const auto& [k, x] : a.keyword) args.dict_ref().set(Value(k), x);
  } else {
    args = Value::tuple(a.positional);
  }
  Value s = soft_str(v);
  return Value(percent_format(s.str(), args), s.is_markup());
}

Value f_groupby(Interpreter& interp, const Value& v, CallArgs& a) {
  ArgBinder b(a, "groupby", {"attribute", "default", "case_sensitive"});
  if (!b.has(0)) throw_type_error("groupby() missing required argument 'attribute'");
  Value def = b.get_or(1, Value::none());
  bool cs = b.has(2) && arg_bool(b.get(2));
  const Value* fallback = def.is_none() ? nullptr : &def;
  KeyFn key(interp, b.get(0), false, !cs, fallback);
  KeyFn out_key(interp, b.get(0), false, false, fallback);
  ValueList items = py_iterate(v);
  stable_sort_by_key(items, key, false);
  ValueList groups;
  Value current_key;
  ValueList current;
  bool have = false;
  for (auto& item : items) {
    Value k = key(item);
    if (have && py_equal(k, current_key)) {
      current.push_back(item);
      continue;
    }
    if (have) groups.push_back(Value::group_tuple(cs ? current_key : out_key(current.front()), Value::list(current)));
    current_key = k;
    current = {item};
    have = true;
  }
  if (have) groups.push_back(Value::group_tuple(cs ? current_key : out_key(current.front()), Value::list(current)));
  return Value::list(std::move(groups));
}

Value f_indent(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "indent", {"width", "first", "blank"});
  Value width = b.get_or(0, Value(4));
  bool first = b.has(1) && arg_bool(b.get(1));
  bool blank = b.has(2) && arg_bool(b.get(2));
  std::string indention;
  if (width.is_string()) {
    indention = width.str();
  } else {
    std::int64_t w = arg_int(width, "indent");
    if (w > (std::int64_t{1} << 20)) throw Error(Error::Kind::Runtime, "indent width too large");
    indention = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, w)), ' ');
  }
  std::string s = s_of(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (std::size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        rv += lines[i].empty() ? lines[i] : indention + lines[i];
      }
    }
  }
  if (first) rv = indention + rv;
  return Value(rv, v.is_markup());
}

Value f_join(Interpreter& interp, const Value& v, CallArgs& a) {
  ArgBinder b(a, "join", {"d", "attribute"});
  std::string d = b.has(0) ? s_of(b.get(0)) : "";
  ValueList items = py_iterate(v);
  std::vector<Value> parts;
  if (b.has(1) && !b.get(1).is_none()) {
    auto p = attribute_parts(b.get(1));
    for (auto& x : items) x = lookup_parts(interp, x, p, nullptr);
  }
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += d;
    out += py_str(items[i]);
  }
  return Value(std::move(out));
}

Value f_list(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "list", {});
  return Value::list(py_iterate(v));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "lower", {});
  return Value(py_lower(s_of(v)));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "upper", {});
  return Value(py_upper(s_of(v)));
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "items", {});
  if (v.is_undefined()) return Value::generator({}, "do_items");
  if (!v.is_dict()) throw_type_error("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.dict_ref().entries()) out.push_back(Value::tuple({k, x}));
  return Value::generator(std::move(out), "do_items");
}

Value f_map(Interpreter& interp, const Value& v, CallArgs& a) {
  ValueList items = py_iterate(v);
  ValueList out;
  bool by_attr = a.positional.empty() &&
                 std::any_of(a.keyword.begin(), a.keyword.end(), [](const auto& kv) { return kv.first == "attribute"; });
  if (by_attr) {
    Value attribute, def = Value::none();
    for (const auto& [k, x] : a.keyword) {
      if (k == "attribute") {
        attribute = x;
      } else if (k == "default") {
        def = x;
      } else {
        filter_error("Unexpected keyword argument '" + k + "'");
      }
    }
    auto parts = attribute_parts(attribute);
    for (const auto& item : items) out.push_back(lookup_parts(interp, item, parts, def.is_none() ? nullptr : &def));
    return Value::generator(std::move(out), "sync_do_map");
  }
  if (a.positional.empty()) filter_error("map requires a filter argument");
  std::string name = s_of(a.positional[0]);
  for (const auto& item : items) {
    CallArgs sub;
    sub.positional.assign(a.positional.begin() + 1, a.positional.end());
    sub.keyword = a.keyword;
    out.push_back(interp.apply_filter(name, item, sub));
  }
  return Value::generator(std::move(out), "sync_do_map");
}

Value min_max(Interpreter& interp, const Value& v, CallArgs& a, bool want_max, const char* fname) {
  ArgBinder b(a, fname, {"case_sensitive", "attribute"});
  bool cs = b.has(0) && arg_bool(b.get(0));
  Value attribute = b.get_or(1, Value::none());
  ValueList items = py_iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  KeyFn key(interp, attribute, false, !cs);
  std::size_t best = 0;
  Value best_key = key(items[0]);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    int c = py_compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_min(Interpreter& interp, const Value& v, CallArgs& a) { return min_max(interp, v, a, false, "min"); }
Value f_max(Interpreter& interp, const Value& v, CallArgs& a) { return min_max(interp, v, a, true, "max"); }

Value f_pprint(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "pprint", {});
  return Value(py_repr(v));
}

Value select_reject(Interpreter& interp, const Value& v, CallArgs& a, bool select, bool by_attr) {
  if (!v.truthy()) return Value::generator({}, "select_or_reject");
  std::size_t off = 0;
  std::vector<Value> parts;
  if (by_attr) {
    if (a.positional.empty()) filter_error("Missing parameter for attribute name");
    parts = attribute_parts(a.positional[0]);
    off = 1;
  }
  bool has_test = a.positional.size() > off;
  std::string test_name = has_test ? s_of(a.positional[off]) : "";
  CallArgs test_args;
  if (has_test) {
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(off + 1), a.positional.end());
    test_args.keyword = a.keyword;
  }
  ValueList out;
  for (const auto& item : py_iterate(v)) {
    Value x = by_attr ? lookup_parts(interp, item, parts, nullptr) : item;
    bool r;
    if (has_test) {
      CallArgs ta = test_args;
      r = interp.apply_test(test_name, x, ta);
    } else {
      r = x.truthy();
    }
    if (r == select) out.push_back(item);
  }
  return Value::generator(std::move(out), "select_or_reject");
}

Value f_select(Interpreter& i, const Value& v, CallArgs& a) { return select_reject(i, v, a, true, false); }
Value f_reject(Interpreter& i, const Value& v, CallArgs& a) { return select_reject(i, v, a, false, false); }
Value f_selectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_reject(i, v, a, true, true); }
Value f_rejectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_reject(i, v, a, false, true); }

Value f_replace(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "replace", {"old", "new", "count"});
  if (!b.has(0) || !b.has(1)) throw_type_error("replace() missing required arguments");
  std::int64_t count = b.has(2) && !b.get(2).is_none() ? arg_int(b.get(2), "replace") : -1;
  return Value(py_replace(s_of(v), s_of(b.get(0)), s_of(b.get(1)), count));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "reverse", {});
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.str());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u), v.is_markup());
  }
  if (v.is_iterator() && !v.iter_state().is_view()) {  // not reversible: list(value) reversed
    ValueList items = py_iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (!py_is_iterable(v)) filter_error("argument must be iterable");
  ValueList items = py_iterate(v);
  std::reverse(items.begin(), items.end());
  std::string type = "reversed";
  if (v.is_list()) type = "list_reverseiterator";
  if (v.is_dict()) type = "dict_reversekeyiterator";
  if (v.is_iterator()) {
    auto f = v.iter_state().flavor;
    type = f == IterState::Flavor::DictKeys     ? "dict_reversekeyiterator"
           : f == IterState::Flavor::DictValues ? "dict_reversevalueiterator"
                                                : "dict_reverseitemiterator";
  }
  return Value::iterator(IterState::Flavor::ReverseIterator, std::move(items), type);
}

double round_half_even_digits(double x, std::int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits >= 0) {
    if (ndigits > 300) return x;
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-ndigits));
  double y = x / p;
  double r = std::nearbyint(y);  // default rounding mode: half to even
  return r * p;
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "round", {"precision", "method"});
  std::int64_t precision = b.has(0) ? arg_int(b.get(0), "round") : 0;
  std::string method = b.has(1) ? s_of(b.get(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor") filter_error("method must be common, ceil or floor");
  if (v.is_undefined()) v.fail_undefined();
  if (!v.is_number()) throw_type_error("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_integral()) {
      if (precision >= 0) return Value(v.as_int());
      double r = round_half_even_digits(static_cast<double>(v.as_int()), precision);
      return Value(static_cast<std::int64_t>(r));
    }
    return Value(round_half_even_digits(v.as_double(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : std::floor(x);
  return Value(r / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "safe", {});
  return Value(py_str(v), true);
}

Value f_slice(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "slice", {"slices", "fill_with"});
  if (!b.has(0)) throw_type_error("slice() missing required argument 'slices'");
  std::int64_t slices = arg_int(b.get(0), "slice");
  Value fill = b.get_or(1, Value::none());
  ValueList seq = py_iterate(v);
  std::int64_t length = static_cast<std::int64_t>(seq.size());
  if (slices <= 0) throw Error(Error::Kind::Type, "integer division or modulo by zero");
  std::int64_t per = length / slices, extra = length % slices, offset = 0;
  ValueList out;
  for (std::int64_t n = 0; n < slices; ++n) {
    std::int64_t start = offset + n * per;
    if (n < extra) ++offset;
    std::int64_t end = offset + (n + 1) * per;
    ValueList tmp(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && n >= extra) tmp.push_back(fill);
    out.push_back(Value::list(std::move(tmp)));
  }
  return Value::generator(std::move(out), "sync_do_slice");
}

Value f_sort(Interpreter& interp, const Value& v, CallArgs& a) {
  ArgBinder b(a, "sort", {"reverse", "case_sensitive", "attribute"});
  bool reverse = b.has(0) && arg_bool(b.get(0));
  bool cs = b.has(1) && arg_bool(b.get(1));
  Value attribute = b.get_or(2, Value::none());
  ValueList items = py_iterate(v);
  KeyFn key(interp, attribute, true, !cs);
  stable_sort_by_key(items, key, reverse);
  return Value::list(std::move(items));
}

Value f_string(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "string", {});
  return soft_str(v);
}

std::string html_unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    std::size_t semi = s.find(';', i);
    if (semi == std::string::npos || semi - i > 10) {
      out.push_back('&');
      continue;
    }
    std::string ent = s.substr(i + 1, semi - i - 1);
    std::string rep;
    if (ent == "amp") rep = "&";
    else if (ent == "lt") rep = "<";
    else if (ent == "gt") rep = ">";
    else if (ent == "quot") rep = "\"";
    else if (ent == "apos") rep = "'";
    else if (ent == "nbsp") utf8_append(rep, 0xA0);
    else if (ent.size() > 1 && ent[0] == '#') {
      char* end = nullptr;
      long cp = (ent[1] == 'x' || ent[1] == 'X') ? std::strtol(ent.c_str() + 2, &end, 16)
                                                 : std::strtol(ent.c_str() + 1, &end, 10);
      if (end && *end == '\0' && cp > 0 && cp <= 0x10FFFF) utf8_append(rep, static_cast<char32_t>(cp));
    }
    if (rep.empty()) {
      out.push_back('&');
      continue;
    }
    out += rep;
    i = semi;
  }
  return out;
}

Value f_striptags(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "striptags", {});
  std::string s = py_str(v);
  std::string no_comments;
  for (std::size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      std::size_t e = s.find("-->", i + 4);
      if (e != std::string::npos) {
        i = e + 3;
        continue;
      }
    }
    no_comments.push_back(s[i++]);
  }
  std::string no_tags;
  for (std::size_t i = 0; i < no_comments.size();) {
    if (no_comments[i] == '<') {
      std::size_t e = no_comments.find('>', i + 1);
      if (e != std::string::npos) {
        i = e + 1;
        continue;
      }
    }
    no_tags.push_back(no_comments[i++]);
  }
  std::u32string u = utf8_decode(no_tags);
  std::string out, word;
  for (char32_t c : u) {
    if (py_isspace(c)) {
      if (!word.empty()) {
        if (!out.empty()) out += " ";
        out += word;
        word.clear();
      }
    } else {
      utf8_append(word, c);
    }
  }
  if (!word.empty()) {
    if (!out.empty()) out += " ";
    out += word;
  }
  return Value(html_unescape(out));
}

Value f_sum(Interpreter& interp, const Value& v, CallArgs& a) {
  ArgBinder b(a, "sum", {"attribute", "start"});
  Value total = b.get_or(1, Value(0));
  std::vector<Value> parts;
  bool by_attr = b.has(0) && !b.get(0).is_none();
  if (by_attr) parts = attribute_parts(b.get(0));
  for (const auto& item : py_iterate(v)) total = py_add(total, by_attr ? lookup_parts(interp, item, parts, nullptr) : item);
  return total;
}

Value f_title(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "title", {});
  std::u32string u = utf8_decode(s_of(v));
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::u32string out;
  bool at_start = true;
  for (char32_t c : u) {
    if (is_sep(c)) {
      out.push_back(c);
      at_start = true;
    } else {
      out.push_back(at_start ? py_toupper(c) : py_tolower(c));
      at_start = false;
    }
  }
  return Value(utf8_encode(out));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "trim", {"chars"});
  std::string s = s_of(v);
  if (b.has(0) && !b.get(0).is_none()) return Value(py_strip_chars(s, s_of(b.get(0)), true, true));
  return Value(py_strip(s, true, true));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "truncate", {"length", "killwords", "end", "leeway"});
  std::int64_t length = b.has(0) ? arg_int(b.get(0), "truncate") : 255;
  bool killwords = b.has(1) && arg_bool(b.get(1));
  std::string end = b.has(2) ? s_of(b.get(2)) : "...";
  std::int64_t leeway = b.has(3) && !b.get(3).is_none() ? arg_int(b.get(3), "truncate") : 5;
  std::int64_t end_len = static_cast<std::int64_t>(utf8_length(end));
  if (length < end_len) filter_error("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) filter_error("expected leeway >= 0, got " + std::to_string(leeway));
  std::string s = s_of(v);
  std::u32string u = utf8_decode(s);
  if (static_cast<std::int64_t>(u.size()) <= length + leeway) return Value(s);
  std::u32string head = u.substr(0, static_cast<std::size_t>(length - end_len));
  if (killwords) return Value(utf8_encode(head) + end);
  std::size_t sp = head.rfind(U' ');
  if (sp != std::u32string::npos) head = head.substr(0, sp);
  return Value(utf8_encode(head) + end);
}

Value f_unique(Interpreter& interp, const Value& v, CallArgs& a) {
  ArgBinder b(a, "unique", {"case_sensitive", "attribute"});
  bool cs = b.has(0) && arg_bool(b.get(0));
  KeyFn key(interp, b.get_or(1, Value::none()), false, !cs);
  std::unordered_set<std::string> seen;
  ValueList out;
  for (const auto& item : py_iterate(v)) {
    if (seen.insert(py_hash_key(key(item))).second) out.push_back(item);
  }
  return Value::generator(std::move(out), "sync_do_unique");
}

std::string url_quote(const std::string& s, bool for_qs) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else if (for_qs && c == ' ') {
      out.push_back('+');
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

Value f_urlencode(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "urlencode", {});
  if (v.is_string()) return Value(url_quote(v.str(), false));
  ValueList pairs;
  if (v.is_dict()) {
    for (const auto& [k, x] : v.dict_ref().entries()) pairs.push_back(Value::tuple({k, x}));
  } else {
    pairs = py_iterate(v);
  }
  std::string out;
  for (const auto& p : pairs) {
    ValueList kv = py_iterate(p);
    if (kv.size() != 2) throw_type_error("urlencode expects pairs");
    if (!out.empty()) out += "&";
    out += url_quote(py_str(kv[0]), true) + "=" + url_quote(py_str(kv[1]), true);
  }
  return Value(out);
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder(a, "wordcount", {});
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(s_of(v))) {
    bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_xmlattr(Interpreter&, const Value& v, CallArgs& a) {
  ArgBinder b(a, "xmlattr", {"autospace"});
  bool autospace = !b.has(0) || arg_bool(b.get(0));
  if (!v.is_dict()) throw_type_error("xmlattr requires a mapping");
  std::string rv;
  for (const auto& [k, x] : v.dict_ref().entries()) {
    if (x.is_none() || x.is_undefined()) continue;
    std::string key = py_str(k);
    for (char c : key)
      if (c == ' ' || c == '/' || c == '>' || c == '=' || c == '\t' || c == '\n' || c == '\r' || c == '\f')
        throw Error(Error::Kind::Type, "Invalid character in attribute name: " + py_string_repr(key));
    if (!rv.empty()) rv += " ";
    rv += html_escape(key) + "=\"" + html_escape(py_str(x)) + "\"";
  }
  if (autospace && !rv.empty()) rv = " " + rv;
  return Value(rv);
}

Value f_tojson(Interpreter& interp, const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  auto set_indent = [&](const Value& indent) {
    if (indent.is_none()) return;
    o.has_indent = true;
    if (indent.is_string()) {
      o.indent = indent.str();
    } else {
      std::int64_t n = arg_int(indent, "tojson");
      o.indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, n)), ' ');
    }
    o.item_separator = ",";
  };
  if (interp.options().tojson == TojsonStyle::Jinja2) {
    ArgBinder b(a, "tojson", {"indent"});
    o.sort_keys = true;
    o.ensure_ascii = true;
    if (b.has(0)) set_indent(b.get(0));
    std::string s = json_dumps(v, o);
    std::string out;
    for (char c : s) {
      switch (c) {
        case '<':
          out += "\\u003c";
          break;
        case '>':
          out += "\\u003e";
          break;
        case '&':
          out += "\\u0026";
          break;
        case '\'':
          out += "\\u0027";
          break;
        default:
          out.push_back(c);
      }
    }
    return Value(out, true);
  }
  ArgBinder b(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  o.ensure_ascii = b.has(0) && arg_bool(b.get(0));
  if (b.has(1)) set_indent(b.get(1));
  if (b.has(2) && !b.get(2).is_none()) {
    ValueList seps = py_iterate(b.get(2));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      throw_type_error("separators must be a (item_separator, key_separator) pair of strings");
    o.item_separator = seps[0].str();
    o.key_separator = seps[1].str();
  }
  o.sort_keys = b.has(3) && arg_bool(b.get(3));
  return Value(json_dumps(v, o));
}

Value f_unsupported(Interpreter&, const Value&, CallArgs&) {
  throw Error(Error::Kind::Unsupported, "this filter is not supported");
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

const FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"filesizeformat", f_unsupported},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"items", f_items},
    {"map", f_map},
    {"min", f_min},
    {"max", f_max},
    {"pprint", f_pprint},
    {"random", f_unsupported},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"striptags", f_striptags},
    {"sum", f_sum},
    {"title", f_title},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"urlencode", f_urlencode},
    {"urlize", f_unsupported},
    {"wordcount", f_wordcount},
    {"wordwrap", f_unsupported},
    {"xmlattr", f_xmlattr},
    {"tojson", f_tojson},
};

const FilterEntry* find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace

bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }

Value call_filter(Interpreter& interp, const std::string& name, const Value& value, CallArgs& args) {
  const FilterEntry* f = find_filter(name);
  if (!f) throw Error(Error::Kind::Unsupported, "No filter named '" + name + "'.");
  if (f->fn == f_unsupported) throw Error(Error::Kind::Unsupported, "the '" + name + "' filter is not supported");
  return f->fn(interp, value, args);
}

}  // namespace kiln::jinja
