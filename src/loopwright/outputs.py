"""Typed final answers: `run(..., output_type=T)`.

T is a pydantic model, a dataclass, a TypedDict (anything pydantic's TypeAdapter takes)
or a JSON Schema object (a dict). The model's final answer is read as JSON (a code fence
or text around the object is tolerated), validated, and kept as `trace.output`; an answer
that does not fit goes back to the model as an observation saying why. The schema is
shown in the prompt and sent with each request (`ModelRequest.output_schema`) so a
backend that constrains decoding can hold the answer to it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from loopwright.errors import LoopwrightError, describe

__all__ = ["OutputSpec", "OutputValidationError", "output_spec"]

_FENCE: Final = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class OutputValidationError(ValueError, LoopwrightError):
    """A final answer that does not fit the run's output_type; the message says why."""


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """What a typed run's final answer must be: its JSON Schema, and how to check it."""

    schema: dict[str, Any]
    name: str
    _adapter: Any = dataclasses.field(repr=False, compare=False)  # TypeAdapter, or None

    def parse(self, answer: str) -> Any:
        """The validated value of a final answer, or OutputValidationError saying why."""
        data = _json_in(answer)
        if self._adapter is None:
            from loopwright.tools.schema import _strict_validator

            validator = _strict_validator()(self.schema)
            problems = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
            if problems:
                where = "/".join(str(p) for p in problems[0].absolute_path) or "the answer"
                raise OutputValidationError(f"{where}: {problems[0].message}")
            return data
        from pydantic import ValidationError

        try:
            return self._adapter.validate_python(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the answer"
            raise OutputValidationError(
                f"{where}: {first['msg']} ({exc.error_count()} problem(s))"
            ) from None

    def dump(self, value: Any) -> Any:
        """The value as JSON data, for `trace.to_dict()`."""
        if self._adapter is None:
            return value
        return self._adapter.dump_python(value, mode="json")

    def instruction(self) -> str:
        """What the prompt tells the model about the answer's shape."""
        return (
            "The final answer must be one line of JSON matching this JSON Schema: "
            + json.dumps(self.schema, ensure_ascii=False, separators=(",", ":"))
        )


def _json_in(answer: str) -> Any:
    text = answer.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
            return value
        except ValueError:
            pass
    raise OutputValidationError(f"the final answer is not JSON: {describe(answer, 120)}")


def output_spec(output_type: Any) -> OutputSpec | None:
    """The spec for an output_type (None for none). A dict is a JSON Schema; anything
    else goes to pydantic's TypeAdapter. Raises TypeError for what neither accepts."""
    if output_type is None:
        return None
    if isinstance(output_type, OutputSpec):
        return output_type
    if isinstance(output_type, Mapping):
        from loopwright.tools.schema import _strict_validator

        schema = dict(output_type)
        try:
            _strict_validator().check_schema(schema)
        except Exception as exc:
            raise TypeError(f"output_type is not a valid JSON Schema: {exc}") from None
        return OutputSpec(schema, str(schema.get("title") or "output"), None)
    from pydantic import TypeAdapter

    try:
        from loopwright.tools.schema import _clean_schema

        adapter = TypeAdapter(output_type)
        schema = _clean_schema(adapter.json_schema())
    except Exception as exc:
        raise TypeError(
            f"output_type must be a pydantic model, dataclass, TypedDict or a JSON Schema dict; "
            f"got {describe(output_type)} ({exc})"
        ) from None
    return OutputSpec(schema, getattr(output_type, "__name__", "output"), adapter)
