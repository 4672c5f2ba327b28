// kiln::jinja tests: API checks plus the conformance suite generated with Python
// jinja2 by tests/python/gen_jinja_cases.py (run as a CTest fixture; the file is
// found through $KILN_JINJA_CASES or the KILN_JINJA_CASES compile definition).
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "model/jinja/chat_template.h"

namespace {

using kiln::jinja::ChatTemplateOptions;
using kiln::jinja::Error;
using kiln::jinja::Template;
using kiln::jinja::TemplateOptions;
using kiln::jinja::Value;
using ojson = nlohmann::ordered_json;

// The generator's strftime_now uses datetime(2024, 7, 26, 9, 5, 3).
std::string fixed_strftime(const std::string& format) {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_min = 5;
  tm.tm_sec = 3;
  tm.tm_wday = 5;    // Friday
  tm.tm_yday = 207;  // 0-based day of the year
  tm.tm_isdst = -1;
  char buf[512];
  std::size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
  return std::string(buf, n);
}

kiln::jinja::Context render_context(const ojson& ctx) {
  kiln::jinja::Context c;
  for (auto it = ctx.begin(); it != ctx.end(); ++it) c[it.key()] = kiln::jinja::from_json(it.value());
  c["raise_exception"] = kiln::jinja::raise_exception_function();
  c["strftime_now"] = kiln::jinja::make_function("strftime_now", [](const kiln::jinja::CallArgs& a) {
    return Value(fixed_strftime(a.positional.at(0).str()));
  });
  return c;
}

struct Outcome {
  bool ok = false;
  std::string output;
  Error::Kind kind = Error::Kind::Runtime;
  std::string message;
};

Outcome run_case(const ojson& c) {
  Outcome r;
  const ojson& opts = c["options"];
  try {
    if (c["kind"] == "chat") {
      const ojson& ctx = c["context"];
      ChatTemplateOptions o;
      o.add_generation_prompt = ctx["add_generation_prompt"].get<bool>();
      o.bos_token = ctx["bos_token"].get<std::string>();
      o.eos_token = ctx["eos_token"].get<std::string>();
      o.tools = ctx["tools"];
      o.documents = ctx["documents"];
      o.extra_context = ctx["extra"];
      o.strftime_now = fixed_strftime;
      r.output = kiln::jinja::apply_chat_template(c["template"].get<std::string>(), ctx["messages"], o);
    } else {
      TemplateOptions o;
      o.trim_blocks = opts.value("trim_blocks", true);
      o.lstrip_blocks = opts.value("lstrip_blocks", true);
      o.keep_trailing_newline = opts.value("keep_trailing_newline", false);
      o.immutable_sandbox = opts.value("immutable_sandbox", true);
      o.tojson = opts.value("tojson", std::string("transformers")) == "jinja2" ? kiln::jinja::TojsonStyle::Jinja2
                                                                               : kiln::jinja::TojsonStyle::Transformers;
      Template t(c["template"].get<std::string>(), o);
      r.output = t.render(render_context(c["context"]));
    }
    r.ok = true;
  } catch (const Error& e) {
    r.kind = e.kind();
    r.message = e.what();
  } catch (const std::exception& e) {
    r.kind = Error::Kind::Runtime;
    r.message = std::string("non-jinja exception: ") + e.what();
  }
  return r;
}

const char* kind_name(Error::Kind k) {
  switch (k) {
    case Error::Kind::Syntax:
      return "Syntax";
    case Error::Kind::Undefined:
      return "Undefined";
    case Error::Kind::Type:
      return "Type";
    case Error::Kind::Security:
      return "Security";
    case Error::Kind::Unsupported:
      return "Unsupported";
    case Error::Kind::Raised:
      return "Raised";
    case Error::Kind::Runtime:
      return "Runtime";
  }
  return "?";
}

std::string show(const std::string& s, std::size_t max = 400) {
  std::string t = ojson(s).dump();
  return t.size() > max ? t.substr(0, max) + "..." : t;
}

// Returns an empty string when the outcome matches the expectation.
std::string check(const ojson& c, const Outcome& r) {
  const ojson& err = c["error"];
  if (err.is_null()) {
    if (!r.ok) return std::string("unexpected error [") + kind_name(r.kind) + "] " + r.message;
    std::string expected = c["expected"].get<std::string>();
    if (r.output == expected) return "";
    std::size_t i = 0;
    while (i < expected.size() && i < r.output.size() && expected[i] == r.output[i]) ++i;
    std::size_t from = i > 60 ? i - 60 : 0;
    return "output differs at byte " + std::to_string(i) + "\n      expected: " + show(expected.substr(from)) +
           "\n      actual:   " + show(r.output.substr(from));
  }
  std::string type = err["type"].get<std::string>();
  std::string message = err["message"].get<std::string>();
  if (r.ok) return "expected " + type + " (" + message + ") but rendered " + show(r.output);
  if (type == "TemplateError") {
    if (r.kind != Error::Kind::Raised || r.message != message)
      return "expected raise_exception(" + show(message) + "), got [" + kind_name(r.kind) + "] " + r.message;
  } else if (type == "UndefinedError" && r.kind != Error::Kind::Undefined) {
    return std::string("expected UndefinedError, got [") + kind_name(r.kind) + "] " + r.message;
  } else if (type == "SecurityError" && r.kind != Error::Kind::Security) {
    return std::string("expected SecurityError, got [") + kind_name(r.kind) + "] " + r.message;
  } else if ((type == "TemplateSyntaxError" || type == "TemplateAssertionError") && r.kind != Error::Kind::Syntax) {
    return std::string("expected a syntax error, got [") + kind_name(r.kind) + "] " + r.message;
  }
  return "";
}

std::string cases_path() {
  if (const char* p = std::getenv("KILN_JINJA_CASES")) return p;
#ifdef KILN_JINJA_CASES
  return KILN_JINJA_CASES;
#else
  return "";
#endif
}

}  // namespace

TEST(JinjaConformance, MatchesPythonJinja2) {
  std::string path = cases_path();
  std::ifstream in(path);
  if (path.empty() || !in) {
    GTEST_SKIP() << "no conformance cases at '" << path
                 << "': run `python3 tests/python/gen_jinja_cases.py OUT.json` (needs Python jinja2) and set "
                    "KILN_JINJA_CASES=OUT.json";
  }
  ojson doc = ojson::parse(in);
  const ojson& cases = doc["cases"];
  std::size_t passed = 0, chat_total = 0, chat_passed = 0;
  std::ostringstream failures;
  std::size_t shown = 0;
  for (const auto& c : cases) {
    Outcome r = run_case(c);
    std::string problem = check(c, r);
    bool chat = c["kind"] == "chat";
    chat_total += chat ? 1 : 0;
    if (problem.empty()) {
      ++passed;
      chat_passed += chat ? 1 : 0;
    } else if (shown++ < 60) {
      failures << "  FAIL " << c["name"].get<std::string>() << ": " << problem << "\n";
    }
  }
  std::cout << failures.str();
  std::cout << "jinja conformance (chat templates): " << chat_passed << "/" << chat_total << " passed\n";
  std::cout << "jinja conformance: " << passed << "/" << cases.size() << " passed (reference: jinja2 "
            << doc.value("jinja2_version", std::string("?")) << ")\n";
  EXPECT_EQ(passed, cases.size()) << failures.str();
}

// ---------------------------------------------------------------- API checks

TEST(Jinja, ApplyChatTemplateFrontEnd) {
  const std::string tmpl =
      "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
      "{% if tools %}{{ tools|tojson }}{% endif %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
  nlohmann::json messages = {{{"role", "user"}, {"content", "hi"}}};
  std::string out = kiln::jinja::apply_chat_template(tmpl, messages, {.add_generation_prompt = true, .bos_token = "<s>"});
  EXPECT_EQ(out, "<s><|user|>hi\n<|assistant|>");
  ojson tools = ojson::parse(R"([{"type":"function","function":{"name":"f","parameters":{"z":1,"a":"é<"}}}])");
  out = kiln::jinja::apply_chat_template(tmpl, ojson::array(), {.tools = tools});
  EXPECT_EQ(out, R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": "é<"}}}])");
}

TEST(Jinja, ChatTemplateDefaultsAndExtraContext) {
  kiln::jinja::ChatTemplate t("{{ tools is none }} {{ documents is none }} {{ flag }} {{ strftime_now('%Y')|length }}");
  EXPECT_EQ(t.apply(ojson::array(), {.extra_context = {{"flag", "on"}}}), "True True on 4");
}

TEST(Jinja, RaiseExceptionMessage) {
  try {
    kiln::jinja::apply_chat_template("{{ raise_exception('Roles must alternate') }}", ojson::array());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::Raised);
    EXPECT_STREQ(e.what(), "Roles must alternate");
    EXPECT_EQ(e.message(), "Roles must alternate");
  }
}

TEST(Jinja, ErrorsNameConstructAndLine) {
  try {
    Template t("a\nb\n{% include 'x' %}");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::Unsupported);
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(std::string(e.what()).find("include"), std::string::npos) << e.what();
  }
  try {
    Template t("line 1\n{{ x.y }}");
    t.render({});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::Undefined);
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("'x' is undefined"), std::string::npos) << e.what();
  }
  try {
    Template t("{% for x in y %}\n{{ x | nosuchfilter }}{% endfor %}");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::Syntax);
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("nosuchfilter"), std::string::npos) << e.what();
  }
}

TEST(Jinja, TemplateIsReusable) {
  Template t("{% set ns = namespace(n=0) %}{% for i in items %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
             {.trim_blocks = true, .lstrip_blocks = true});
  EXPECT_EQ(t.render({{"items", kiln::jinja::from_json(ojson::parse("[1,2,3]"))}}), "6");
  EXPECT_EQ(t.render({{"items", kiln::jinja::from_json(ojson::parse("[10]"))}}), "10");
}

TEST(Jinja, MutableSandboxOption) {
  Template strict("{% set l = [] %}{{ l.append(1) }}{{ l }}");
  EXPECT_THROW(strict.render({}), Error);
  Template relaxed("{% set l = [] %}{{ l.append(1) }}{{ l }}", {.immutable_sandbox = false});
  EXPECT_EQ(relaxed.render({}), "None[1]");
}

TEST(Jinja, Jinja2TojsonStyle) {
  Template t("{{ {'b': '<&>', 'a': 'é'}|tojson }}", {.tojson = kiln::jinja::TojsonStyle::Jinja2});
  EXPECT_EQ(t.render({}), R"({"a": "\u00e9", "b": "\u003c\u0026\u003e"})");
  Template hf("{{ {'b': '<&>', 'a': 'é'}|tojson }}");
  EXPECT_EQ(hf.render({}), R"({"b": "<&>", "a": "é"})");
}

TEST(Jinja, PythonValueFormatting) {
  Template t("{{ [1, 'a', none, true, 1.5, {'k': (1,)}] }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 10 // 3 }} {{ -7 % 3 }}");
  EXPECT_EQ(t.render({}), "[1, 'a', None, True, 1.5, {'k': (1,)}] 1e+16 0.30000000000000004 3 2");
}

TEST(Jinja, PathologicalInputsFailCleanly) {
  std::string deep(2000, '(');
  EXPECT_THROW(Template("{{ " + deep + "1" + std::string(2000, ')') + " }}"), Error);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_THROW(Template{blocks}, Error);
  EXPECT_THROW(Template("{{ 'ab' * 1000000000000 }}").render({}), Error);
  EXPECT_THROW(Template("{{ '%99999999999999999999d' % 1 }}").render({}), Error);
  EXPECT_THROW(Template("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").render({}), Error);
  EXPECT_THROW(Template("{{ 'x'.center(100000000000) }}").render({}), Error);
}

// ---------------------------------------------------------------- reference cycles

namespace {

// probe(x, ...) remembers a weak reference to the heap object behind each argument,
// so that a test can check that a render freed everything it built, cycles included.
class Probe {
 public:
  Value function() {
    auto seen = seen_;
    return kiln::jinja::make_function("probe", [seen](const kiln::jinja::CallArgs& a) {
      for (const auto& v : a.positional) {
        if (v.list_ptr()) seen->emplace_back(v.list_ptr());
        if (v.dict_ptr()) seen->emplace_back(v.dict_ptr());
        if (v.callable_shared()) seen->emplace_back(v.callable_shared());
        if (v.object_shared()) seen->emplace_back(v.object_shared());
        if (v.iter_ptr()) seen->emplace_back(v.iter_ptr());
      }
      return Value("");
    });
  }
  std::size_t seen() const { return seen_->size(); }
  std::size_t alive() const {
    std::size_t n = 0;
    for (const auto& w : *seen_) n += w.expired() ? 0 : 1;
    return n;
  }

 private:
  std::shared_ptr<std::vector<std::weak_ptr<const void>>> seen_ =
      std::make_shared<std::vector<std::weak_ptr<const void>>>();
};

// Renders src with probe() and returns the output; expects everything probed freed.
std::string render_freed(const std::string& src, std::size_t probes, bool immutable = true) {
  Probe probe;
  std::string out;
  {
    Template t(src, {.immutable_sandbox = immutable});
    out = t.render({{"probe", probe.function()}});
  }
  EXPECT_EQ(probe.seen(), probes) << src;
  EXPECT_EQ(probe.alive(), 0u) << "render leaked a reference cycle: " << src;
  return out;
}

}  // namespace

TEST(Jinja, RenderFreesReferenceCycles) {
  // A macro is held by the frame it closes over (every macro), at top level, in a
  // macro call and in a loop body; an escaped macro still works after its loop.
  EXPECT_EQ(render_freed("{% macro m() %}m{% endmacro %}{{ probe(m) }}{{ m() }}", 1), "m");
  EXPECT_EQ(render_freed("{% macro outer(n) %}{% macro inner() %}{{ n }}{% endmacro %}{{ probe(inner) }}"
                         "{{ inner() }}{% if n %}{{ outer(n - 1) }}{% endif %}{% endmacro %}{{ outer(2) }}",
                         3),
            "210");
  EXPECT_EQ(render_freed("{% set ns = namespace() %}{% for i in [1, 2] %}{% macro m() %}m{% endmacro %}"
                         "{% set ns.m = m %}{% endfor %}{{ probe(ns, ns.m) }}{{ ns.m() }}",
                         2),
            "m");
  // Namespaces that lead back to themselves directly or through lists, dicts, dict
  // views, loops, loop methods, cyclers and bound methods.
  EXPECT_EQ(render_freed("{% set ns = namespace(a=[]) %}{% set x = ns %}{% set ns.self = ns %}{{ probe(ns) }}"
                         "{{ ns.self.self.a }}",
                         1),
            "[]");
  render_freed("{% set ns = namespace() %}{% set ns.l = [ns, {'k': (ns,)}] %}{{ probe(ns, ns.l) }}", 2);
  render_freed("{% set ns = namespace(d={}) %}{% set ns.d = {'x': ns} %}{% set ns.v = ns.d.items() %}"
               "{{ probe(ns.v) }}",
               1);
  EXPECT_EQ(render_freed("{% set ns = namespace() %}{% for x in [ns, 2] %}{% set ns.loop = loop %}"
                         "{% set ns.c = loop.cycle %}{{ loop.changed(ns) }}{{ probe(loop, ns.c) }}{% endfor %}"
                         "{{ ns.loop.length }}",
                         4),
            "TrueFalse2");
  render_freed("{% set ns = namespace() %}{% set ns.c = cycler(ns, 1) %}{% set ns.n = ns.c.next %}"
               "{{ probe(ns.c, ns.n) }}",
               2);
  render_freed("{% set ns = namespace(s='x') %}{% set ns.f = ns.s.upper %}{% set ns.d = {'n': ns} %}"
               "{% set ns.g = ns.d.get %}{{ probe(ns.f, ns.g) }}",
               2);
  // caller() kept where its own frame can reach it.
  EXPECT_EQ(render_freed("{% set ns = namespace() %}{% macro m() %}{% set ns.c = caller %}{{ caller() }}"
                         "{% endmacro %}{% call m() %}hi{% endcall %}{{ probe(ns.c) }}{{ ns.c() }}",
                         1),
            "hihi");
  // Lists and dicts put into themselves (the mutable sandbox allows it).
  EXPECT_EQ(render_freed("{% set l = [] %}{{ l.append(l) }}{{ l.insert(0, [l]) }}{{ l.extend([l]) }}"
                         "{% set d = {} %}{{ d.update({'d': d}) }}{{ d.setdefault('e', [d]) }}"
                         "{% set m = [] %}{{ m.append(m.append) }}{{ probe(l, d, m) }}{{ l|length }}",
                         3, false),
            "NoneNoneNoneNone[{'d': {...}, 'e': [...]}]None3");
  // Many short-lived cycles (the heap's registry compacts as it grows).
  EXPECT_EQ(render_freed("{% set ns = namespace(n=0) %}{% for i in range(3000) %}{% set t = namespace(i=i) %}"
                         "{% set t.self = t %}{% macro m() %}{{ i }}{% endmacro %}{% set ns.n = ns.n + 1 %}"
                         "{% if loop.first or loop.last %}{{ probe(t, m) }}{{ m() }}{% endif %}{% endfor %}"
                         "{{ ns.n }}",
                         4),
            "029993000");
  // Cycles built before an error are freed too.
  Probe probe;
  EXPECT_THROW(Template("{% macro m() %}{% endmacro %}{% set ns = namespace() %}{% set ns.s = ns %}"
                        "{{ probe(m, ns) }}{{ raise_exception('stop') }}")
                   .render({{"probe", probe.function()}, {"raise_exception", kiln::jinja::raise_exception_function()}}),
               Error);
  EXPECT_EQ(probe.seen(), 2u);
  EXPECT_EQ(probe.alive(), 0u);
}

TEST(Jinja, RenderCollectsOnlyGarbage) {
  // A context the render owns (an rvalue): its containers are freed when the
  // template makes them cyclic.
  Probe probe;
  Template grow("{{ items.append(items) }}{{ probe(items) }}{{ items|length }}", {.immutable_sandbox = false});
  // (Not from a braced list: its elements would hold the values until render returns.)
  kiln::jinja::Context owned{{"items", kiln::jinja::from_json(ojson::parse("[1]"))}, {"probe", probe.function()}};
  EXPECT_EQ(grow.render(std::move(owned)), "None2");
  EXPECT_EQ(probe.alive(), 0u);

  // Values the caller still holds keep their contents, cycles included, along with
  // what the render put into them.
  Probe kept;
  kiln::jinja::Context ctx{{"items", kiln::jinja::from_json(ojson::parse("[1]"))}, {"probe", kept.function()}};
  Template keep(
      "{% set ns = namespace(n=1) %}{% set ns.self = ns %}{% macro m() %}{{ ns.n }}{% endmacro %}{{ probe(ns, m) }}"
      "{{ items.append(ns) }}{{ items.append(m) }}{% set m = none %}{{ items.append({'a': [2]}) }}"
      "{{ items.append(items) }}",
      {.immutable_sandbox = false});
  EXPECT_EQ(keep.render(ctx), "NoneNoneNoneNone");
  {
    const Value& items = ctx.at("items");
    ASSERT_EQ(items.items().size(), 5u);
    const Value& ns = items.items()[1];
    ASSERT_TRUE(ns.is_namespace());
    EXPECT_EQ(ns.dict_ref().find(Value("self"))->dict_ptr(), ns.dict_ptr());
    EXPECT_EQ(ns.dict_ref().find(Value("n"))->as_int(), 1);
    EXPECT_TRUE(items.items()[2].is_callable());
    EXPECT_EQ(kiln::jinja::py_repr(items.items()[3]), "{'a': [2]}");
    EXPECT_EQ(items.items()[4].list_ptr(), items.list_ptr());
  }
  // A later render can still call the macro that escaped (its closure survived).
  EXPECT_EQ(Template("{{ items[2]() }}").render(ctx), "1");
  EXPECT_EQ(kept.alive(), 2u);
  // The caller breaks the cycles it kept (ns -> ns, items -> items, and
  // items -> macro -> its frame -> items).
  ctx.at("items").items()[1].dict_ref().clear();
  ctx.at("items").items().clear();
  EXPECT_EQ(kept.alive(), 0u);
}

TEST(Jinja, NestedRenderInCallable) {
  Template inner("{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(v) }}");
  Probe probe;
  auto fn = kiln::jinja::make_function("inner", [&inner](const kiln::jinja::CallArgs& a) {
    return Value(inner.render({{"v", a.positional.at(0)}}));
  });
  EXPECT_EQ(render_freed("", 0), "");
  Template outer("{% set ns = namespace() %}{% set ns.s = ns %}{{ probe(ns) }}{{ inner(ns.s is defined) }}");
  EXPECT_EQ(outer.render({{"inner", fn}, {"probe", probe.function()}}), "<True>");
  EXPECT_EQ(probe.alive(), 0u);
  // What the nested render leaves alive (a macro, closed over that render's frame,
  // put into the outer render's list) is collected with the outer render.
  Template fill_tmpl("{% macro m() %}x{% endmacro %}{{ out.append(m) }}", {.immutable_sandbox = false});
  auto fill = kiln::jinja::make_function("fill", [&fill_tmpl](const kiln::jinja::CallArgs& a) {
    return Value(fill_tmpl.render({{"out", a.positional.at(0)}}));
  });
  Probe probe2;
  Template outer2("{% set l = [] %}{{ fill(l) }}{{ probe(l[0]) }}{{ l[0]() }}");
  EXPECT_EQ(outer2.render({{"fill", fill}, {"probe", probe2.function()}}), "Nonex");
  EXPECT_EQ(probe2.seen(), 1u);
  EXPECT_EQ(probe2.alive(), 0u);
}

TEST(Jinja, SelfReferencingValuesBehaveLikePython) {
  // repr marks a container met inside itself, as Python does.
  Template ns(
      "{% set ns = namespace(a=1) %}{% set ns.self = ns %}{% set ns.l = [ns, {'k': (ns,)}] %}"
      "{{ ns }}|{{ ns.l }}|{{ ns == ns }}|{{ ns.l == ns.l }}");
  EXPECT_EQ(ns.render({}),
            "<Namespace {'a': 1, 'self': <Namespace {...}>, 'l': [<Namespace {...}>, {'k': (<Namespace {...}>,)}]}>|"
            "[<Namespace {'a': 1, 'self': <Namespace {...}>, 'l': [...]}>, {'k': (<Namespace {'a': 1, 'self': "
            "<Namespace {...}>, 'l': [...]}>,)}]|True|True");
  const TemplateOptions mutable_sandbox{.immutable_sandbox = false};
  Template lists(
      "{% set l = [1] %}{{ l.append(l) }}{{ l }}{% set d = {} %}{{ d.update({'d': d, 't': (d, l)}) }}{{ d }}|"
      "{{ l == l }}|{{ l < l }}|{{ d == d }}|{{ [l] == [l] }}",
      mutable_sandbox);
  EXPECT_EQ(lists.render({}), "None[1, [...]]None{'d': {...}, 't': ({...}, [1, [...]])}|True|False|True|True");
  Template more(
      "{% set l = [1] %}{{ l.append(l) }}{{ l|string }}|{{ '%r %s'|format(l, l) }}|{{ l in l }}|{{ [l] in [[l]] }}|"
      "{{ '{} {!r}'.format(l, l) }}",
      mutable_sandbox);
  EXPECT_EQ(more.render({}), "None[1, [...]]|[1, [...]] [1, [...]]|True|True|[1, [...]] [1, [...]]");
  // json.dumps' check_circular, and Python's RecursionError for comparisons that
  // would never end.
  try {
    Template("{% set l = [1] %}{{ l.append(l) }}{{ l|tojson }}", mutable_sandbox).render({});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Circular reference detected"), std::string::npos) << e.what();
  }
  try {
    Template("{% set a = [] %}{% set b = [] %}{{ a.append(a) }}{{ b.append(b) }}{{ a == b }}", mutable_sandbox)
        .render({});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("maximum recursion depth exceeded"), std::string::npos) << e.what();
  }
}
