#!/usr/bin/python3
"""Golden renderings of chat templates for gochat's chattemplate package.

Renders chat templates the way Hugging Face transformers' apply_chat_template(...,
tokenize=False) does (transformers/utils/chat_template_utils.py,
_compile_jinja_template and render_jinja_template):

  * jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols]) (transformers also adds its
    AssistantTracker extension for {% generation %}; it renders the block's body
    unchanged, and none of the templates here use it);
  * the tojson filter replaced by json.dumps(x, ensure_ascii=False, indent=indent,
    separators=separators, sort_keys=sort_keys);
  * globals raise_exception(msg) (raises jinja2 TemplateError) and
    strftime_now(fmt), here fixed to NOW so the output is reproducible;
  * render variables: messages, tools (None when not given), documents (None),
    add_generation_prompt, the tokenizer's special tokens (those that are set:
    bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token,
    additional_special_tokens) and the extra keyword arguments.

A model directory is read as transformers reads it: chat_template.jinja, when
present, wins over tokenizer_config.json's chat_template; a chat_template that
is a list of {name, template} picks "tool_use" when tools are given and the
list has one, else "default"; special_tokens_map.json overrides the special
tokens of tokenizer_config.json; a token given as an AddedToken object counts
as its "content".

Writes chattemplate/testdata/golden.json (real templates x conversations) and
chattemplate/testdata/semantics.json (small templates exercising the Jinja
semantics one feature at a time). Run from the repository root:

    /usr/bin/python3 scripts/chat_template_golden.py [--shared ../shared/data]
"""

import argparse
import datetime
import hashlib
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2024, 7, 6, 9, 5, 3)

SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
           "additional_special_tokens"]


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = environment()


def token_content(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def load_model(d):
    """(templates, special tokens, the template texts' sha256) of model directory d."""
    with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    special = {}
    for k in SPECIAL:
        if k in cfg:
            special[k] = cfg[k]
    stm = os.path.join(d, "special_tokens_map.json")
    if os.path.exists(stm):
        with open(stm, encoding="utf-8") as f:
            for k, v in json.load(f).items():
                special[k] = v
    tokens = {}
    for k, v in special.items():
        if k == "additional_special_tokens":
            if v:
                tokens[k] = [str(token_content(x)) for x in v]
            continue
        v = token_content(v)
        if v:
            tokens[k] = str(v)
    jf = os.path.join(d, "chat_template.jinja")
    if os.path.exists(jf):
        with open(jf, encoding="utf-8") as f:
            templates = {"default": f.read()}
    else:
        ct = cfg.get("chat_template")
        if isinstance(ct, list):
            templates = {t["name"]: t["template"] for t in ct}
        else:
            templates = {"default": ct}
    # sha256 over name NUL text NUL for each template, names sorted (chattemplate.Template.Digest).
    digest = hashlib.sha256("".join(n + "\0" + templates[n] + "\0" for n in sorted(templates)).encode()).hexdigest()
    return templates, tokens, digest


def render(templates, tokens, messages, add_generation_prompt, tools=None, extra=None):
    if tools is not None and "tool_use" in templates:
        src = templates["tool_use"]
    else:
        src = templates["default"]
    kw = dict(tokens)
    kw.update(extra or {})
    try:
        text = ENV.from_string(src).render(messages=messages, tools=tools, documents=None,
                                           add_generation_prompt=add_generation_prompt, **kw)
        return {"text": text}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception and the template engine's own errors (undefined values, ...).
        return {"error": str(e), "error_type": type(e).__name__}
    except Exception as e:  # noqa: BLE001  (TypeError etc. from Python operators)
        return {"error": str(e), "error_type": type(e).__name__}


def u(c):
    return {"role": "user", "content": c}


def a(c):
    return {"role": "assistant", "content": c}


def s(c):
    return {"role": "system", "content": c}


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the weather in a city, in °C <now> & \"later\"",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time.", "parameters": {"type": "object", "properties": {}}}},
]

TOOL_CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"unit": "celsius", "city": "Zürich"}}}]}
TOOL_CALL_STR = {"role": "assistant", "content": "Let me check.", "tool_calls": [
    {"type": "function", "function": {"name": "now", "arguments": "{}"}},
    {"name": "get_weather", "arguments": {"city": "東京", "unit": None, "days": 2, "ratio": 0.5, "flag": True}}]}


def conversations():
    """(name, messages, add_generation_prompt, tools, extra vars) for every template."""
    c = []
    c.append(("user", [u("Hello!")], False, None, None))
    c.append(("user_gen", [u("Hello!")], True, None, None))
    c.append(("system_user_gen", [s("You are terse."), u("What is 2+2?")], True, None, None))
    c.append(("system_user_assistant", [s("You are terse."), u("What is 2+2?"), a("4.")], False, None, None))
    c.append(("system_user_assistant_gen", [s("You are terse."), u("What is 2+2?"), a("4.")], True, None, None))
    c.append(("multi_turn", [u("Hi"), a("Hello! How can I help?"), u("Tell me a joke."), a("Why did the chicken cross the road?")], False, None, None))
    c.append(("multi_turn_gen", [u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")], True, None, None))
    c.append(("system_three_rounds", [s("Be kind."), u("a"), a("b"), u("c"), a("d"), u("e"), a("f")], False, None, None))
    c.append(("empty_user", [u("")], True, None, None))
    c.append(("empty_assistant", [u("Say nothing."), a("")], False, None, None))
    c.append(("unicode", [s("Réponds en français 🇫🇷."), u("你好，世界！ مرحبا 🙂 naïve café\u00a0—\u2028end"), a("Bonjour ! 😀")], True, None, None))
    c.append(("jinja_and_markup_in_content", [u("{{ bos_token }} {% if x %} <b>&amp;</b> \"q\" 'a' \\n \\ {#c#}"), a("{'k': [1, 2]} </s> <|im_end|>")], False, None, None))
    c.append(("whitespace_content", [s("  \n sys \n"), u("\n\n  padded  \n"), a("  answer\n\n")], True, None, None))
    c.append(("two_users", [u("one"), u("two")], True, None, None))
    c.append(("assistant_first", [a("I start."), u("ok")], True, None, None))
    c.append(("system_only_gen", [s("Only a system message.")], True, None, None))
    c.append(("no_messages", [], True, None, None))
    c.append(("system_mid_conversation", [u("a"), a("b"), s("new rules"), u("c")], True, None, None))
    c.append(("unknown_role", [u("a"), {"role": "narrator", "content": "Meanwhile..."}], False, None, None))
    c.append(("think_history", [u("2+2?"), a("<think>\nAdd them.\n</think>\n\n4"), u("3+3?"), a("<think>\nAgain.\n</think>\n\n6")], False, None, None))
    c.append(("think_last_gen_no_thinking", [u("2+2?"), a("<think>\nAdd them.\n</think>\n\n4"), u("and 3+3?")], True, None, {"enable_thinking": False}))
    c.append(("tools_call_and_result", [s("Use tools."), u("Weather in Zürich?"), TOOL_CALL,
                                        {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "sunny"}], True, TOOLS, None))
    c.append(("tools_no_system", [u("What time is it?"), TOOL_CALL_STR, {"role": "tool", "content": "12:00"}, a("Noon.")], False, TOOLS, None))
    c.append(("tool_message_without_tools", [u("q"), {"role": "tool", "content": "<tool_response>x</tool_response>"}], True, None, None))
    return c


REAL = [
    # (name, where, directory)
    ("tinyllama", "shared", "tinyllama-tokenizer"),
    ("qwen2.5", "shared", "qwen2.5-tokenizer"),
    ("qwen3", "shared", "qwen3-tokenizer"),
    ("smollm2-instruct", "testdata", "smollm2-instruct"),
    ("mistral-instruct-v0.1", "testdata", "mistral-instruct-v0.1"),
    ("mistral-instruct-v0.2", "testdata", "mistral-instruct-v0.2"),
    ("llama3-style", "testdata", "llama3-style"),
    ("named-templates", "testdata", "named-templates"),
]

# Small templates, one Jinja feature at a time: (template, variables).
SEMANTICS = [
    # whitespace control with trim_blocks / lstrip_blocks
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc\n", {}),
    ("a\n  {%+ if true %}\n  b\n  {% endif +%}\nc", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("x {{- ' y ' -}} z\n{{ 'w' }}\n", {}),
    ("{# comment #}\nline\n  {#- c2 -#}  \nend", {}),
    ("  {# c #}\nA\n\t{% for i in [1,2] %}\n\t{{ i }}\n\t{% endfor %}\n", {}),
    ("a\r\nb\rc\n{% if true %}\r\nd{% endif %}\n\n", {}),
    ("{% raw %}{{ not rendered }}{% endraw %}\n  {%- raw -%}  x  {% endraw %}", {}),
    ("{{ '{{' }}{{ {'a': {'b': 1}}['a']['b'] }}}}", {}),
    # literals and output of Python values
    ("{{ [1, 'a', none, true, false, 1.5, {'k': 'v'}, (1,), (1, 2)] }}|{{ none }}|{{ None }}|{{ True }}", {}),
    ("{{ 1e20 }} {{ 1e-5 }} {{ 10/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7%3 }} {{ 7%-3 }} {{ 2**10 }} {{ 2**-1 }} {{ 3.0 }} {{ 1.0e16 }} {{ 123456789.123 }} {{ 0.1+0.2 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}", {}),
    ("{{ 'it''s' }} {{ \"a\" 'b' }} {{ 'tab\\there\\nnl \\u00e9 \\x41 \\\\ \\' \\\" \\q' }}", {}),
    ("{{ ['é\\n\\'', \"a'b\\\"\", 'a\"b', '\\x01\\x7f\\u200b', 'emoji 🙂'] }}", {}),
    ("{{ {'b': 1, 'a': [1, {'z': none}]} }} {{ {1: 'x', 2.5: 'y', true: 'z', none: 'n'} }}", {}),
    ("{{ x }} {{ d }} {{ l }}", {"x": {"nested": [1, "two", None]}, "d": {"k": True}, "l": []}),
    # arithmetic and comparisons
    ("{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ -3 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' ~ 1 ~ none ~ true }} {{ [1] + [2] }}", {}),
    ("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ 'a' != 'a' }}", {}),
    ("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ not 'x' in 'x' }}", {}),
    ("{{ 1 and 'x' }} {{ 0 or '' or 'z' }} {{ [] or none }} {{ not [] }} {{ 'a' if false }} {{ 'a' if 0 else 'b' if 1 else 'c' }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ u + 'a' }}", {}),
    ("{{ 'a' < 1 }}", {}),
    # undefined values
    ("[{{ u }}] {{ u is defined }} {{ u is undefined }} {{ u | length }} {{ u is none }} {% for x in u %}X{% endfor %} {{ u == none }} {{ u ~ 'x' }} {{ d.missing }} {{ d['missing'] is defined }} {{ l[5] is defined }}", {"d": {"a": 1}, "l": [1]}),
    ("{{ u.attr }}", {}),
    ("{{ d.missing.deeper }}", {"d": {}}),
    ("{{ l[3]['role'] }}", {"l": []}),
    ("{% if u %}yes{% else %}no{% endif %} {{ u | default('dflt') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | default('n') }}", {}),
    # attribute and item access
    ("{{ d.items is callable }}|{{ d['items'] }}|{{ d.get('items') }}|{{ d.get('nope', 7) }}|{{ d.get('nope') }}", {"d": {"items": 1}}),
    ("{{ m.role }} {{ m['role'] }} {{ l[0] }} {{ l[-1] }} {{ l.0 }} {{ 'abc'[1] }} {{ 'abc'[-1] }}", {"m": {"role": "user"}, "l": [10, 20, 30]}),
    ("{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[1::2] }} {{ l[-2:] }} {{ l[5:] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ l[3:0:-1] }}", {"l": [1, 2, 3, 4, 5]}),
    ("{{ d.update({}) }}", {"d": {}}),
    ("{{ l.append(1) }}", {"l": []}),
    ("[{{ d.update }}]", {"d": {}}),
    # for loops
    ("{% for i in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {"l": ["a", "b", "c"]}),
    ("{% for i in l %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('x', 'y') }};{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for i in l if i is odd %}{{ i }}{{ loop.index }}{{ loop.last }} {% else %}empty{% endfor %}|{% for i in [] %}x{% else %}none{% endfor %}", {"l": [1, 2, 3, 4, 5]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'ab' %}[{{ c }}]{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", {}),
    ("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }}", {}),
    # scoping
    ("{% for i in [1, 2, 3] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% if true %}{% set x = 5 %}{% endif %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}", {}),
    ("{% set messages = messages[1:] %}{{ messages | length }}", {"messages": [1, 2, 3]}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 'x') %}{{ t }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("{% with x = 3 %}{{ x }}{% endwith %}[{{ x }}]", {}),
    # macros
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(name='Cy', punct='.') }}", {}),
    ("{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", {}),
    ("{% set g = 'outer' %}{% macro show() %}{{ g }}{% endmacro %}{{ show() }}", {}),
    # filters
    ("{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'hello world' | title }}|{{ 'Hello' | upper }}{{ 'Hello' | lower }}|{{ 'hello' | capitalize }}", {}),
    ("{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'a'] | sort }} {{ [3, 1, 2] | reverse | list }} {{ 'abc' | reverse }} {{ [1, 2, 2, 1] | unique | list }}", {}),
    ("{{ l | join(', ') }} {{ l | join }} {{ l | length }} {{ l | count }} {{ l | first }} {{ l | last }} {{ l | sum }} {{ l | min }} {{ l | max }}", {"l": [3, 1, 2]}),
    ("{{ ms | map(attribute='role') | list }} {{ ms | selectattr('role', 'equalto', 'user') | list | length }} {{ ms | rejectattr('role', 'eq', 'user') | map(attribute='content') | join }} {{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3] | reject('equalto', 2) | list }} {{ ms | selectattr('extra') | list }}", {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "extra": 1}]}),
    ("{{ ['a', 'b'] | map('upper') | list }} {{ [1, 2] | map('string') | join('-') }} {{ d | items | list }} {{ d | dictsort }} {{ d | list }}", {"d": {"b": 1, "a": 2}}),
    ("{{ 'x' | string }} {{ 1 | string }} {{ '42' | int }} {{ '4.5' | float }} {{ 4.7 | int }} {{ 'z' | int }} {{ -3 | abs }} {{ 2.567 | round(1) }} {{ 2.5 | round }} {{ 3 | round }} {{ 7 | float }}", {}),
    ("{{ 'a-b-a' | replace('a', 'x') }} {{ 'a b  c' | wordcount }} {{ 'l1\\nl2' | indent(2) }} {{ 'l1\\nl2' | indent(2, true) }} {{ '<&>\"' | e }} {{ '<b>' | safe }}", {}),
    ("{{ x | tojson }}", {"x": {"b": [1, 2.5, None, True, "é<>&'\"\n\t\u2028\x01"], "a": {}, "c": [], "d": 1e100}}),
    ("{{ x | tojson(indent=2) }}", {"x": {"b": [1, {"c": []}], "a": {}, "e": {"f": "g"}}}),
    ("{{ x | tojson(indent=4) }}|{{ [] | tojson(indent=2) }}|{{ 'str' | tojson }}|{{ none | tojson }}|{{ 3 | tojson }}|{{ (1, 2) | tojson }}", {"x": [1, "two"]}),
    ("{{ x | tojson(separators=(',', ':')) }} {{ x | tojson(sort_keys=true) }} {{ x | tojson(ensure_ascii=true) }}", {"x": {"z": "é🙂", "a": 1}}),
    ("{{ u | tojson }}", {}),
    ("{{ x | nosuchfilter }}", {}),
    # tests
    ("{{ 'a' is string }}{{ 1 is string }}{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ 'x' is sequence }}", {}),
    ("{{ none is none }}{{ 0 is none }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ true is boolean }}{{ 1 is boolean }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby(3) }}{{ 2 is eq(2) }}{{ 2 is ne(2) }}{{ 3 is gt(2) }}{{ 3 is lt 2 }}{{ 'a' is in 'abc' }}{{ 'A' is upper }}{{ 'a' is lower }}{{ range is callable }}{{ x is not none }}", {"x": 1}),
    # Python string, dict and list methods
    ("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'a,b,,c'.split(',') }} {{ '  a b  '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a</think>b</think>c'.split('</think>')[-1] }}", {}),
    ("[{{ '\\n x \\n'.strip() }}][{{ '\\nx\\n'.lstrip('\\n') }}][{{ 'xyyx'.rstrip('x') }}][{{ 'ab'.upper() }}][{{ 'AB'.lower() }}][{{ 'hello there'.title() }}][{{ 'hello'.capitalize() }}][{{ 'aaa'.replace('a', 'b', 2) }}][{{ 'abc'.find('c') }}][{{ 'abca'.count('a') }}][{{ '-'.join(['a', 'b']) }}][{{ '12'.isdigit() }}][{{ 'l1\\nl2'.splitlines() }}]", {}),
    ("{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }}", {"d": {"k": 1, "j": 2}}),
    ("{{ '{} and {}'.format('a', 'b') }}", {}),
    # idioms of real templates (Mistral v0.3, Llama-3.1, Gemma, Hermes)
    ("{%- set user_messages = ms | selectattr('role', 'equalto', 'user') | list %}{%- set filtered = [] %}{%- for m in ms %}{%- if m['role'] not in ['tool', 'tool_results'] and not m.get('tool_calls') %}{%- set filtered = filtered + [m] %}{%- endif %}{%- endfor %}{{ filtered | length }} {{ ms[2] == user_messages[-1] }} {{ 'tool_calls' in ms[1] }} {{ ms[1].get('tool_calls') | length }}", {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "abcdefghi"}]}, {"role": "user", "content": "b"}]}),
    ("{%- for key, val in tool.items() if key != 'return' %}{{ key }}={{ val | tojson }};{% endfor %}|{{ (tool | dictsort | first)[0] }}|{{ tool.parameters.properties | list | join(',') }}", {"tool": {"name": "f", "return": {"type": "int"}, "parameters": {"properties": {"b": {}, "a": {}}}, "description": None}}),
    ("{{ '\\n' if not loop_last }}{{ 'x' if none is none else 'y' }}{{ (messages | last).content | trim }}{{ messages[-1]['content'][:3] }}{{ messages | map(attribute='content') | select | list }}", {"loop_last": False, "messages": [{"content": ""}, {"content": "  hello  "}]}),
    ("{%- if messages[0]['content'] is string -%}{{ messages[0]['content'] }}{%- else -%}{%- for part in messages[0]['content'] -%}{%- if part['type'] == 'text' -%}[{{ part['text'] | trim }}]{%- elif part.type == 'image' -%}<img>{%- endif -%}{%- endfor -%}{%- endif -%}", {"messages": [{"content": [{"type": "text", "text": " hi "}, {"type": "image"}, {"type": "text", "text": "there"}]}]}),
    ("{% for m in ms %}{{ loop.index0 }}{% if not loop.last %}, {% endif %}{% endfor %}\n{{ ms | length > 1 and ms[0].role == 'system' }} {{ (ms | length) // 2 }} {{ ms | length is divisibleby 2 }}", {"ms": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),
    # globals
    ("{{ raise_exception('stop: ' ~ 42) }}", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M:%S|%d %b %Y|%B %A %a %j %y %I%p %%') }}", {}),
    ("{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
    # errors at parse time
    ("{% if true %}never closed", {}),
    ("{% endfor %}", {}),
    ("{{ 1 + }}", {}),
    ("{% unknowntag %}", {}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="../shared/data", help="the shared data directory")
    ap.add_argument("--out", default="chattemplate/testdata")
    args = ap.parse_args()

    templates = []
    cases = []
    for name, where, d in REAL:
        path = os.path.join(args.shared if where == "shared" else os.path.join(args.out, "models"), d)
        tmpls, tokens, digest = load_model(path)
        templates.append({"name": name, "where": where, "dir": d, "sha256": digest, "special_tokens": tokens})
        for cname, messages, gen, tools, extra in conversations():
            out = {"template": name, "name": cname, "messages": messages, "add_generation_prompt": gen}
            if tools is not None:
                out["tools"] = tools
            if extra:
                out["vars"] = extra
            out.update(render(tmpls, tokens, messages, gen, tools, extra))
            cases.append(out)
    meta = {"generator": "scripts/chat_template_golden.py", "jinja2": jinja2.__version__, "now": NOW.isoformat()}
    with open(os.path.join(args.out, "golden.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "templates": templates, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")

    sem = []
    for src, variables in SEMANTICS:
        out = {"template": src, "vars": variables}
        try:
            out["text"] = ENV.from_string(src).render(**variables)
        except jinja2.exceptions.TemplateSyntaxError as e:
            out["error"], out["error_type"] = str(e), "TemplateSyntaxError"
        except Exception as e:  # noqa: BLE001
            out["error"], out["error_type"] = str(e), type(e).__name__
        sem.append(out)
    with open(os.path.join(args.out, "semantics.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "cases": sem}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"golden.json: {len(templates)} templates, {len(cases)} cases ({n_err} errors); semantics.json: {len(sem)} cases")


if __name__ == "__main__":
    main()
