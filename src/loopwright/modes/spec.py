"""RunSpec: what a run starts from. `lw.run` and the other front doors build one from their
keywords; the journal stores its JSON part (`config()`), and `resume` and `fork` rebuild it
from there (`from_config`), so a run is started one way whatever started it.

Every mode takes the shared limits; a limit that means nothing to a mode (max_replans in
ReAct) is accepted and ignored, so one set of limits works in every mode. A mode's own
settings (Reflexion's, Tree-of-Thoughts') given to another mode are a TypeError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from loopwright.guards import Limits, OnParseError, OnRepeat
from loopwright.modes.machine import Journal
from loopwright.pricing import Prices
from loopwright.prompts import PromptSet
from loopwright.safety import Approver
from loopwright.tools.toolset import tool_names
from loopwright.trace import Trace, Usage

if TYPE_CHECKING:  # memory imports numpy: only a run with a context budget loads it
    from loopwright.memory.embedders import Embedder
    from loopwright.memory.tiered import Memory

Mode = Literal["react", "rewoo", "plan_execute", "reflexion", "tot"]
Dialect = Literal["json", "brackets", "native"]
OnToolError = Literal["observe", "reflect"]
OnDeny = Literal["observe", "stop"]
Search = Literal["bfs", "dfs"]
Evaluator = Callable[[str, Trace], "tuple[bool, str] | bool"]
"""Judges a Reflexion attempt's answer: `evaluator(task, trace)` with `trace.final_answer`
set; returns (ok, feedback) or a bool. Feedback reaches the critique prompt."""
PriceSpec = Prices | Callable[[Usage], float]
ToolSearchOption = int | Literal["auto", "off"]
"""`tool_search=`: K tools a step, "auto" (on when the tool list would not fit the model's context window) or "off"; see modes/toolsearch.py."""


def check_option(value: object) -> None:
    """Raise for a `tool_search` value that is not an int >= 1, "auto" or "off"."""
    if value in ("auto", "off"):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"tool_search must be an integer >= 1, 'auto' or 'off', got {value!r}")


class RunStore(Protocol):
    """Where a durable run is journaled (SQLiteStore, PostgresStore)."""

    def start_run(self, run_id: str | None, task: str, mode: str, config: Mapping[str, Any]) -> tuple[str, Journal]: ...


@dataclass(frozen=True, slots=True)
class RunSpec:
    """A run's task, mode, limits and options. None means the mode's default."""

    task: str
    mode: str = "react"
    _: KW_ONLY
    # limits, the same names in every mode
    max_steps: int | None = None
    token_budget: int | None = None
    timeout_s: float | None = None
    max_tokens: int | None = None
    max_replans: int | None = None
    on_parse_error: OnParseError | None = None
    on_repeat: OnRepeat | None = None
    max_nudges: int | None = None
    dialect: Dialect | None = None
    on_tool_error: OnToolError | None = None
    # Reflexion
    max_reflections: int | None = None
    attempt_steps: int | None = None
    evaluator: Evaluator | bool | None = None
    # Tree-of-Thoughts
    search: Search | None = None
    branching: int | None = None
    breadth: int | None = None
    depth: int | None = None
    max_nodes: int | None = None
    threshold: float | None = None
    allow_side_effects: bool | None = None
    # run options: what the run may use and where it is recorded
    tools: tuple[str, ...] | None = None
    approver: Approver | None = None
    on_deny: OnDeny = "observe"
    prompts: PromptSet | None = None
    memory: Memory | None = None
    context_tokens: int | None = None
    output_type: Any = None  # a type, a pydantic model or a JSON Schema dict
    store: RunStore | None = None
    run_id: str | None = None
    journal_meta: Mapping[str, Any] | None = None
    tracer: Any = None  # an OpenTelemetry tracer (the optional dependency's type)
    cost_budget_usd: float | None = None
    prices: PriceSpec | None = None
    tool_search: ToolSearchOption | None = None  # None: "auto" (see modes/toolsearch.py)
    tool_embedder: Embedder | None = None  # fused with BM25 in tool search; the journal keeps its name

    def __post_init__(self) -> None:
        if self.mode not in MODE_SETTINGS:
            raise ValueError(f"mode must be one of {sorted(MODE_SETTINGS)}, got {self.mode!r}")
        if self.tools is not None:  # names, whether given as names or as the Tools themselves
            object.__setattr__(self, "tools", tool_names(self.tools))
        if self.tool_search is not None:
            check_option(self.tool_search)
        foreign = [name for name in _FOREIGN[self.mode] if getattr(self, name) is not None]
        if foreign:
            raise TypeError(f"unknown run option(s) for mode {self.mode!r}: {', '.join(foreign)}")

    def setting(self, name: str) -> Any:
        """The value of a mode setting: given, else the mode's default."""
        value = getattr(self, name)
        return MODE_SETTINGS[self.mode].get(name) if value is None else value

    def limits(self) -> Limits:
        """The limits the run is held to (the mode's defaults filled in)."""
        defaults = MODE_SETTINGS[self.mode]
        given = {name: defaults.get(name) if getattr(self, name) is None else getattr(self, name) for name in _LIMITS}
        return Limits(**{name: value for name, value in given.items() if value is not None})

    def config(self) -> dict[str, Any]:
        """What the journal stores: the mode's settings (defaults filled in) and max_tokens,
        the tool scope, on_deny and tool_search. Code (an evaluator, an approver) is recorded as a flag."""
        config = {name: self.setting(name) for name in MODE_SETTINGS[self.mode]}
        if "evaluator" in config:
            config["evaluator"] = callable(self.evaluator)
        config["max_tokens"] = self.max_tokens
        config["tools"] = None if self.tools is None else list(self.tools)
        config["approver"] = self.approver is not None  # resume needs to know one was used
        config["on_deny"] = self.on_deny
        config["tool_search"] = "auto" if self.tool_search is None else self.tool_search
        if self.tool_embedder is not None:  # code: its name, so a resume can ask for it again
            from loopwright.memory.embedders import embedder_name

            config["tool_embedder"] = embedder_name(self.tool_embedder)
        if self.journal_meta is not None:
            config["meta"] = dict(self.journal_meta)
        return config

    @classmethod
    def from_config(cls, task: str, mode: str, config: Mapping[str, Any], **given: Any) -> RunSpec:
        """The spec a journal's config records (written by `config()`, or by an older
        version: the same names), with `given` replacing what it sets. The recorded
        approver flag, tool set and meta are the journal's own, not options."""
        fields = {k: v for k, v in config.items() if k not in _JOURNAL_ONLY}
        fields.setdefault("tool_search", "off")  # recorded before tool search: it ran with every tool
        fields.update(given)
        if config.get("tool_embedder") and fields.get("tool_embedder") is None:
            raise TypeError(f"this run searched its tools with the embedder {config['tool_embedder']!r}: pass "
                            "tool_embedder= again, or the continued run may load other tools")
        unknown = sorted(fields.keys() - _FIELDS)
        if unknown:
            raise TypeError(f"unknown run option(s): {', '.join(unknown)}")
        return cls(task, mode, **fields)

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)


# Each mode's settings and their defaults (None: no default). Limits a mode ignores are not
# listed; the mode-only settings (_MODE_ONLY) are a TypeError in a mode that does not list them.
_SHARED: Final = {"max_steps": 10, "token_budget": None, "timeout_s": None}
_REACT: Final = {"on_parse_error": "observe", "on_repeat": "nudge", "dialect": "json", "max_nudges": 2,
                 "on_tool_error": "observe"}
MODE_SETTINGS: Final[dict[str, dict[str, Any]]] = {
    "react": {**_SHARED, **_REACT},
    "rewoo": dict(_SHARED),
    "plan_execute": {**_SHARED, "max_replans": 2},
    "reflexion": {**_SHARED, "max_steps": 20, **_REACT, "max_reflections": 2, "attempt_steps": None,
                  "evaluator": None},
    "tot": {**_SHARED, "max_steps": 60, "search": "bfs", "branching": 3, "breadth": 2, "depth": 3,
            "max_nodes": 24, "threshold": 0.5, "allow_side_effects": False},
}
_LIMITS: Final = ("max_steps", "token_budget", "timeout_s", "max_replans", "on_parse_error", "on_repeat", "max_nudges")
_MODE_ONLY: Final = ("max_reflections", "attempt_steps", "evaluator", "search", "branching", "breadth", "depth",
                     "max_nodes", "threshold", "allow_side_effects")
_FOREIGN: Final = {mode: tuple(n for n in _MODE_ONLY if n not in settings) for mode, settings in MODE_SETTINGS.items()}
_JOURNAL_ONLY: Final = frozenset({"approver", "tool_set", "meta", "tool_embedder"})
_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(RunSpec)) - {"task", "mode"}


def scope(tools: Iterable[str] | None) -> tuple[str, ...] | None:
    """A `tools=` argument as the spec holds it."""
    return None if tools is None else tuple(tools)


__all__ = ["MODE_SETTINGS", "Dialect", "Evaluator", "Mode", "OnDeny", "OnToolError", "PriceSpec", "RunSpec",
           "RunStore", "Search", "ToolSearchOption"]
