"""GBNF grammars generated from tool schemas, so a small local model cannot emit an
unparseable step.

A ReAct step is always a thought, then either an action naming a registered tool with
arguments that match that tool's JSON Schema, or a final answer. A ReWOO / plan-execute
plan is always `{"plan": [{"id": "E1", "tool": <known tool>, "args": {...}}, ...]}` with
ids in order and `#E` references only to earlier steps. Schemas this module does not
model (anyOf, $ref, patterns, ...) fall back to a generic JSON value, so a grammar always
exists.

JSON is generated in exactly the layout `json.dumps` writes (`{"a": 1, "b": 2}`): the
loop re-renders an accepted action that way when it appends it to the scratchpad, so
the next prompt shares the model's own tokens and the KV cache keeps them.

The grammars are text (GBNF, llama.cpp's grammar language); compiling them needs the
model's vocabulary, which is the backend's job. `grammar_for` picks the one for a
request: the embedded LlamaCpp uses it, and OpenAICompatible sends the same text to
servers that take a grammar.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from loopwright.models import grounding, holding
from loopwright.policy import ModelRequest

THOUGHT_MAX_CHARS: Final = 160
"""Upper bound on a thought: a small model that never ends its thought would otherwise
run to max_tokens and leave an incomplete step."""
ANSWER_MAX_CHARS: Final = 120
STRING_MAX_CHARS: Final = 80
PLAN_MAX_STEPS: Final = 8
"""Plans have at most this many steps (ids E1..E8, so every reference is one digit)."""

_PRIMITIVES: Final = r"""
json-char ::= [^"\\\x00-\x1f] | json-escape
json-escape ::= "\\" (["\\/bnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
json-string ::= "\"" json-char{0,SMAX} "\""
json-integer ::= "-"? ([0-9] | [1-9] [0-9]{1,15})
json-number ::= json-integer ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" (json-string ": " json-value (", " json-string ": " json-value)*)? "}"
json-array ::= "[" (json-value (", " json-value)*)? "]"
""".replace("SMAX", str(STRING_MAX_CHARS))


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _json_literal(value: Any) -> str:
    """A JSON value as a GBNF literal, written as json.dumps writes it; text that UTF-8
    cannot carry (lone surrogates) is written as JSON escapes, which decode back to it."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True)
    return gbnf_literal(text)


class _Rules:
    """An ordered set of named GBNF rules, followed by the shared JSON primitives."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        self._rules[name] = body
        return name

    def text(self) -> str:
        lines = [f"{name} ::= {body}" for name, body in self._rules.items()]
        return "\n".join(lines) + "\n" + _PRIMITIVES.lstrip("\n")


class _Values:
    """Builds value rules for one context: a ReAct action (plain JSON), or step k of a
    plan, where strings may reference E1..E(k-1) and nothing else."""

    def __init__(self, rules: _Rules, step: int | None = None, grounded: frozenset[str] | None = None,
                 numbers: frozenset[str] | None = None, one_thing: bool = False) -> None:
        self.rules = rules
        self.step = step
        self.string = "json-string"
        self.ref: str | None = None
        self.grounded = grounded
        self.numbers = numbers if numbers is not None else grounded
        self.held_numbers = numbers is not None
        self.one_thing = one_thing
        if step is not None:
            self.string, self.ref = _plan_strings(rules, step)

    def value(self, schema: Any, name: str, required: bool = False) -> str:
        """The rule for one JSON value matching `schema`; generic JSON where not modelled.
        In a plan, a whole-value `"#E<n>"` reference is accepted in place of any value.
        A required string is non-empty unless the schema allows "" (minLength 0, a ""
        default)."""
        try:
            rule = self._typed(schema, name, required)
        except grounding.Unseen:
            if self.ref is None:
                raise
            return self.ref  # no number seen: only an earlier step's result
        if self.ref is None or rule == self.string:
            return rule
        return self.rules.add(f"{name}-or-ref", f"{rule} | {self.ref}")

    def _string(self, schema: Mapping[str, Any], required: bool) -> str:
        low, high = string_bounds(schema, required)
        comma = "," if self.one_thing and self.step is None else ""
        if self.grounded is not None and self.step is None and "maxLength" not in schema and low <= 1:
            return grounding.grounded_string(self.rules, gbnf_literal, STRING_MAX_CHARS, self.grounded, low == 1,
                                             comma)
        if comma and "enum" not in schema and "const" not in schema:
            self.rules.add("one-char", r'[^"\\,\x00-\x1f] | json-escape')
            return self.rules.add(f"one-string-{low}-{high}", f'"\\"" one-char{{{low},{high}}} "\\""')
        if self.step is not None:  # a plan's strings: only whether one may be empty
            if low == 0:
                return self.string
            k = self.step
            ids = f"[1-{k - 1}]"
            if k == 1:
                body = f'"\\"" plain-char{{1,{STRING_MAX_CHARS}}} "\\""'
            else:
                body = f'"\\"" (p{k}-seg{{1,{STRING_MAX_CHARS}}} ("#E" {ids})? | "#E" {ids}) "\\""'
            return self.rules.add(f"p{k}-string-nonempty", body)
        if (low, high) == (0, STRING_MAX_CHARS):
            return "json-string"
        return self.rules.add(f"json-string-{low}-{high}", f'"\\"" json-char{{{low},{high}}} "\\""')

    def _number(self, schema: Mapping[str, Any], kind: str, name: str) -> str:
        """Numbers within the schema's bounds where GBNF can say so: a small integer range
        as its values, a bound at zero as the sign, a non-negative maximum as the most
        digits; other bounds are left to validation."""
        low, high = number_bounds(schema, kind == "integer")
        if kind == "integer" and low is not None and high is not None and 0 <= high - low <= 64:
            return self.rules.add(name, " | ".join(f'"{v}"' for v in range(int(low), int(high) + 1)))
        if self.numbers is not None:
            return grounding.grounded_number(self.rules, gbnf_literal, self.numbers, kind, name, low, high)
        digits = "([0-9] | [1-9] [0-9]{1,15})"
        if high is not None and high >= 0 and kind == "integer" and (low is not None and low >= 0):
            width = len(str(int(high)))
            digits = "[0-9]" if width == 1 else f"([0-9] | [1-9] [0-9]{{1,{width - 1}}})"
        sign = '"-"?'
        if low is not None and low >= 0:
            sign = ""
        elif high is not None and (high < 0 or (high == 0 and _exclusive_zero(schema))):
            sign = '"-"'
        if sign == '"-"?' and digits.startswith("(["):
            if kind == "integer":
                return "json-integer"
            return "json-number"
        body = f"{sign} {digits}".strip()
        if kind == "number":
            body += ' ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?'
        return self.rules.add(f"{name}-n", body)

    def _typed(self, schema: Any, name: str, required: bool = False) -> str:
        if not isinstance(schema, Mapping):
            return self._generic()
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rules.add(name, " | ".join(_json_literal(v) for v in schema["enum"]))
        if "const" in schema:
            return self.rules.add(name, _json_literal(schema["const"]))
        kind = schema.get("type")
        if kind == "string":
            return self._string(schema, required)
        if kind in ("integer", "number"):
            return self._number(schema, kind, name)
        if kind in ("boolean", "null"):
            return f"json-{kind}"
        if kind == "array":
            item = self.value(schema.get("items"), f"{name}-item")
            return self.rules.add(name, f'"[" ({item} (", " {item})*)? "]"')
        if kind == "object" and isinstance(schema.get("properties"), Mapping):
            return self.rules.add(name, self.object_body(schema, name))
        return self._generic()

    def _generic(self) -> str:
        # In a plan, generic JSON could smuggle a forward reference inside a string;
        # there it is limited to the step's own strings and scalars.
        if self.step is None:
            return "json-value"
        return self.rules.add(
            f"p{self.step}-scalar",
            f"{self.string} | json-number | json-boolean | json-null",
        )

    def object_body(self, schema: Mapping[str, Any], name: str) -> str:
        """`{...}` with the required properties in schema order, then each optional one
        optionally, in schema order. Keys the schema does not name are never generated
        (validation would reject them)."""
        props: Mapping[str, Any] = schema.get("properties") or {}
        required_set = set(schema.get("required") or ())
        keys = list(props)
        required = [k for k in keys if k in required_set]

        def pair(key: str) -> str:
            value = self.value(props[key], f"{name}-p{keys.index(key)}", key in required_set)
            return f"{_json_literal(key)} {gbnf_literal(': ')} {value}"

        optional = [k for k in keys if k not in required_set and grounding.writable(pair, k)]

        if required:
            parts = [pair(required[0])]
            parts += [f'", " {pair(k)}' for k in required[1:]]
            parts += [f'(", " {pair(k)})?' for k in optional]
            inner = " ".join(parts)
        elif optional:
            # No required key: nothing, or any non-empty subset in schema order.
            alts = []
            for i, key in enumerate(optional):
                tail = " ".join(f'(", " {pair(k)})?' for k in optional[i + 1 :])
                alts.append(f"{pair(key)} {tail}".strip())
            inner = "(" + " | ".join(f"({a})" for a in alts) + ")?"
        else:
            return '"{}"'
        return f'"{{" {inner} "}}"'


def _exclusive_zero(schema: Mapping[str, Any]) -> bool:
    value = schema.get("exclusiveMaximum")
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value <= 0


def string_bounds(schema: Mapping[str, Any], required: bool) -> tuple[int, int]:
    """The least and most characters a string value gets in a grammar."""
    allows_empty = schema.get("minLength") == 0 or schema.get("default") == ""
    low = schema.get("minLength")
    low = low if isinstance(low, int) and not isinstance(low, bool) else (1 if required and not allows_empty else 0)
    high = schema.get("maxLength")
    high = high if isinstance(high, int) and not isinstance(high, bool) else STRING_MAX_CHARS
    high = max(1, min(high, STRING_MAX_CHARS))
    return min(low, high), high


def number_bounds(schema: Mapping[str, Any], integer: bool) -> tuple[float | None, float | None]:
    """A number schema's inclusive bounds (exclusive ones moved inward for integers)."""

    def num(key: str) -> float | None:
        value = schema.get(key)
        return None if isinstance(value, bool) or not isinstance(value, (int, float)) else value

    low, high = num("minimum"), num("maximum")
    exclusive_low, exclusive_high = num("exclusiveMinimum"), num("exclusiveMaximum")
    if exclusive_low is not None:
        bound = math.floor(exclusive_low) + 1 if integer else exclusive_low
        low = bound if low is None else max(low, bound)
    if exclusive_high is not None:
        bound = math.ceil(exclusive_high) - 1 if integer else exclusive_high
        high = bound if high is None else min(high, bound)
    if integer:
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
    return low, high


def _plan_strings(rules: _Rules, step: int) -> tuple[str, str | None]:
    """The string rule of plan step `step`, and its whole-value reference rule (None for
    the first step). A `#` in a string may start only `#E<n>` with n < step, and is
    never followed by a further digit (`#E12` would name E12)."""
    plain = "plain-char"
    rules.add(plain, r'[^"\\#\x00-\x1f] | "\\" (["\\/bnrt]) | "#" [^E#"\\\x00-\x1f]')
    if step == 1:
        return rules.add("p1-string", f'"\\"" {plain}{{0,{STRING_MAX_CHARS}}} "\\""'), None
    ids = f"[1-{step - 1}]"
    rules.add("nondigit-char", r'[^"\\#0-9\x00-\x1f] | "\\" (["\\/bnrt])')
    seg = rules.add(f"p{step}-seg", f'{plain} | "#E" {ids} nondigit-char')
    string = rules.add(
        f"p{step}-string", f'"\\"" {seg}{{0,{STRING_MAX_CHARS}}} ("#E" {ids})? "\\""'
    )
    ref = rules.add(f"p{step}-ref", f'"\\"#E" {ids} "\\""')
    return string, ref


def _args_rule(values: _Values, tool: Mapping[str, Any], name: str) -> str:
    """The arguments object of one tool: its schema where modelled, else any object."""
    params = tool.get("parameters")
    if (
        isinstance(params, Mapping)
        and params.get("type", "object") == "object"
        and isinstance(params.get("properties", {}), Mapping)
    ):
        return values.rules.add(name, values.object_body({"properties": {}, **params}, name))
    if values.step is None:
        return "json-object"
    scalar = values.value(None, f"{name}-any")
    return values.rules.add(
        name, f'"{{" (json-string ": " {scalar} (", " json-string ": " {scalar})*)? "}}"'
    )


def _args_avoiding(values: _Values, tool: Mapping[str, Any], name: str, known: Mapping[str, Any] | None) -> str | None:
    """The tool's arguments rule without the one call `known` (its result is already in
    the scratchpad): some required argument differs, written as "the same values up to
    key i, then a different value at key i". String, enum and boolean values can be
    excluded this way; a call that differs only in numbers or nested values, or in
    optional arguments when `known` has some, is left possible (validation and the
    repeat guard still see it). None when the known call is the only call, or needs unseen numbers."""
    try:
        rule = _args_rule(values, tool, name)
    except grounding.Unseen:
        return None
    params = tool.get("parameters")
    if known is None or not isinstance(params, Mapping) or not isinstance(params.get("properties"), Mapping):
        return rule
    props: Mapping[str, Any] = params["properties"]
    required_set = set(params.get("required") or ())
    keys = list(props)
    required = [k for k in keys if k in required_set]
    if set(known) - set(keys) or any(k not in known for k in required):
        return rule  # a call this grammar never generates anyway
    rules = values.rules

    def free(key: str) -> str:
        return values.value(props[key], f"{name}-p{keys.index(key)}", key in required_set)

    def pair(key: str, value: str) -> str:
        return f"{_json_literal(key)} {gbnf_literal(': ')} {value}"

    optional = [k for k in keys if k not in required_set and grounding.writable(free, k)]
    alternatives = []
    for i, key in enumerate(required):
        other = _value_avoiding(rules, props[key], known[key], f"{name}-x{i}")
        if other is None:
            continue
        parts = [pair(k, _json_literal(known[k])) for k in required[:i]]
        parts += [pair(key, other)] + [pair(k, free(k)) for k in required[i + 1 :]]
        tail = " ".join(f'(", " {pair(k, free(k))})?' for k in optional)
        alternatives.append(' ", " '.join(parts) + (f" {tail}" if tail else ""))
    if optional and not any(k in known for k in optional):
        same = [pair(k, _json_literal(known[k])) for k in required]
        for j, key in enumerate(optional):  # the same required values and some optional one
            rest = " ".join(f'(", " {pair(k, free(k))})?' for k in optional[j + 1 :])
            alternatives.append(" \", \" ".join([*same, pair(key, free(key))]) + (f" {rest}" if rest else ""))
    if not alternatives:
        if required or optional:
            return rule  # nothing here can be told apart at decode time
        return None
    return rules.add(f"{name}-new", '"{" (' + " | ".join(f"({a})" for a in alternatives) + ') "}"')


def _value_avoiding(rules: _Rules, schema: Any, known: Any, name: str) -> str | None:
    """A rule for a value of `schema` other than `known`, where one can be written."""
    if not isinstance(schema, Mapping):
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        others = [v for v in schema["enum"] if v != known or type(v) is not type(known)]
        return rules.add(name, " | ".join(_json_literal(v) for v in others)) if others else None
    kind = schema.get("type")
    if kind == "boolean" and isinstance(known, bool):
        return _json_literal(not known)
    if kind == "string" and isinstance(known, str):
        text = json.dumps(known, ensure_ascii=False)[1:-1]
        if "\\" in text:
            return None  # escapes have several spellings: not excluded
        low, high = string_bounds(schema, True)
        inner = _text_avoiding(rules, name, text, "json-char", '"\\\\\\x00-\\x1f', low, high, " | json-escape")
        return None if inner is None else rules.add(f"{name}-s", f'"\\"" {inner} "\\""')
    return None


def _text_avoiding(
    rules: _Rules, name: str, text: str, any_char: str, excluded: str, low: int, high: int, extra: str = ""
) -> str | None:
    """A rule for `low`..`high` characters (each matching `any_char`) that spell anything
    but `text`: the same first i characters, then a different one, or stopping early, or
    going on past the end. `excluded` is what `any_char` leaves out, as class content."""
    n = len(text)
    if n > high:
        return None
    nxt: str | None = None
    if n < high:
        nxt = rules.add(f"{name}-{n}", f"{any_char}{{1,{high - n}}}")
    for i in range(n - 1, -1, -1):
        ch = text[i]
        klass = "[^" + _class_char(ch) + excluded + "]" + extra
        left = high - i - 1
        diff = f"({klass})" + (f" {any_char}{{0,{left}}}" if left else "")
        body = diff if nxt is None else f"{diff} | {gbnf_literal(ch)} {nxt}"
        if i >= low:  # stopping here spells a shorter text
            body = f"({body})?"
        nxt = rules.add(f"{name}-{i}", body)
    return nxt


def _class_char(ch: str) -> str:
    """One character as GBNF character-class content."""
    if ch in "]\\^-[":
        return "\\" + ch
    return gbnf_literal(ch)[1:-1]


def _single_text_value(tool: Mapping[str, Any], known: Mapping[str, Any] | None) -> str | None:
    """The bare text a brackets call `name[text]` wrote for `known`, if that is its form."""
    if not known or len(known) != 1:
        return None
    value = next(iter(known.values()))
    if not isinstance(value, str) or set(value) & set("[]\n") or not value:
        return None
    return value


def _single_text_param(tool: Mapping[str, Any]) -> bool:
    """Whether the brackets dialect passes this tool's argument as plain text: one
    parameter (or one required one), of type string."""
    params = tool.get("parameters")
    if not isinstance(params, Mapping):
        return False
    props = params.get("properties")
    if not isinstance(props, Mapping) or not props:
        return False
    required = [k for k in props if k in set(params.get("required") or ())]
    if len(required) == 1:
        target = required[0]
    elif len(props) == 1:
        target = next(iter(props))
    else:
        return False
    schema = props[target]
    return isinstance(schema, Mapping) and schema.get("type") == "string"


def _named(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    named = [t for t in tools if isinstance(t, Mapping) and t.get("name")]
    if not named:
        raise ValueError("a grammar needs at least one tool with a name; got none")
    return named


def _numbers_of(args: Mapping[str, Any]) -> frozenset[str]:
    """The number values of a call's arguments, as JSON writes them (and as a sign-less
    integer: 2.0 also as 2)."""
    found = set()
    for value in args.values():
        if type(value) in (int, float):
            found.add(json.dumps(value))
            if float(value).is_integer():
                found.add(str(int(value)))
    return frozenset(found)


def _json_calls(values: _Values, named: Sequence[Mapping[str, Any]], avoid: Mapping[str, Mapping[str, Any]],
                hold: holding.Hold | None) -> list[str]:
    """The rules of a json-dialect step's possible calls, one per tool that can be
    called: not its known call, only the hold's tool, none of its not_tools."""
    alts = []
    only = hold.tool if hold is not None and any(t["name"] == hold.tool for t in named) else None
    for i, tool in enumerate(named):
        if (only is not None and tool["name"] != only) or (hold is not None and tool["name"] in hold.not_tools):
            continue
        known = avoid.get(str(tool["name"]))
        numbers = _numbers_of(known or {})
        if values.held_numbers and numbers and not (values.numbers or frozenset()) & numbers:
            known = None  # the held number is the call's own, not the known call's: nothing to pin
        args = _args_avoiding(values, tool, f"tool{i}-args", known)
        if args is None:
            continue  # its only possible call is the known one, or it needs an unseen number
        head = gbnf_literal(f"{tool['name']}\nAction Input: ")
        alts.append(values.rules.add(f"tool{i}", f'{head} {args} "\\n"?'))
    return alts


def react_grammar(
    tools: Sequence[Mapping[str, Any]],
    dialect: str = "json",
    *,
    with_thought_label: bool = False,
    avoid: Mapping[str, Mapping[str, Any]] | None = None,
    answer_schema: Mapping[str, Any] | None = None,
    grounded: frozenset[str] | None = None,
    hold: holding.Hold | None = None,
) -> str:
    """The GBNF grammar of one ReAct step in `dialect` ("json" or "brackets").

    The step starts right after the prompt's trailing `Thought:` label; with
    `with_thought_label` (a prompt that does not end in one) the grammar writes it.
    json: ` thought\\nAction: name\\nAction Input: {args}` or ` thought\\nFinal Answer: text`.
    brackets: ` thought\\nAction <k>: name[text or {args}]` or `... finish[answer]`.
    A thought holds no colon, so nothing in it can read as a new `Action:` or
    `Observation:` line. `avoid` maps a tool name to arguments whose result is already
    known: that exact call cannot be generated (see `_args_avoiding`). `answer_schema`
    (a typed run's output) holds a json-dialect final answer to one line of JSON in it.
    `grounded` (grounding.py): the numbers a call's JSON arguments may write, in number
    values and as the digit runs of strings; the thought and the answer are not held to
    them, nor a brackets call's bare text. `hold` (holding.py, json): the thought starts
    with its words, then the step calls a tool (the hold's tool when it names one, none of
    its not_tools; its number values the hold's number when it names one; its strings
    without a comma when it holds to one thing), or answers when the hold says so.
    """
    named = _named(tools)
    rules = _Rules()
    number = frozenset({hold.number}) if hold is not None and hold.number is not None else None
    values = _Values(rules, grounded=grounded, numbers=number, one_thing=hold is not None and hold.one_thing)
    avoid = avoid or {}
    if dialect == "json":
        label = '"Thought: " ' if with_thought_label else ""
        rules.add("root", "")  # first, as llama.cpp prints it; its body follows the tools
        alts = _json_calls(values, named, avoid, hold)
        step = "final" if not alts or (hold and not hold.act) else "action" if hold else "(action | final)"
        rules.add("root", f'{label}thought "\\n" {step}')
        if alts:
            rules.add("action", '"Action: " (' + " | ".join(alts) + ")")
        rules.add("final", '"Final Answer: " answer "\\n"?')
        if answer_schema is not None:
            rules.add("answer", values.value(answer_schema, "out", True))
        else:
            rules.add("answer", f"[^\\n]{{1,{ANSWER_MAX_CHARS}}}")
    elif dialect == "brackets":
        label = '"Thought " [0-9]{1,2} ": " ' if with_thought_label else ""
        rules.add("root", "")
        alts = []
        for i, tool in enumerate(named):
            known = avoid.get(str(tool["name"]))
            if _single_text_param(tool):
                arg: str | None = "bracket-text"
                text = _single_text_value(tool, known)
                if text is not None:
                    arg = _text_avoiding(rules, f"tool{i}-text", text, "[^\\[\\]\\n]", "\\[\\]\\n", 1, STRING_MAX_CHARS)
            else:
                arg = _args_avoiding(values, tool, f"tool{i}-args", known)
            if arg is not None:
                alts.append(rules.add(f"tool{i}", f'{gbnf_literal(str(tool["name"]))} "[" {arg} "]"'))
        step = "(call | final)" if alts else "final"
        rules.add("root", f'{label}thought "\\n" "Action " [0-9]{{1,2}} ": " {step}')
        if alts:
            rules.add("call", " | ".join(alts))
        rules.add("final", '"finish[" bracket-answer "]" "\\n"?')
        rules.add("bracket-text", f"[^\\[\\]\\n]{{1,{STRING_MAX_CHARS}}}")
        rules.add("bracket-answer", f"[^\\[\\]\\n]{{1,{ANSWER_MAX_CHARS}}}")
    else:
        raise ValueError(f"unknown ReAct dialect {dialect!r}; accepted: 'json', 'brackets'")
    # Any first character, a space included, so "Thought:" + " text" reads naturally.
    held = f"{gbnf_literal(hold.thought)} " if hold is not None and hold.thought and dialect == "json" else ""
    rules.add("thought", f"{held}[^\\n:]{{{0 if held else 1},{THOUGHT_MAX_CHARS}}}")
    return rules.text()


def plan_grammar(
    tools: Sequence[Mapping[str, Any]], *, max_steps: int = PLAN_MAX_STEPS, grounded: frozenset[str] | None = None
) -> str:
    """The GBNF grammar of a plan: `{"plan": [step, ...]}` with 1..max_steps steps, step k
    being `{"id": "Ek", "tool": <known tool>, "args": <that tool's arguments>}`, where a
    string may use `#E<n>` for an earlier step n < k (whole or embedded), and any other
    value may be a whole `"#E<n>"` reference. `grounded` (grounding.py): the numbers a
    number value may be, unless it is a reference (strings are not held to them)."""
    named = _named(tools)
    if not 1 <= max_steps <= 9:
        raise ValueError(f"max_steps must be between 1 and 9, got {max_steps}")
    rules = _Rules()
    rules.add("root", '" "? "{\\"plan\\": [" step1 "]}" "\\n"?')
    for k in range(1, max_steps + 1):
        values = _Values(rules, k, grounded)
        calls = []
        for i, tool in enumerate(named):
            try:
                args = _args_rule(values, tool, f"p{k}-tool{i}-args")
            except grounding.Unseen:
                continue  # step 1 has no result to pass on; a later step's is a reference
            head = gbnf_literal(f'{json.dumps(str(tool["name"]), ensure_ascii=False)}, "args": ')
            calls.append(f"({head} {args})")
        if not calls:  # every tool needs a number the question does not give
            return plan_grammar(tools, max_steps=max_steps)
        more = f' (", " step{k + 1})?' if k < max_steps else ""
        head = gbnf_literal(f'{{"id": "E{k}", "tool": ')
        rules.add(f"step{k}", f'{head} ({" | ".join(calls)}) "}}"{more}')
    return rules.text()


def answer_grammar(schema: Mapping[str, Any] | None = None) -> str:
    """The GBNF grammar of a one-line answer (a solver's reply): at most
    ANSWER_MAX_CHARS characters, then the end; with `schema`, one line of JSON in it."""
    if schema is None:
        return f'root ::= " "? [^\\n]{{1,{ANSWER_MAX_CHARS}}} "\\n"?\n'
    rules = _Rules()
    rules.add("root", "")
    rules.add("root", f'" "? {_Values(rules).value(schema, "out", True)} "\\n"?')
    return rules.text()


_THOUGHT_LABEL_AT_END: Final = re.compile(r"Thought(?: \d+)?:\s*$")
CONSTRAINED_MIN_TOKENS: Final = {"react": 512, "plan": 512, "replan": 512, "solve": 192}
"""The least max_tokens a grammar-constrained call gets, whatever was asked. The grammar
bounds every free-text field, so this only matters to a model that fills one with
repetition; cut short by max_tokens, its step would be unparseable, which is what the
grammar is there to prevent. Sized for the worst case of one token per character (this
model writes a run of digits a token each): a 160-character thought plus a 120-character
`finish[...]` is about 300 tokens."""


def grammar_for(request: ModelRequest, *, plan_max_steps: int = 4, exclude_known: bool = True,
                ground_numbers: bool = False, hold_answer: bool = False) -> str | None:
    """The GBNF text that constrains this request, or None when it is free text.

    ReAct steps in the text dialects get react_grammar and plans and replans get
    plan_grammar with at most `plan_max_steps` steps (both need the tools); a solver's
    reply is held to one line; summaries and native tool calling are unconstrained.
    With `exclude_known`, a ReAct step cannot repeat the request's `known_calls`; with
    `ground_numbers`, its call (a plan's number values) writes only numbers the run has
    seen (grounding.py); with `hold_answer`, it is held from answering (holding.py).
    """
    if request.purpose == "solve":
        return answer_grammar(request.output_schema)
    if not request.tools:
        return None
    grounded = grounding.prompt_numbers(request.prompt) if ground_numbers else None
    if request.purpose == "react" and request.dialect in ("json", "brackets"):
        labelled = _THOUGHT_LABEL_AT_END.search(request.prompt[-40:]) is not None
        avoid = dict(request.known_calls) if exclude_known else None
        answer = request.output_schema if request.dialect == "json" else None
        hold = holding.held_step(request.prompt, request.tools) if hold_answer else None
        return react_grammar(request.tools, request.dialect, with_thought_label=not labelled, avoid=avoid,
                             answer_schema=answer, grounded=grounded, hold=hold)
    if request.purpose in ("plan", "replan"):
        return plan_grammar(request.tools, max_steps=plan_max_steps, grounded=grounded)
    return None
