"""The parse boundary: untrusted model text in, strict structures out.

Liberal in what it reads (both ReAct dialects, code fences, case variations, trailing
text, raw newlines and HTML entities inside arguments), strict in what it returns: a
well-formed Action or FinalAnswer, a validated list of PlanSteps, or a ParseError whose
message tells the model what was wrong and the exact format expected. ReWOO plans and
`#E` substitution live in `plans`, native tool calls in `toolcalls`, the shared
decoder and records in `decoding`; their public names are also importable from here.

Decisions (beyond DESIGN.md):
- Tool names: 1-64 characters of letters, digits, `_`, `-`, `.`, starting with a letter
  or `_`. A digits-only name (`Action: 1889`, emitted by small models) is rejected.
- HTML entities: a complete entity (`&#39;`, `&quot;`, `&amp;`; the `;` is required) is
  decoded in argument string values and in bracket arguments, and in the raw JSON text
  when it does not parse otherwise (`{&quot;q&quot;: 1}`). Servers emit them where the
  model meant plain characters; a tool that needs a literal entity cannot get one through
  this boundary. Final answers are left as written.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, Literal

from loopwright.errors import ParseError, describe
from loopwright.parsing.decoding import (
    _DECODER,
    _FENCE_LINE,
    _SCAN_JSON,
    TOOL_NAME_PATTERN,
    Action,
    FinalAnswer,
    _Bad,
    _decode_json_at,
    _json_type,
    _unescape,
    _unescape_deep,
)
from loopwright.parsing.plans import (
    FORMAT_HELP_PLAN,
    REF_PATTERN,
    PlanStep,
    find_refs,
    parse_plan,
    substitute,
)
from loopwright.parsing.toolcalls import parse_tool_calls

__all__ = [
    "FORMAT_HELP_BRACKETS",
    "FORMAT_HELP_JSON",
    "FORMAT_HELP_PLAN",
    "REF_PATTERN",
    "TOOL_NAME_PATTERN",
    "Action",
    "FinalAnswer",
    "PlanStep",
    "find_refs",
    "parse_plan",
    "parse_react_step",
    "parse_tool_calls",
    "substitute",
]

FORMAT_HELP_JSON: Final = (
    "reply with 'Thought: ...' then either 'Action: <tool>' + "
    "'Action Input: {\"arg\": value}' or 'Final Answer: <answer>'"
)
FORMAT_HELP_BRACKETS: Final = (
    "reply with 'Thought: ...' then 'Action: <tool>[<argument>]', "
    "or 'Action: finish[<answer>]' to answer"
)

Dialect = Literal["json", "brackets"]


# --------------------------------------------------------------------------- ReAct

# The canonical JSON-dialect step; anything else takes the general path, which gives the
# same result for every text this matches (colons in the thought go the general way,
# since a mid-line anchor needs one).
# (A thought line holds no colon and no backtick: a fence line is the general path's. No
# `*` or `_` right after a colon either: `Thought:** x` is markdown the general path strips.)
_FAST_THOUGHT = (
    r"(?:Thought:(?![*_])(?P<t1>[^\n:`]*)|"
    r"(?![ \t]*[*_]{0,2}(?i:final|action|observation|question|example|thought))"
    r"(?P<t2>[^\n:`]*))\n"
)
_FAST_JSON = re.compile(
    r"\s*+" + _FAST_THOUGHT
    + r"[ \t]*Action:(?![*_])[ \t]*(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,63})[ \t]*\n"
    r"[ \t]*Action Input:[ \t]*(?P<args>\{[^\n]*\})\s*"
)
# The canonical one-line answer: with no colon in it, nothing in the line is an anchor.
_FAST_FINAL = re.compile(
    r"\s*+(?:" + _FAST_THOUGHT + r")?[ \t]*Final Answer:(?![*_])(?P<answer>[^\n:]*)\s*"
)

# An anchor starts a line, or follows sentence punctuation mid-line (then it needs a colon).
_ANCHOR = re.compile(
    r"(?:^[ \t]*|(?P<mid>(?<=[.!?:\]}])[ \t]+))[*_]{0,2}"
    r"(?P<kw>final[ \t]+answer|action[ \t]+input|action[ \t]+output|action|thought"
    r"|observation|question|example)"
    r"(?P<plural>s?)\b[ \t]*(?P<num>\d+)?[ \t]*[*_]{0,2}[ \t]*(?P<colon>:)?"
    r"(?:[*_]{1,2}(?=\s))?",
    re.IGNORECASE | re.MULTILINE,
)
_MAIN_KINDS = {"thought": "thought", "action": "action", "actioninput": "input",
               "finalanswer": "final"}


def _classify(m: re.Match[str]) -> str | None:
    """The anchor's role: thought, action, input, final, cut, or None (not an anchor)."""
    kw = m.group("kw")
    key = "".join(kw.lower().split())
    colon = m.group("colon") is not None
    if key in _MAIN_KINDS:
        return _MAIN_KINDS[key] if colon and not m.group("plural") else None
    # Observation / Question / Example: a new turn. In lower case only with a colon, so
    # prose such as "question whether ..." is not cut; mid-line only right after an
    # action's closing `]` or `}`, so "... an example. Example: ..." in a thought is not.
    if m.group("mid") is not None:
        return "cut" if colon and m.string[m.start() - 1] in "]}" else None
    return "cut" if colon or kw[0].isupper() else None


def parse_react_step(text: str, *, dialect: Dialect | None = None) -> Action | FinalAnswer:
    """Parse one ReAct step from model text into an Action or a FinalAnswer.

    Reads `Thought: / Action: name / Action Input: {json}` and `Thought k: / Action k:
    name[argument]` (`finish[answer]` answers). The step ends where the model starts a new
    turn (a line beginning Observation, Question, Example or Action Output, or a second
    Thought / Action / Action Input after a complete action); within what remains, a Final
    Answer wins over an Action. A tool name must match TOOL_NAME_PATTERN (the registry's
    1-64 letters, digits, `_`, `-`, `.`, but not a bare number): `Action: 1889` is an error.
    `dialect` only picks the format help shown in errors (by default it follows the text).

    Raises ParseError, and nothing else, for any input.
    """
    if not isinstance(text, str):
        raise ParseError(
            f"expected the model's text (str), got {type(text).__name__}; {FORMAT_HELP_JSON}"
        )
    m = _FAST_JSON.fullmatch(text)
    if m is not None:
        t1, t2, name, source = m.groups()  # the groups t1, t2, name and args, in order
        try:
            args, end = _SCAN_JSON(source, 0)
        except (ValueError, StopIteration, RecursionError):
            args = end = None
        if isinstance(args, dict) and end == len(source):
            if "&" in source:
                return Action((t2 if t1 is None else t1).strip(), name, _unescape_deep(args))
            return Action((t2 if t1 is None else t1).strip(), name, args, args_text=source)
    else:
        m = _FAST_FINAL.fullmatch(text)
        if m is not None:
            t1, t2, answer = m.groups()  # the groups t1, t2 and answer, in order
            answer = answer.strip()
            if answer:
                return FinalAnswer((t1 if t1 is not None else t2 or "").strip(), answer)
    try:
        return _parse_react_general(text, dialect)
    except _Bad as bad:
        raise ParseError(str(bad)) from None
    except RecursionError:
        raise ParseError(
            f"Action Input is nested too deeply; {_help(dialect, False)}"
        ) from None


def _help(dialect: Dialect | None, brackets_seen: bool) -> str:
    if dialect == "brackets" or (dialect is None and brackets_seen):
        return FORMAT_HELP_BRACKETS
    return FORMAT_HELP_JSON


class _Scan:
    """Mutable state of one pass over a step's anchors."""

    __slots__ = ("action_end", "action_name", "args", "bracket", "brackets_seen", "complete",
                 "final", "input_error", "input_orphan", "leading_cut", "repaired", "thoughts")

    def __init__(self) -> None:
        self.thoughts: list[str] = []
        self.final: str | None = None
        self.action_name: str | None = None
        self.action_end = 0  # where the Action line ends
        self.args: Any = None
        self.bracket: str | None = None  # the text inside name[...], when that form is used
        self.complete = False
        self.input_error: str | None = None
        self.input_orphan = False
        self.brackets_seen = False
        self.leading_cut: str | None = None
        self.repaired: tuple[str, ...] = ()  # what decoding the Action Input had to fix


def _parse_react_general(text: str, dialect: Dialect | None) -> Action | FinalAnswer:
    if "```" in text:
        text = _FENCE_LINE.sub("", text)
    s = _Scan()
    anchors = [(m, kind) for m in _ANCHOR.finditer(text) if (kind := _classify(m))]
    if anchors:
        pre = text[: anchors[0][0].start()]
        if pre.strip():
            s.thoughts.append(pre)
    elif text.strip():
        s.thoughts.append(text)

    skip_until = 0
    seg_kind: str | None = None  # "thought" or "final": the segment being collected
    seg_start = 0
    for i, (m, kind) in enumerate(anchors):
        if m.start() < skip_until:
            continue
        if m.group("num"):
            s.brackets_seen = True
        if kind == "cut" or (s.complete and kind in ("thought", "action", "input")):
            if kind == "cut" and not s.thoughts and s.action_name is None and s.final is None \
                    and seg_kind is None:
                s.leading_cut = m.group("kw")
            _close(s, text, seg_kind, seg_start, m.start())
            seg_kind = None
            break
        _close(s, text, seg_kind, seg_start, m.start())
        seg_kind = None
        if kind == "thought":
            seg_kind, seg_start = "thought", m.end()
        elif kind == "final":
            if s.final is None:
                seg_kind, seg_start = "final", m.end()
        elif kind == "action":
            skip_until = _read_action(s, text, m.end(), anchors, i)
        else:  # input
            if s.action_name is None:
                s.input_orphan = True
                continue
            skip_until = _read_input(s, text, m.end(), _segment_end(text, anchors, i))
    else:
        _close(s, text, seg_kind, seg_start, len(text))

    if s.action_name is not None and not s.complete and s.input_error is None:
        _read_bare_input(s, text)

    help_text = _help(dialect, s.brackets_seen)
    thought = "\n".join(t for t in (p.strip() for p in s.thoughts) if t)
    if s.final is not None:
        answer = s.final.strip()
        if answer:
            return FinalAnswer(thought, answer)
        if s.action_name is None:
            raise _Bad(f"Final Answer is empty; {help_text}")
    if s.action_name is None:
        if s.input_orphan:
            raise _Bad(f"'Action Input:' without an 'Action:' line naming the tool; {help_text}")
        if s.leading_cut:
            raise _Bad(
                f"the reply starts a new turn ({s.leading_cut!r}) instead of a step; {help_text}"
            )
        raise _Bad(f"no 'Action:' or 'Final Answer:' found; {help_text}")
    return _build_action(s, thought, help_text)


def _close(s: _Scan, text: str, kind: str | None, start: int, end: int) -> None:
    if kind == "thought":
        s.thoughts.append(text[start:end])
    elif kind == "final" and s.final is None:
        s.final = text[start:end]


def _segment_end(text: str, anchors: list[tuple[re.Match[str], str]], i: int) -> int:
    """Where the segment of anchor i ends: the next anchor that starts a line, or the end."""
    for m, _kind in anchors[i + 1:]:
        if m.group("mid") is None:
            return m.start()
    return len(text)


def _read_action(
    s: _Scan, text: str, start: int, anchors: list[tuple[re.Match[str], str]], i: int
) -> int:
    """Read an Action line (name, name[arg] or name {json}); returns where scanning resumes."""
    line_end = text.find("\n", start)
    if line_end < 0:
        line_end = len(text)
    bound = line_end
    if i + 1 < len(anchors):
        bound = min(bound, anchors[i + 1][0].start())
    raw = text[start:bound]
    s.action_end = line_end
    # A new Action line before the previous one was complete replaces it (the model
    # restarted); the previous one's input error is forgotten with it.
    s.args, s.bracket, s.input_error, s.repaired = None, None, None, ()
    open_bracket = raw.find("[")
    brace = raw.find("{")
    if open_bracket >= 0 and (brace < 0 or open_bracket < brace):
        s.brackets_seen = True
        s.action_name = raw[:open_bracket]
        arg_start = start + open_bracket + 1
        close = text.rfind("]", arg_start, line_end)
        if close < 0:
            close = text.rfind("]", arg_start, _segment_end(text, anchors, i))
        if close < 0:
            s.input_error = (
                f"Action {describe(raw.strip(), 40)} has no closing ']'"
            )
            return start
        s.bracket = text[arg_start:close]
        s.complete = True
        return close + 1
    if brace >= 0:
        s.action_name = raw[:brace]
        return _read_input(s, text, start + brace, _segment_end(text, anchors, i))
    s.action_name = raw
    return start


def _read_input(s: _Scan, text: str, start: int, seg_end: int) -> int:
    """Decode the JSON value of an Action Input; returns where scanning resumes."""
    try:
        value, end, repaired = _decode_json_at(text, start, seg_end)
    except _Bad as bad:
        s.input_error = str(bad)
        return start
    s.args, s.repaired = value, repaired
    s.complete = True
    return end


def _read_bare_input(s: _Scan, text: str) -> None:
    """An Action with no Action Input line, but a JSON object right after the name line."""
    rest = text[s.action_end:].lstrip()
    if rest.startswith("{"):
        _read_input(s, text, len(text) - len(rest), len(text))


def _build_action(s: _Scan, thought: str, help_text: str) -> Action | FinalAnswer:
    name = (s.action_name or "").strip().strip("`'\"*").rstrip(",;:").strip()
    if not name:
        raise _Bad(f"'Action:' names no tool (empty Action name); {help_text}")
    if not TOOL_NAME_PATTERN.fullmatch(name):
        if re.fullmatch(r"[0-9.+-]+", name):
            what = f"Action {name[:20]!r} is a number, not a tool name"
        else:
            what = f"Action {describe(name, 40)} is not a tool name"
        raise _Bad(
            f"{what} (a tool name starts with a letter or '_', then up to 63 letters, "
            f"digits, '_', '-', '.'); {help_text}"
        )
    finish = name.lower() == "finish"
    if s.bracket is not None:
        if finish:
            answer = _bracket_text(s.bracket)
            if not answer:
                raise _Bad(f"finish[] has an empty answer; {help_text}")
            return FinalAnswer(thought, answer)
        return Action(thought, name, _bracket_args(s.bracket))
    if s.input_error is not None:
        raise _Bad(f"{s.input_error}; {help_text}")
    if not s.complete:
        raise _Bad(f"Action {name!r} has no 'Action Input:' line; {help_text}")
    if not isinstance(s.args, dict):
        raise _Bad(f"Action Input must be a JSON object, got {_json_type(s.args)}; {help_text}")
    if finish:
        values = list(s.args.values())
        if len(values) != 1:
            raise _Bad(f"finish takes one argument, the answer; {help_text}")
        answer = values[0] if isinstance(values[0], str) else json.dumps(values[0])
        if not answer.strip():
            raise _Bad(f"finish has an empty answer; {help_text}")
        return FinalAnswer(thought, answer.strip())
    return Action(thought, name, s.args, repaired=s.repaired)


def _bracket_text(raw: str) -> str:
    """The argument of name[...] as text: stripped, a JSON string literal decoded."""
    arg = raw.strip()
    if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "\"'":
        if arg[0] == '"':
            try:
                decoded = _DECODER.decode(arg)
            except ValueError:
                decoded = None
            if isinstance(decoded, str):
                return decoded.strip()
        return arg[1:-1].strip()
    return arg


def _bracket_args(raw: str) -> dict[str, Any]:
    """name[text] -> {"input": text}; name[{json object}] -> the object."""
    arg = raw.strip()
    if arg.startswith("{"):
        try:
            value = _DECODER.decode(arg)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return _unescape_deep(value) if "&" in arg else value
    return {"input": _unescape(_bracket_text(arg))}
