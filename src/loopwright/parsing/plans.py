"""ReWOO plans: parse a planner's JSON plan into PlanSteps, find and substitute `#E` refs.

A plan is untrusted model text like any other; it is read with the same lenient JSON
decoder and reported with the same messages as a ReAct step (the helpers in `parsing`),
and a ParseError ends in FORMAT_HELP_PLAN so the model can retry.

Embedded references render like observations: a str as is, a dict or list as
`json.dumps(value, default=str)`, anything else as `str(value)`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from loopwright.errors import ParseError, describe
from loopwright.parsing.decoding import _DECODER, TOOL_NAME_PATTERN, _Bad, _json_type, _where

__all__ = ["FORMAT_HELP_PLAN", "REF_PATTERN", "PlanStep", "find_refs", "parse_plan", "substitute"]

FORMAT_HELP_PLAN: Final = (
    'reply with {"plan": [{"id": "E1", "tool": "<tool>", "args": {...}}, ...]}; '
    'a later step\'s args may use "#E1" for an earlier result'
)

REF_PATTERN: Final = re.compile(r"#(E\d+)")
"""An evidence reference inside a plan step's args: `#E1` refers to evidence id `E1`."""
_STEP_ID = re.compile(r"E\d+")
_MAX_PLAN_CANDIDATES = 64


@dataclass(frozen=True)
class PlanStep:
    """One step of a ReWOO plan: evidence `id` is the result of `tool(**args)`."""

    id: str
    tool: str
    args: dict[str, Any]

    @property
    def refs(self) -> frozenset[str]:
        """The evidence ids this step's args reference (`#E1` -> `"E1"`)."""
        return find_refs(self.args)


def parse_plan(text: str) -> list[PlanStep]:
    """Parse a ReWOO plan: `{"plan": [{"id": "E1", "tool": ..., "args": {...}}, ...]}` or
    a bare list of steps, with prose or a code fence around it.

    Every `#E` reference in a step's args must name an earlier step. Raises ParseError
    (naming the step) for anything else: no JSON, wrong shape, an empty plan, bad or
    duplicate ids, args that are not an object, forward, self or dangling references.
    """
    if not isinstance(text, str):
        raise ParseError(
            f"expected the planner's text (str), got {type(text).__name__}; {FORMAT_HELP_PLAN}"
        )
    try:
        return _parse_plan(text)
    except _Bad as bad:
        raise ParseError(f"{bad}; {FORMAT_HELP_PLAN}") from None
    except RecursionError:
        raise ParseError(f"plan is nested too deeply; {FORMAT_HELP_PLAN}") from None


def _find_plan_value(text: str) -> Any:
    """The first JSON value in text shaped like a plan, else the first that parsed."""
    first_value: Any = None
    found = False
    first_error: json.JSONDecodeError | None = None
    first_at = 0
    pos = 0
    for _ in range(_MAX_PLAN_CANDIDATES):
        starts = [p for p in (text.find("{", pos), text.find("[", pos)) if p >= 0]
        if not starts:
            break
        at = min(starts)
        try:
            value, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError as err:
            if first_error is None:
                first_error, first_at = err, at
            pos = at + 1
            continue
        except ValueError:
            pos = at + 1
            continue
        if _plan_shaped(value):
            return value
        if not found:
            first_value, found = value, True
        pos = end
    if found:
        return first_value
    if first_error is not None:
        raise _Bad(f"plan is not valid JSON: {_where(first_error, text, first_at)}")
    raise _Bad("no JSON plan found")


def _plan_shaped(value: Any) -> bool:
    if isinstance(value, dict):
        return "plan" in value
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _parse_plan(text: str) -> list[PlanStep]:
    value = _find_plan_value(text)
    if isinstance(value, dict):
        if "plan" not in value:
            keys = ", ".join(sorted(map(str, value))[:5])
            raise _Bad(f"plan JSON has no 'plan' key (keys: {describe(keys, 60)})")
        value = value["plan"]
    if not isinstance(value, list):
        raise _Bad(f"'plan' must be a list of steps, got {_json_type(value)}")
    if not value:
        raise _Bad("plan is empty")
    steps: list[PlanStep] = []
    position: dict[str, int] = {}
    for k, raw in enumerate(value, 1):
        where = f"step {k}"
        if not isinstance(raw, dict):
            raise _Bad(f"{where} is not an object: {describe(raw, 50)}")
        step_id = raw.get("id")
        if not isinstance(step_id, str):
            raise _Bad(f"{where} has no string 'id'")
        step_id = step_id.strip()
        if not _STEP_ID.fullmatch(step_id):
            raise _Bad(f"{where} id {describe(step_id, 30)} is not of the form E1, E2, ...")
        where = f"step {step_id}"
        if step_id in position:
            raise _Bad(f"{where}: duplicate id")
        position[step_id] = k
        tool = raw.get("tool")
        if not isinstance(tool, str) or not tool.strip():
            raise _Bad(f"{where} has no string 'tool'")
        tool = tool.strip()
        if not TOOL_NAME_PATTERN.fullmatch(tool):
            raise _Bad(f"{where}: {describe(tool, 40)} is not a tool name")
        args = raw.get("args", {})
        if not isinstance(args, dict):
            raise _Bad(f"{where}: 'args' must be an object, got {_json_type(args)}")
        steps.append(PlanStep(step_id, tool, args))
    for step in steps:
        for ref in sorted(step.refs):
            if ref == step.id:
                raise _Bad(f"step {step.id} references itself (#{ref})")
            if ref not in position:
                raise _Bad(f"step {step.id} references #{ref}, which no step defines")
            if position[ref] > position[step.id]:
                raise _Bad(f"step {step.id} references #{ref}, which comes later")
    return steps


# ------------------------------------------------------------------- substitution


def find_refs(value: Any) -> frozenset[str]:
    """All evidence ids referenced (`#E1` -> "E1") in string values anywhere inside value;
    dict keys are not read."""
    found: set[str] = set()
    _collect_refs(value, found)
    return frozenset(found)


def _collect_refs(value: Any, found: set[str]) -> None:
    if isinstance(value, str):
        if "#" in value:
            found.update(REF_PATTERN.findall(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            _collect_refs(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_refs(v, found)


def substitute(args: dict[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
    """Replace `#E` references in args with evidence, returning a new dict.

    A string that is exactly `#E2` becomes evidence["E2"] with its type (the typed wire);
    a reference inside a longer string is interpolated as text (str as is, dict and list as
    JSON, anything else str()). Keys are never substituted; args is not mutated.
    Raises ValueError("unresolved reference #E9") for an id missing from evidence.
    """
    return {k: _substitute_value(v, evidence) for k, v in args.items()}


def _substitute_value(value: Any, evidence: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        if "#" not in value:
            return value
        exact = REF_PATTERN.fullmatch(value)
        if exact is not None:
            return _lookup(exact.group(1), evidence)
        return REF_PATTERN.sub(lambda m: _render(_lookup(m.group(1), evidence)), value)
    if isinstance(value, dict):
        return {k: _substitute_value(v, evidence) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute_value(v, evidence) for v in value]
    if isinstance(value, tuple):
        return tuple(_substitute_value(v, evidence) for v in value)
    return value


def _lookup(ref: str, evidence: Mapping[str, Any]) -> Any:
    if ref not in evidence:
        raise ValueError(f"unresolved reference #{ref}")
    return evidence[ref]


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        try:
            return json.dumps(value, default=str)
        except ValueError:  # circular
            return str(value)
    return str(value)
