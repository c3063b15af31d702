"""Typed tools and the registry that dispatches them.

A Tool wraps a callable with a JSON Schema and a strict validator built once (how both are
derived, and the messages a rejection gives, live in `toolschema`). The registry is the
second trust boundary: `dispatch`/`execute` never raise for anything a tool or the model
does. Unknown tool, bad arguments, an exception, a timeout or an unrenderable result all
come back as a ToolError whose observation the model reads next step; only
KeyboardInterrupt, SystemExit and other non-Exception BaseExceptions propagate.

Timeouts: a tool's own `timeout_s`, else the registry's `tool_timeout_s`; a per-call
`timeout_s` caps either (the loops pass the run's remaining wall clock). How a call is
held to one, without killing threads or blocking an event loop: tools/run.py.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from functools import partial, update_wrapper
from types import CoroutineType
from typing import Any, Final, Literal, TypeVar, overload

from loopwright.errors import ToolDefinitionError, describe
from loopwright.offload import acall_in_thread
from loopwright.tools.docstrings import docstring_examples
from loopwright.tools.examples import (
    ToolExample,
    check_examples,
    eg_value,
    parse_docstring_examples,
)
from loopwright.tools.results import (
    ToolError,
    ToolErrorKind,
    ToolResult,
    _failure,
    _invalid,
    _unrenderable,
    render_observation,
)
from loopwright.tools.run import Outcome, Timeout, call_within, guard, run_coroutine, run_job
from loopwright.tools.schema import (
    ArgumentSpec,
    ToolArgumentError,
    argument_dict,
    parse_docstring,
    schema_arguments,
    typed_arguments,
)

__all__ = [
    "IdempotencyKey",
    "SideEffects",
    "Tool",
    "ToolArgumentError",
    "ToolError",
    "ToolErrorKind",
    "ToolExample",
    "ToolRegistry",
    "ToolResult",

    "parse_docstring",
    "render_observation",
    "tool",
]

SideEffects = Literal["none", "read", "write", "destructive"]
# The argument that carries a side effect's idempotency key, or a function of the arguments.
IdempotencyKey = str | Callable[[Mapping[str, Any]], object] | None
_T = TypeVar("_T")

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_SIDE_EFFECTS: Final = ("none", "read", "write", "destructive")


# --- Tool -------------------------------------------------------------------------------


class Tool:
    """A callable with a name, a description, a JSON Schema for its arguments and a strict
    validator. Still callable like the function it wraps. For a method, wrap the bound
    method (`tool(obj.method)`), so `self` is not a parameter."""

    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any]
    is_async: bool
    timeout_s: float | None
    side_effects: SideEffects
    idempotent: bool
    requires_approval: bool
    idempotency_key: IdempotencyKey
    examples: tuple[ToolExample, ...]
    dedupes_on_call_key: bool

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        side_effects: SideEffects = "none",
        idempotent: bool | None = None,
        requires_approval: bool | None = None,
        idempotency_key: IdempotencyKey = None,
        examples: Sequence[Mapping[str, Any] | ToolExample] | None = None,
        dedupes_on_call_key: bool = False,
    ) -> None:
        if not callable(func):
            raise ToolDefinitionError(f"a tool needs a callable, got {describe(func)}")
        tool_name = name if name is not None else getattr(func, "__name__", "")
        doc = inspect.getdoc(func)
        summary, param_docs = parse_docstring(doc)
        self._setup(
            tool_name, description if description is not None else summary, func,
            timeout_s, side_effects, idempotent, requires_approval, idempotency_key, dedupes_on_call_key,
        )
        self._use(typed_arguments(func, tool_name, param_docs))
        self._check_key()
        documented = parse_docstring_examples(docstring_examples(doc), tool_name, self._names)
        self._set_examples(examples, documented)
        try:
            update_wrapper(self, func, updated=())
        except (AttributeError, TypeError):  # e.g. a callable object without __name__
            pass

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        func: Callable[..., Any],
        *,
        timeout_s: float | None = None,
        side_effects: SideEffects = "none",
        idempotent: bool | None = None,
        requires_approval: bool | None = None,
        idempotency_key: IdempotencyKey = None,
        examples: Sequence[Mapping[str, Any] | ToolExample] | None = None,
        dedupes_on_call_key: bool = False,
    ) -> Tool:
        """A tool declared by a JSON Schema object (MCP, OpenAPI, BFCL function docs).

        `examples` are known calls (`{"args": {...}, "question": ..., "result": ...}`);
        the schema's own JSON Schema `examples` (argument objects) count as examples too.

        BFCL's type aliases (`dict`, `float`, `tuple`, `any`) are mapped to JSON Schema.
        Strict: unless the schema says otherwise (`additionalProperties`,
        `patternProperties`, `unevaluatedProperties`, or a top-level composition), unknown
        top-level arguments are rejected, and `additionalProperties: false` is written
        into `parameters` so grammars and native tool calls see the same rule."""
        if not callable(func):
            raise ToolDefinitionError(f"tool {name!r} needs a callable, got {describe(func)}")
        self = cls.__new__(cls)
        self._setup(
            name, description, func, timeout_s, side_effects, idempotent, requires_approval,
            idempotency_key, dedupes_on_call_key,
        )
        self._use(schema_arguments(parameters, name))
        self._check_key()
        listed = parameters.get("examples") if isinstance(parameters, Mapping) else None
        in_schema = [{"args": a} for a in listed if isinstance(a, Mapping)] if isinstance(listed, list) else []
        self._set_examples(examples, in_schema)
        return self

    def _setup(
        self,
        name: str,
        description: str,
        func: Callable[..., Any],
        timeout_s: float | None,
        side_effects: SideEffects,
        idempotent: bool | None,
        requires_approval: bool | None,
        idempotency_key: IdempotencyKey,
        dedupes_on_call_key: bool = False,
    ) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ToolDefinitionError(
                f"invalid tool name {describe(name)}: use 1-64 letters, digits, '_', '-' "
                "or '.' (pass name=... to rename)"
            )
        if side_effects not in _SIDE_EFFECTS:
            raise ToolDefinitionError(
                f"tool {name!r}: side_effects must be one of {_SIDE_EFFECTS}, "
                f"got {describe(side_effects)}"
            )
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0
        ):
            raise ToolDefinitionError(
                f"tool {name!r}: timeout_s must be a positive number of seconds or None, "
                f"got {describe(timeout_s)}"
            )
        self.name = name
        self.description = description
        self.func = func
        call = getattr(func, "__call__", None)  # noqa: B004 - async __call__ on an object
        self.is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(call)
        self.timeout_s = timeout_s
        self.side_effects = side_effects
        self.idempotent = side_effects in ("none", "read") if idempotent is None else idempotent
        self.requires_approval = (
            side_effects == "destructive" if requires_approval is None else requires_approval
        )
        self.idempotency_key = idempotency_key
        if not isinstance(dedupes_on_call_key, bool):
            raise ToolDefinitionError(
                f"tool {name!r}: dedupes_on_call_key must be True or False, got {describe(dedupes_on_call_key)}"
            )
        # The tool hands `loopwright.current_call().key` to the system it changes, which
        # ignores a second call with that key: after a crash it is run again, not blocked on.
        self.dedupes_on_call_key = dedupes_on_call_key

    def _check_key(self) -> None:
        key = self.idempotency_key
        if key is None or callable(key) or (isinstance(key, str) and key in self._names):
            return
        raise ToolDefinitionError(
            f"tool {self.name!r}: idempotency_key must name one of its parameters "
            f"({', '.join(self._names) or 'none'}) or be a function of the arguments, "
            f"got {describe(key)}"
        )

    def _set_examples(
        self, declared: object, documented: Sequence[Mapping[str, Any]]
    ) -> None:
        """Declared examples first, then the docstring's (or the schema's), then one made
        of the parameters' `e.g.` values when every required parameter has one."""
        found = list(check_examples(self.name, declared, self.validate))
        found += check_examples(self.name, list(documented), self.validate, "docstring")
        props = self.parameters.get("properties") or {}
        hinted = {}
        for key, spec in props.items():
            ok, value = eg_value(spec.get("description") if isinstance(spec, Mapping) else None, spec)
            if not ok and len(props) == 1 and isinstance(spec, Mapping):
                ok, value = eg_value(self.description, spec)  # "Look up a fact, e.g. ..."
            if ok:
                hinted[key] = value
        if hinted and all(k in hinted for k in self._required):
            try:
                self.validate(hinted)
            except ValueError:
                pass
            else:
                found.append(ToolExample(hinted, source="docstring"))
        unique: dict[str, ToolExample] = {}
        for example in found:
            unique.setdefault(json.dumps(example.args, sort_keys=True, default=str), example)
        self.examples = tuple(unique.values())

    def with_examples(self, examples: Sequence[Mapping[str, Any] | ToolExample], *, replace: bool = False,
                      first: bool = False, source: str = "declared") -> Tool:
        """A copy of this tool with `examples` after its own (first: before them; replace:
        instead of them), each checked against the schema (ToolDefinitionError
        otherwise); a call with arguments already there is kept once. This tool is left
        as it is."""
        added = check_examples(self.name, examples, self.validate, source)
        own = () if replace else self.examples
        made = copy.copy(self)
        unique: dict[str, ToolExample] = {}
        for example in (*added, *own) if first else (*own, *added):
            unique.setdefault(json.dumps(example.args, sort_keys=True, default=str), example)
        made.examples = tuple(unique.values())
        return made

    def _use(self, spec: ArgumentSpec) -> None:
        self.parameters = spec.parameters
        self._names = spec.names
        self._required = spec.required
        self._open = spec.open
        self._positional = spec.positional
        self._defaults = spec.defaults
        # Takes a dict, returns the arguments to call with; the registry calls it directly.
        self._check = spec.check

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Check arguments against the schema; return the arguments to call with.

        Raises ToolArgumentError (a ValueError) naming each bad argument and why."""
        return self._check(argument_dict(args))

    def _invoke(self, args: dict[str, Any]) -> Any:
        if not self._positional:
            return self.func(**args)
        rest = dict(args)
        leading = [rest.pop(n) if n in rest else self._defaults[n] for n in self._positional]
        return self.func(*leading, **rest)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function shape, for grammars and native tool calls. Examples travel
        as the JSON Schema `examples` of the parameters (argument objects), the way
        tool-definition APIs take input examples."""
        parameters = copy.deepcopy(self.parameters)
        if self.examples:
            parameters["examples"] = [copy.deepcopy(e.args) for e in self.examples]
        return {"name": self.name, "description": self.description, "parameters": parameters}

    def input_param(self) -> str | None:
        """The parameter a bare `name[text]` action binds to: the only parameter, or the
        only required one; None when that is ambiguous."""
        if len(self._names) == 1:
            return self._names[0]
        return self._required[0] if len(self._required) == 1 else None

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, side_effects={self.side_effects!r})"


@overload
def tool(func: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    func: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    side_effects: SideEffects = "none",
    idempotent: bool | None = None,
    requires_approval: bool | None = None,
    idempotency_key: IdempotencyKey = None,
    examples: Sequence[Mapping[str, Any] | ToolExample] | None = None,
    dedupes_on_call_key: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    side_effects: SideEffects = "none",
    idempotent: bool | None = None,
    requires_approval: bool | None = None,
    idempotency_key: IdempotencyKey = None,
    examples: Sequence[Mapping[str, Any] | ToolExample] | None = None,
    dedupes_on_call_key: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a Tool from a typed function; usable as `@tool` and `@tool(...)`.

    examples: known calls, `[{"args": {...}, "question": "...", "result": ...}]`, checked
    against the schema now; worked examples in the default prompts are built from them."""

    def make(f: Callable[..., Any]) -> Tool:
        return Tool(
            f, name=name, description=description, timeout_s=timeout_s,
            side_effects=side_effects, idempotent=idempotent,
            requires_approval=requires_approval, idempotency_key=idempotency_key,
            examples=examples,
            dedupes_on_call_key=dedupes_on_call_key,
        )

    return make if func is None else make(func)


# --- execution --------------------------------------------------------------------------

class ToolRegistry:
    """The tools an agent may call, and the one place they are called from."""

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        tool_timeout_s: float | None = None,
        max_observation_chars: int = 8000,
        examples: Sequence[object] | None = None,
    ) -> None:
        """examples: whole runs, `[{"question", "calls": [{"tool", "args", "result"}, ...],
        "answer"}]`, checked now against the tools' schemas; every mode's prompts show them.
        max_observation_chars: the most of one result a run's prompt shows; a longer result
        is rendered whole here and kept whole by the run under a handle (tools/handles.py)."""
        from loopwright.tools.examples import check_run_examples
        self._tools: dict[str, Tool] = {}
        self._names: tuple[str, ...] = ()
        self._memo: dict[Hashable, Any] = {}
        self.tool_timeout_s = tool_timeout_s
        self.max_observation_chars = max_observation_chars
        for item in tools:
            self.register(item)
        self.examples = check_run_examples(examples, self._tools)

    def register(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Add a tool (a plain function is wrapped with `tool()`); names must be unique."""
        made = tool if isinstance(tool, Tool) else Tool(tool)
        if made.name in self._tools:
            raise ToolDefinitionError(f"duplicate tool name {made.name!r}")
        self._tools[made.name] = made
        self._names = (*self._names, made.name)
        self._memo.clear()
        return made

    def memo(self, key: Hashable, make: Callable[[ToolRegistry], _T]) -> _T:
        """`make(self)`, computed once per key until the next `register`. For text built
        from the tool schemas (the prompt's tool list and worked example): building it
        costs more than the steps of a short run. Treat the value as read-only."""
        try:
            return self._memo[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._memo[key] = make(self)
            return value

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name) if isinstance(name, str) else None

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Tool):
            return self._tools.get(item.name) is item
        return isinstance(item, str) and item in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[Tool]:
        return iter(tuple(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._names)!r})"

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._tools.values()]

    def subset(self, names: Iterable[str | Tool]) -> ToolRegistry:
        """Least privilege: a new registry holding only these tools (named, or the Tools
        themselves), same limits."""
        wanted = list(dict.fromkeys(n.name if isinstance(n, Tool) else n for n in names))
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise ToolDefinitionError(
                f"unknown tool(s) {', '.join(map(repr, unknown))}; registered: "
                f"{', '.join(self._names) or 'none'}"
            )
        return ToolRegistry(
            [self._tools[n] for n in wanted],
            tool_timeout_s=self.tool_timeout_s,
            max_observation_chars=self.max_observation_chars,
            examples=[e for e in self.examples if all(c.tool in wanted for c in e.calls)],
        )

    def bind(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Bind a bare `name[text]` action (`{"input": text}`) to the tool's input parameter.

        Unchanged when the tool is unknown, has its own `input` parameter, or has no single
        input parameter; a parameterless tool called as `name[]` gets no arguments."""
        if type(args) is not dict and not isinstance(args, Mapping):
            return args
        if len(args) != 1 or "input" not in args:
            return args
        found = self.get(name)
        if found is None or "input" in found._names:
            return args
        target = found.input_param()
        if target is not None:
            return {target: args["input"]}
        if not found._names and not found._open and args["input"] in ("", None):
            return {}
        return args

    def _unknown(self, name: object) -> ToolError:
        listed = ", ".join(self._names[:8])
        if len(self._names) > 8:
            listed += f", … {len(self._names) - 8} more"
        hint = f"available: {listed}" if listed else "no tools are registered"
        return ToolError(str(name), f"unknown tool {describe(name)} ({hint})", "unknown_tool")

    def _prepare(
        self, name: str, args: Mapping[str, Any]
    ) -> tuple[Tool, dict[str, Any]] | ToolError:
        found = self._tools.get(name) if isinstance(name, str) else None
        if found is None:
            return self._unknown(name)
        try:
            return found, found._check(args) if type(args) is dict else found.validate(args)
        except Exception as exc:
            return _invalid(found.name, exc)

    def _call(self, name: str, args: Mapping[str, Any], timeout_s: float | None) -> Any:
        """The tool's value, or a ToolError. A sync tool with no timeout runs inline, with
        no thread."""
        prepared = self._prepare(name, args)
        if isinstance(prepared, ToolError):
            return prepared
        found, call_args = prepared
        timeout = self._timeout(found, timeout_s)
        if timeout is None and not found.is_async:
            try:
                value = found._invoke(call_args)
            except Exception as exc:
                return _failure(found.name, exc)
            if not isinstance(value, CoroutineType):
                return value
            job: Callable[[], Outcome] = partial(run_coroutine, value, None)
        else:
            job = partial(call_within, partial(found._invoke, call_args), timeout)
        ok, value = run_job(job, timeout, found.name)
        return value if ok else _failure(found.name, value)

    def _render(self, name: str, outcome: Any) -> tuple[str, ToolError | None]:
        """The observation for an outcome, and the ToolError if it is (or became) one."""
        if type(outcome) is not ToolError:
            try:
                return render_observation(outcome, -1), None
            except Exception as exc:
                outcome = _unrenderable(name, outcome, exc)
        return render_observation(outcome.as_observation(), -1), outcome

    def _result(self, name: str, args: Any, outcome: Any, start: float) -> ToolResult:
        """The ToolResult for an outcome: its observation, its error, a copy of the arguments."""
        observation, error = self._render(name, outcome)
        return ToolResult(name, dict(args) if isinstance(args, (dict, Mapping)) else {}, None if error else outcome,
                          observation=observation, error=error, duration_s=time.perf_counter() - start)

    def dispatch(
        self, name: str, args: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> Any:
        """Call a tool: its value, or a ToolError. Never raises for anything a tool or the
        model does; a value that cannot be rendered as an observation is a ToolError too."""
        outcome = self._call(name, args, timeout_s)
        if type(outcome) in _PLAIN:
            return outcome
        return self._render(str(name), outcome)[1] or outcome

    def execute(
        self, name: str, args: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """Call a tool and render its observation in full; what the loops use (a run's
        gate keeps a result past `max_observation_chars` under a handle)."""
        start = time.perf_counter()
        return self._result(name, args, self._call(name, args, timeout_s), start)

    async def aexecute(
        self, name: str, args: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        """`execute` for concurrent schedulers: async tools are awaited on the running loop,
        sync tools run in a daemon thread, so independent calls overlap."""
        start = time.perf_counter()
        prepared = self._prepare(name, args)
        if isinstance(prepared, ToolError):
            return self._result(name, args, prepared, start)
        found, call_args = prepared
        timeout = self._timeout(found, timeout_s)
        if found.is_async:
            try:
                value = found._invoke(call_args)
            except Exception as exc:
                return self._result(name, args, _failure(found.name, exc), start)
            ok, value = (
                await guard(value, timeout) if inspect.isawaitable(value) else (True, value)
            )
        else:
            ok, value = await acall_in_thread(partial(found._invoke, call_args), timeout, f"tool:{found.name}")
            if ok and isinstance(value, CoroutineType):
                left = None if timeout is None else timeout - (time.perf_counter() - start)
                ok, value = await guard(value, left)
                if not ok and isinstance(value, Timeout):
                    value = Timeout(timeout if timeout is not None else 0.0)
        return self._result(name, args, value if ok else _failure(found.name, value), start)

    def _timeout(self, tool: Tool, timeout_s: float | None) -> float | None:
        """The tool's own timeout, else the registry's; a per-call timeout caps it (the
        loops pass the run's remaining wall clock, which must not lift a tighter limit)."""
        own = tool.timeout_s if tool.timeout_s is not None else self.tool_timeout_s
        if timeout_s is None:
            return own
        return timeout_s if own is None else min(timeout_s, own)


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})  # always renderable
