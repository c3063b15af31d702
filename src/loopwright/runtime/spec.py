"""RunSpec: what a run starts from. `lw.run` and the other front doors build one from their
options (`RunOptions`, the same names as RunSpec's fields); the journal stores its JSON part
(`config()`), and `resume` and `fork` rebuild it from there (`from_config`), so a run is
started one way whatever started it.

Options come flat (`max_steps=8`) or grouped: `limits=lw.Limits(...)` for what the run may
spend, `settings=lw.ReActSettings(...)` (or ToTSettings, ...) for its mode's own settings. A
settings object checks its values when made and is a TypeError in a mode it is not for. Flat,
a ReAct setting or max_replans means nothing to some modes and is accepted and ignored there,
so one set of keywords works in every mode; Reflexion's and Tree-of-Thoughts' own settings
given flat to another mode are a TypeError. A new option is a field of RunSpec and of
RunOptions (a test keeps the two equal), and its use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, InitVar, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, Protocol, TypedDict, cast, get_args

from loopwright.guards import Limits, OnParseError, OnRepeat, RunLimits, check_limit
from loopwright.modes import plan_execute, react, reflexion, rewoo, tot
from loopwright.modes.machine import (
    Evaluator,
    Journal,
    RunView,
    Settings,
    StepGen,
    ToolSearchOption,
)
from loopwright.modes.toolsearch import check_option
from loopwright.pricing import Prices
from loopwright.prompting.templates import PromptSet
from loopwright.runtime.guardrails import Guardrail, guardrail_list
from loopwright.runtime.retry import Retry, check_retry
from loopwright.safety import Approver
from loopwright.tools.toolset import Scope, tool_names
from loopwright.trace import Usage

if TYPE_CHECKING:  # memory imports numpy: only a run with a context budget loads it
    from loopwright.memory.embedders import Embedder
    from loopwright.memory.tiered import Memory

Dialect = Literal["json", "brackets", "native"]
OnToolError = Literal["observe", "reflect"]
OnDeny = Literal["observe", "stop"]
Search = Literal["bfs", "dfs"]
PriceSpec = Prices | Callable[[Usage], float]


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReActSettings:
    """ReAct's own settings (a Reflexion attempt is a ReAct run: they hold there too). None
    leaves the default.

    on_parse_error: "observe" (the model reads what was wrong) or "stop". on_repeat: what a
    repeated identical call gets: "nudge", "stop" or "off". max_nudges: identical calls
    nudged in a row before the run stops with "repeated_call". dialect: the step format,
    "json", "brackets" or "native" (the backend's tool calling). on_tool_error: "observe",
    or "reflect" (a critique after a tool's error)."""

    modes: ClassVar[tuple[str, ...]] = ("react", "reflexion")
    on_parse_error: OnParseError | None = None
    on_repeat: OnRepeat | None = None
    max_nudges: int | None = None
    dialect: Dialect | None = None
    on_tool_error: OnToolError | None = None

    def __post_init__(self) -> None:
        if self.on_parse_error is not None and self.on_parse_error not in ("observe", "stop"):
            raise ValueError(f"on_parse_error must be 'observe' or 'stop', got {self.on_parse_error!r}")
        if self.on_repeat is not None and self.on_repeat not in ("nudge", "stop", "off"):
            raise ValueError(f"on_repeat must be 'nudge', 'stop' or 'off', got {self.on_repeat!r}")
        if self.max_nudges is not None:
            check_limit("max_nudges", self.max_nudges, 0)
        if self.dialect is not None:
            _check_choice("dialect", self.dialect, get_args(Dialect))
        if self.on_tool_error is not None and self.on_tool_error not in get_args(OnToolError):
            raise ValueError(f"on_tool_error must be 'observe' or 'reflect', got {self.on_tool_error!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReflexionSettings(ReActSettings):
    """Reflexion's settings: its attempts' (ReAct's) and its own. max_reflections: critiques
    before the run gives up. attempt_steps: model calls one attempt may make (default: an
    even share of max_steps). evaluator: judges an attempt's answer (see `Evaluator`)."""

    modes: ClassVar[tuple[str, ...]] = ("reflexion",)
    max_reflections: int | None = None
    attempt_steps: int | None = None
    evaluator: Evaluator | bool | None = None  # a journal records a bool: whether there was one

    def __post_init__(self) -> None:
        ReActSettings.__post_init__(self)
        if self.max_reflections is not None:
            check_limit("max_reflections", self.max_reflections, 0)
        if self.attempt_steps is not None and (
            isinstance(self.attempt_steps, bool) or not isinstance(self.attempt_steps, int) or self.attempt_steps < 1
        ):
            raise ValueError(f"attempt_steps must be a positive integer or None, got {self.attempt_steps!r}")
        if not isinstance(self.evaluator, bool | None) and not callable(self.evaluator):
            raise TypeError(f"evaluator must be a callable (task, trace) -> (ok, feedback), got {self.evaluator!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanExecuteSettings:
    """Plan-execute's setting: max_replans, the replans a run may make after a failed plan."""

    modes: ClassVar[tuple[str, ...]] = ("plan_execute",)
    max_replans: int | None = None

    def __post_init__(self) -> None:
        if self.max_replans is not None:
            check_limit("max_replans", self.max_replans, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToTSettings:
    """Tree-of-Thoughts' settings. search: "bfs" or "dfs". branching: candidates per expanded
    node. breadth: nodes BFS keeps per level. depth: the longest path. max_nodes: nodes the
    search may make. threshold: the least score (0 to 1) a node needs to be expanded, or an
    answer to be accepted. allow_side_effects: let branches call tools that change things."""

    modes: ClassVar[tuple[str, ...]] = ("tot",)
    search: Search | None = None
    branching: int | None = None
    breadth: int | None = None
    depth: int | None = None
    max_nodes: int | None = None
    threshold: float | None = None
    allow_side_effects: bool | None = None

    def __post_init__(self) -> None:
        if self.search is not None and self.search not in get_args(Search):
            raise ValueError(f"search must be 'bfs' or 'dfs', got {self.search!r}")
        for name in ("branching", "breadth", "depth", "max_nodes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        threshold = self.threshold
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 <= threshold <= 1.0
        ):
            raise ValueError(f"threshold must be a number from 0 to 1, got {threshold!r}")
        if self.allow_side_effects is not None and not isinstance(self.allow_side_effects, bool):
            raise TypeError(f"allow_side_effects must be a bool, got {self.allow_side_effects!r}")


ModeSettings = ReActSettings | PlanExecuteSettings | ToTSettings
"""What `settings=` takes: the settings object of the run's mode (ReflexionSettings is a ReActSettings)."""


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
    tools: Scope | None = None  # held as a tuple of the names
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
    guardrails: Sequence[Guardrail] | None = None  # held as a tuple; the journal keeps their names
    retry: Retry | None = None  # transient model and tool failures tried again (runtime/retry.py)
    # the same options grouped: spread into the fields above when the spec is made
    limits: InitVar[Limits | None] = None
    settings: InitVar[ModeSettings | None] = None

    def __post_init__(self, limits: Limits | None, settings: ModeSettings | None) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}, got {self.mode!r}")
        for name, value in spread(self.mode, limits, settings).items():
            given = getattr(self, name)
            if given is not None and given != value:
                raise TypeError(f"{name} given twice, {given!r} and {value!r}")
            object.__setattr__(self, name, value)
        if self.on_deny is None:  # a caller passing its own default through
            object.__setattr__(self, "on_deny", "observe")
        if self.tools is not None:  # names, whether given as names or as the Tools themselves
            object.__setattr__(self, "tools", tool_names(self.tools))
        if self.tool_search is not None:
            check_option(self.tool_search)
        if self.guardrails is not None:
            object.__setattr__(self, "guardrails", guardrail_list(self.guardrails) or None)
        object.__setattr__(self, "retry", check_retry(self.retry))
        own = MODES[self.mode].settings
        foreign = [name for name in sorted(_MODE_ONLY) if name not in own and getattr(self, name) is not None]
        if foreign:
            raise TypeError(f"unknown run option(s) for mode {self.mode!r}: {', '.join(foreign)}")
        for cls, names in _CHECKED:  # Limits and each settings class check the values given flat
            flat = {name: value for name in names if (value := getattr(self, name)) is not None}
            if flat:
                cls(**flat)

    def tool_scope(self) -> tuple[str, ...] | None:
        """The names of the tools this run may use (`tools=`), None for all of them."""
        return cast("tuple[str, ...] | None", self.tools)  # made names in __post_init__

    def setting(self, name: str) -> Any:
        """The value of a mode setting: given, else the mode's default."""
        value = getattr(self, name)
        return MODES[self.mode].settings.get(name) if value is None else value

    def run_limits(self) -> RunLimits:
        """The limits the run is held to (the mode's defaults filled in)."""
        return RunLimits(**{name: value for name in _RUN_LIMITS if (value := self.setting(name)) is not None})

    def config(self) -> dict[str, Any]:
        """What the journal stores: the mode's settings (defaults filled in) and max_tokens,
        the tool scope, on_deny and tool_search. Code (an evaluator, an approver) is recorded as a flag."""
        config = {name: self.setting(name) for name in MODES[self.mode].settings}
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
        if self.guardrails:  # code: their names, so a resume can ask for them again
            config["guardrails"] = [g.name for g in self.guardrails]
        if self.retry is not None:
            config["retry"] = self.retry.config()
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
        grouped = spread(mode, given.pop("limits", None), given.pop("settings", None))
        twice = sorted(grouped.keys() & {k for k, v in given.items() if v is not None})
        if twice:
            raise TypeError(f"given twice, flat and grouped: {', '.join(twice)}")
        fields.update(given)
        fields.update(grouped)
        if config.get("tool_embedder") and fields.get("tool_embedder") is None:
            raise TypeError(f"this run searched its tools with the embedder {config['tool_embedder']!r}: pass "
                            "tool_embedder= again, or the continued run may load other tools")
        if config.get("guardrails") and not fields.get("guardrails"):
            raise TypeError(f"this run had the guardrails {', '.join(config['guardrails'])}: pass guardrails= "
                            "again, or the continued run would go unchecked")
        unknown = sorted(fields.keys() - _FIELDS)
        if unknown:
            raise TypeError(f"unknown run option(s): {', '.join(unknown)}")
        return cls(task, mode, **fields)

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)


class ResumeOptions(TypedDict, total=False):
    """The options a continued run (`resume`, `fork`) may change: RunOptions but the store,
    the run's id, its approver (their own arguments there) and the journal's meta."""

    max_steps: int | None
    token_budget: int | None
    timeout_s: float | None
    max_tokens: int | None
    max_replans: int | None
    on_parse_error: OnParseError | None
    on_repeat: OnRepeat | None
    max_nudges: int | None
    dialect: Dialect | None
    on_tool_error: OnToolError | None
    max_reflections: int | None
    attempt_steps: int | None
    evaluator: Evaluator | bool | None
    search: Search | None
    branching: int | None
    breadth: int | None
    depth: int | None
    max_nodes: int | None
    threshold: float | None
    allow_side_effects: bool | None
    tools: Scope | None
    on_deny: OnDeny
    prompts: PromptSet | None
    memory: Memory | None
    context_tokens: int | None
    output_type: Any
    tracer: Any
    cost_budget_usd: float | None
    prices: PriceSpec | None
    tool_search: ToolSearchOption | None
    tool_embedder: Embedder | None
    guardrails: Sequence[Guardrail] | None
    retry: Retry | None
    limits: Limits | None
    settings: ModeSettings | None


class RunOptions(ResumeOptions, total=False):
    """The options of a run, as keywords: `lw.run(task, policy, registry, mode, **options)`
    and every function that starts one. The same names and types as RunSpec's fields (a
    test keeps them equal); see RunSpec, Limits and the settings classes."""

    approver: Approver | None
    store: RunStore | None
    run_id: str | None
    journal_meta: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Mode:
    """A mode the runtime runs (see `register_mode`): its step machine, the check of its
    settings made before a run is journaled, and its settings with their defaults (the
    limits every mode takes first: max_steps, token_budget, timeout_s)."""

    machine: Callable[[RunView, Settings], StepGen]
    check: Callable[[Settings], None]
    settings: Mapping[str, Any]


MODES: Final[dict[str, Mode]] = {}
"""The modes `run(..., mode=...)` knows, by name."""
_SHARED: Final = {"max_steps": 10, "token_budget": None, "timeout_s": None}


def register_mode(name: str, machine: Callable[[RunView, Settings], StepGen], *,
                  check: Callable[[Settings], None] | None = None, settings: Mapping[str, Any] | None = None) -> None:
    """Make `name` a mode that run, arun, iter_events, resume and fork run: `machine(view,
    settings)` is its step machine (modes/machine.py says what it may yield); `check(spec)`
    raises for options it cannot run with, before anything is journaled; `settings`: the
    RunSpec fields it reads besides the limits, with their defaults (`max_steps` here
    changes its default step cap). The journal records them, so a resumed run reads the
    same values. Registering a name again replaces it."""
    MODES[name] = Mode(machine, check or _no_check, {**_SHARED, **(settings or {})})


def _no_check(spec: Settings) -> None:
    """A mode with nothing to check beyond the settings classes' own checks."""


_REACT: Final = {"on_parse_error": "observe", "on_repeat": "nudge", "dialect": "json", "max_nudges": 2,
                 "on_tool_error": "observe"}
register_mode("react", react.machine, check=react.check, settings=_REACT)
register_mode("rewoo", rewoo.machine, check=rewoo.check)
register_mode("plan_execute", plan_execute.machine, check=plan_execute.check, settings={"max_replans": 2})
register_mode("reflexion", reflexion.machine, check=reflexion.check,
              settings={"max_steps": 20, **_REACT, "max_reflections": 2, "attempt_steps": None, "evaluator": None})
register_mode("tot", tot.machine, check=tot.check,
              settings={"max_steps": 60, "search": "bfs", "branching": 3, "breadth": 2, "depth": 3, "max_nodes": 24,
                        "threshold": 0.5, "allow_side_effects": False})
_SETTINGS: Final = (ReActSettings, ReflexionSettings, PlanExecuteSettings, ToTSettings)
_REACT_NAMES: Final = frozenset(f.name for f in fields(ReActSettings))
_OWN: Final = {cls: tuple(f.name for f in fields(cls) if cls is ReActSettings or f.name not in _REACT_NAMES)
               for cls in _SETTINGS}
"""Each settings class's own fields (ReflexionSettings' without the ReAct ones it inherits)."""
_CHECKED: Final = ((Limits, tuple(f.name for f in fields(Limits))), *_OWN.items())
_RUN_LIMITS: Final = tuple(f.name for f in fields(RunLimits) if f.name in RunSpec.__dataclass_fields__)
_MODE_ONLY: Final = frozenset(_OWN[ReflexionSettings] + _OWN[ToTSettings])
"""Settings that are a TypeError in another mode even when given flat."""
_JOURNAL_ONLY: Final = frozenset({"approver", "tool_set", "meta", "tool_embedder", "guardrails"})
_FIELDS: Final = frozenset(RunSpec.__dataclass_fields__) - {"task", "mode"}
"""What RunSpec takes besides the task and mode (its fields and `limits`, `settings`)."""


def spread(mode: str, limits: Limits | None, settings: ModeSettings | None) -> dict[str, Any]:
    """The flat options `limits` and `settings` hold (their values not None). Raises
    TypeError for a settings object that is not for `mode`."""
    flat: dict[str, Any] = {}
    if limits is not None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be an lw.Limits, got {type(limits).__name__}")
        flat.update((f.name, v) for f in fields(limits) if (v := getattr(limits, f.name)) is not None)
    if settings is not None:
        if not isinstance(settings, _SETTINGS) or mode not in type(settings).modes:
            accepted = " or ".join(cls.__name__ for cls in _SETTINGS if mode in cls.modes) or "none (it has no settings)"
            raise TypeError(f"settings {type(settings).__name__} are not for mode {mode!r}; it takes {accepted}")
        flat.update((f.name, v) for f in fields(settings) if (v := getattr(settings, f.name)) is not None)
    return flat


__all__ = ["MODES", "Mode", "Dialect", "Evaluator", "ModeSettings", "OnDeny", "OnToolError",
           "PlanExecuteSettings", "PriceSpec", "ReActSettings", "ReflexionSettings", "ResumeOptions", "RunOptions", "RunSpec", "RunStore", "register_mode",
           "Search", "ToTSettings", "ToolSearchOption"]
