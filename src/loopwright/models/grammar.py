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
model's vocabulary, which is the backend's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

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

    def __init__(self, rules: _Rules, step: int | None = None) -> None:
        self.rules = rules
        self.step = step
        self.string = "json-string"
        self.ref: str | None = None
        if step is not None:
            self.string, self.ref = _plan_strings(rules, step)

    def value(self, schema: Any, name: str) -> str:
        """The rule for one JSON value matching `schema`; generic JSON where not modelled.
        In a plan, a whole-value `"#E<n>"` reference is accepted in place of any value."""
        rule = self._typed(schema, name)
        if self.ref is None or rule == self.string:
            return rule
        return self.rules.add(f"{name}-or-ref", f"{rule} | {self.ref}")

    def _typed(self, schema: Any, name: str) -> str:
        if not isinstance(schema, Mapping):
            return self._generic()
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.rules.add(name, " | ".join(_json_literal(v) for v in schema["enum"]))
        if "const" in schema:
            return self.rules.add(name, _json_literal(schema["const"]))
        kind = schema.get("type")
        if kind == "string":
            return self.string
        if kind in ("integer", "number", "boolean", "null"):
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
        optional = [k for k in keys if k not in required_set]

        def pair(key: str) -> str:
            value = self.value(props[key], f"{name}-p{keys.index(key)}")
            return f"{_json_literal(key)} {gbnf_literal(': ')} {value}"

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


def react_grammar(
    tools: Sequence[Mapping[str, Any]], dialect: str = "json", *, with_thought_label: bool = False
) -> str:
    """The GBNF grammar of one ReAct step in `dialect` ("json" or "brackets").

    The step starts right after the prompt's trailing `Thought:` label; with
    `with_thought_label` (a prompt that does not end in one) the grammar writes it.
    json: ` thought\\nAction: name\\nAction Input: {args}` or ` thought\\nFinal Answer: text`.
    brackets: ` thought\\nAction <k>: name[text or {args}]` or `... finish[answer]`.
    A thought holds no colon, so nothing in it can read as a new `Action:` or
    `Observation:` line.
    """
    named = _named(tools)
    rules = _Rules()
    values = _Values(rules)
    if dialect == "json":
        label = '"Thought: " ' if with_thought_label else ""
        rules.add("root", f'{label}thought "\\n" (action | final)')
        alts = []
        for i, tool in enumerate(named):
            args = _args_rule(values, tool, f"tool{i}-args")
            head = gbnf_literal(f"{tool['name']}\nAction Input: ")
            alts.append(rules.add(f"tool{i}", f'{head} {args} "\\n"?'))
        rules.add("action", '"Action: " (' + " | ".join(alts) + ")")
        rules.add("final", '"Final Answer: " answer "\\n"?')
        rules.add("answer", f"[^\\n]{{1,{ANSWER_MAX_CHARS}}}")
    elif dialect == "brackets":
        label = '"Thought " [0-9]{1,2} ": " ' if with_thought_label else ""
        rules.add("root", f'{label}thought "\\n" "Action " [0-9]{{1,2}} ": " (call | final)')
        alts = []
        for i, tool in enumerate(named):
            if _single_text_param(tool):
                arg = "bracket-text"
            else:
                arg = _args_rule(values, tool, f"tool{i}-args")
            alts.append(rules.add(f"tool{i}", f'{gbnf_literal(str(tool["name"]))} "[" {arg} "]"'))
        rules.add("call", " | ".join(alts))
        rules.add("final", '"finish[" bracket-answer "]" "\\n"?')
        rules.add("bracket-text", f"[^\\[\\]\\n]{{1,{STRING_MAX_CHARS}}}")
        rules.add("bracket-answer", f"[^\\[\\]\\n]{{1,{ANSWER_MAX_CHARS}}}")
    else:
        raise ValueError(f"unknown ReAct dialect {dialect!r}; accepted: 'json', 'brackets'")
    # Any first character, a space included, so "Thought:" + " text" reads naturally.
    rules.add("thought", f"[^\\n:]{{1,{THOUGHT_MAX_CHARS}}}")
    return rules.text()


def plan_grammar(tools: Sequence[Mapping[str, Any]], *, max_steps: int = PLAN_MAX_STEPS) -> str:
    """The GBNF grammar of a plan: `{"plan": [step, ...]}` with 1..max_steps steps, step k
    being `{"id": "Ek", "tool": <known tool>, "args": <that tool's arguments>}`, where a
    string may use `#E<n>` for an earlier step n < k (whole or embedded), and any other
    value may be a whole `"#E<n>"` reference."""
    named = _named(tools)
    if not 1 <= max_steps <= 9:
        raise ValueError(f"max_steps must be between 1 and 9, got {max_steps}")
    rules = _Rules()
    rules.add("root", '" "? "{\\"plan\\": [" step1 "]}" "\\n"?')
    for k in range(1, max_steps + 1):
        values = _Values(rules, k)
        calls = []
        for i, tool in enumerate(named):
            args = _args_rule(values, tool, f"p{k}-tool{i}-args")
            head = gbnf_literal(f'{json.dumps(str(tool["name"]), ensure_ascii=False)}, "args": ')
            calls.append(f"({head} {args})")
        more = f' (", " step{k + 1})?' if k < max_steps else ""
        head = gbnf_literal(f'{{"id": "E{k}", "tool": ')
        rules.add(f"step{k}", f'{head} ({" | ".join(calls)}) "}}"{more}')
    return rules.text()


def answer_grammar() -> str:
    """The GBNF grammar of a one-line answer (a solver's reply): at most
    ANSWER_MAX_CHARS characters, then the end."""
    return f'root ::= " "? [^\\n]{{1,{ANSWER_MAX_CHARS}}} "\\n"?\n'
