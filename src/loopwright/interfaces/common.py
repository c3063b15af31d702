"""What the `loopwright` subcommands share: exit codes, the usage error, the subcommand
registry, and building a run's tools and model from command-line flags. Every
interface module imports this one; it imports none of them."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.errors import LoopwrightError

EXIT_ANSWERED = 0
EXIT_NO_ANSWER = 1
EXIT_USAGE = 2

EXIT_CODES_HELP = """\
exit codes:
  0  the run answered (stop reason "final")
  1  the run stopped without an answer (a limit, an error, Ctrl-C)
  2  usage error (bad arguments, tools that cannot be loaded, no model)
"""


class UsageError(Exception):
    """Bad command-line input: printed without a traceback, exit code 2."""


@dataclass(frozen=True)
class Subcommand:
    """A `loopwright <name>` subcommand: `setup` adds its arguments to its parser,
    `handler` runs it and returns the exit code."""

    name: str
    help: str
    setup: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    epilog: str | None = None


SUBCOMMANDS: dict[str, Subcommand] = {}


def add_subcommand(
    name: str,
    help: str,
    setup: Callable[[argparse.ArgumentParser], None],
    handler: Callable[[argparse.Namespace], int],
    *,
    epilog: str | None = None,
) -> None:
    """Register a subcommand (a later registration under the same name replaces it)."""
    SUBCOMMANDS[name] = Subcommand(name, help, setup, handler, epilog)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def load_tools(specs: Sequence[str] | None) -> lw.ToolRegistry:
    """A registry from `module:attr` specs; the demo tools when there are none."""
    if not specs:
        from loopwright.interfaces.demo_tools import demo_registry

        return demo_registry()
    registry = lw.ToolRegistry()
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise UsageError(f"--tools takes MODULE:ATTR, got {spec!r}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UsageError(f"cannot import {module_name!r} for --tools {spec}: {exc}") from None
        try:
            value: Any = getattr(module, attr)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
        items = list(value) if isinstance(value, (lw.ToolRegistry, list, tuple)) else [value]
        for item in items:
            if not (isinstance(item, lw.Tool) or callable(item)):
                raise UsageError(f"{spec}: {item!r} is not a tool or a function")
            try:
                registry.register(item)
            except LoopwrightError as exc:
                raise UsageError(f"{spec}: {exc}") from None
    return registry


def make_model(args: argparse.Namespace) -> Any:
    """The policy the run uses: a cassette with --replay, a server with --base-url, else
    the embedded model; wrapped in a Recorder with --record. Other subcommands (`runs
    resume`) call it with a subset of run's flags; absent ones take run's defaults."""
    record = getattr(args, "record", None)
    model = _base_model(args)
    return lw.models.Recorder(model, record) if record else model


def _base_model(args: argparse.Namespace) -> Any:
    replay = getattr(args, "replay", None)
    base_url = getattr(args, "base_url", None)
    name = getattr(args, "model", None)
    dialect = getattr(args, "dialect", "json")
    if replay:
        if not Path(replay).is_file():
            raise UsageError(f"--replay {replay!r} is not a file")
        try:
            return lw.models.Replay(replay)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if base_url:
        if not name:
            raise UsageError("--base-url needs --model NAME (the server's model name)")
        return lw.models.OpenAICompatible(
            base_url,
            name,
            getattr(args, "api_key", None),
            mode="chat" if dialect == "native" else "completion",
        )
    if dialect == "native":
        raise UsageError(
            "--dialect native needs --base-url: the embedded model has no tool calling"
        )
    if name and not Path(name).is_file():
        raise UsageError(f"--model {name!r} is not a file (a .gguf model is expected)")
    try:
        return lw.models.LlamaCpp(
            name,
            n_ctx=getattr(args, "n_ctx", 2048),
            grammar=not getattr(args, "no_grammar", False),
        )
    except lw.ModelNotFoundError as exc:
        raise UsageError(str(exc)) from None
