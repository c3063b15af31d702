"""What the `loopwright` subcommands share: exit codes, the usage error, the subcommand
registry, the flags that pick a model, tools and prompts (one function per concern, so
`run`, `runs resume` and later subcommands take the same flags), building those from
the flags, and the one rule for output paths. Every interface module imports this one;
it imports none of them."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

import loopwright as lw
from loopwright.errors import LoopwrightError
from loopwright.httpguard import TOKEN_ENV, Access, is_loopback
from loopwright.prompting.templates import DEFAULT_PROMPTS, PromptSet

EXIT_ANSWERED = 0
EXIT_NO_ANSWER = 1
EXIT_USAGE = 2

EXIT_CODES_HELP = """\
exit codes:
  0  the run answered (stop reason "final" and a non-empty answer)
  1  the run stopped without an answer (a limit, an error, Ctrl-C)
  2  usage error (bad arguments, tools that cannot be loaded, no model), before any model call

output: the answer alone on stdout (with --json the whole trace as JSON instead);
live steps, the summary and errors on stderr. Output files (--save, --record, --db,
--out): missing parent folders are created before the run starts.
"""

DEFAULT_TOOL_TIMEOUT_S: Final = 60.0
"""The CLI's per-call tool timeout when neither a tool, its registry nor --tool-timeout-s sets one."""


class UsageError(Exception):
    """Bad command-line input: printed without a traceback, exit code 2."""


def open_store(target: str, *, must_exist: bool = False) -> Any:
    """The run journal `--db` names: a `postgresql://` DSN (PostgresStore) or a SQLite
    file path. must_exist: a missing SQLite file is a StoreError instead of a new journal."""
    from loopwright.durable.postgres import PostgresStore, is_postgres_dsn
    from loopwright.durable.sqlite import SQLiteStore
    from loopwright.errors import StoreError

    if is_postgres_dsn(target):
        return PostgresStore(target)
    if must_exist and not Path(target).is_file():
        raise StoreError(f"no run journal at {target} (set --db or $LOOPWRIGHT_DB)")
    return SQLiteStore(target)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line usage errors: `loopwright run: error: ... (see --help)`,
    exit code 2, no usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


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


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _seconds_or_off(text: str) -> float:
    """A positive number of seconds, or 0 for none."""
    return 0.0 if text.strip() in ("0", "0.0", "none", "off") else _seconds(text)


# -- flags, one function per concern ------------------------------------------------------

N_CTX_HELP: Final = "local context size (default: the model's trained context, at most 2048)"


def add_model_args(parser: argparse.ArgumentParser, *, for_resume: bool = False) -> None:
    """The flags that pick the model: the embedded one, a server, or a cassette."""
    parser.add_argument(
        "--model", metavar="PATH_OR_NAME",
        help="a .gguf file for the embedded runtime (default: the bundled SmolLM2-135M), "
        "hf:OWNER/NAME/FILE.gguf for one from the Hugging Face hub (fetched once into its cache), "
        "or with --base-url the server's model name",
    )
    parser.add_argument("--base-url", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument(
        "--api-key", default=os.environ.get("LOOPWRIGHT_API_KEY"),
        help="API key for --base-url (default: $LOOPWRIGHT_API_KEY)",
    )
    parser.add_argument("--no-grammar", action="store_true", help="do not constrain local steps")
    parser.add_argument("--n-ctx", type=_positive_int, default=None, help=N_CTX_HELP)
    parser.add_argument(
        "--n-threads", type=_positive_int, default=None,
        help="threads of the embedded model (default: $LOOPWRIGHT_N_THREADS, else every core)",
    )
    live = "live " if for_resume else ""
    parser.add_argument("--record", metavar="CASSETTE.jsonl", help=f"append every {live}model call here")
    parser.add_argument(
        "--replay", metavar="CASSETTE.jsonl",
        help=f"answer {live}model calls from a recorded cassette instead of a model",
    )


def add_tool_args(parser: argparse.ArgumentParser, *, for_resume: bool = False) -> None:
    """The flags that load the tools and bound each call."""
    default = (
        "default: the tools the run was started with, else the demo tools"
        if for_resume
        else "default: the demo tools lookup and calculate"
    )
    parser.add_argument(
        "--tools", nargs="+", metavar="MODULE:ATTR",
        help="tools to load: a Tool, a function, a list of them or a ToolRegistry; MODULE is "
        f"imported like `python -m` does, from the current folder first ({default})",
    )
    parser.add_argument(
        "--examples", metavar="FILE.json",
        help="tool examples to add to the tools (shown before their own) before the run, as "
        "`loopwright bootstrap` or BootstrapResult.save writes them"
        + (" (default: the file the run was started with)" if for_resume else ""),
    )
    parser.add_argument(
        "--tool-timeout-s", type=_seconds_or_off, default=None, metavar="S",
        help="time limit of each tool call, for tools that set none (default: the registry's "
        f"tool_timeout_s, else {DEFAULT_TOOL_TIMEOUT_S:g}; 0 for none)",
    )


def add_prompt_args(parser: argparse.ArgumentParser, *, for_resume: bool = False) -> None:
    """The flag that replaces prompt templates."""
    default = "the prompts the run was started with" if for_resume else "the built-in ones"
    parser.add_argument(
        "--prompts", metavar="FILE.json|MODULE:ATTR",
        help="prompt templates: a JSON object of PromptSet fields (any subset), or a PromptSet "
        f"or dict at MODULE:ATTR (default: {default})",
    )


# -- building what the flags name ---------------------------------------------------------


def add_access_args(parser: argparse.ArgumentParser) -> None:
    """Who may call a served app (`serve`, `mcp serve`): the token, and the host names and
    page origins allowed beyond the defaults."""
    parser.add_argument(
        "--token", default=os.environ.get(TOKEN_ENV) or None, metavar="T",
        help=f"a secret every request must carry as 'Authorization: Bearer T' (default ${TOKEN_ENV}, "
        "which other users cannot read from the process list); needed to serve a --host that is not loopback",
    )
    parser.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME[:PORT]",
        help="also answer requests for this Host (loopback names on the port and the address "
        "connected to are allowed already); repeatable",
    )
    parser.add_argument(
        "--allow-origin", action="append", default=[], metavar="SCHEME://HOST[:PORT]",
        help="also take requests from pages of this origin (the server's own is allowed already); repeatable",
    )


def serve_access(args: argparse.Namespace, **options: Any) -> Access:
    """The Access the access flags ask for; a usage error for a --host off loopback with no
    token, or a malformed host or origin."""
    if not is_loopback(args.host) and not args.token:
        raise UsageError(f"--host {args.host} is not a loopback address: anyone who reaches it could run "
                         f"tools, so it needs a token (--token or ${TOKEN_ENV}), sent by clients as "
                         "'Authorization: Bearer TOKEN'")
    try:
        return Access(args.token or None, tuple(args.allow_host), tuple(args.allow_origin), **options)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def output_path(value: str, flag: str) -> Path:
    """The one rule for files the CLI writes: missing parent folders are created, before
    the run starts; a path that is a folder, or whose parent cannot be made, is a usage
    error then, not after the run."""
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value!r} is a folder; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {value!r}: cannot create its folder ({exc.strerror or exc})") from None
    if not os.access(path.parent, os.W_OK):
        raise UsageError(f"{flag} {value!r}: its folder is not writable")
    return path


def _import(spec: str, flag: str) -> Any:
    """The value at MODULE:ATTR, importing MODULE with the current folder on sys.path
    first (as `python -m` does), so a module next to the user is found."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{flag} takes MODULE:ATTR, got {spec!r}")
    module = import_module(module_name, flag, spec)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None


def import_module(module_name: str, flag: str, spec: str) -> Any:
    """Import MODULE for `flag spec` as `_import` does; UsageError saying why it failed."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = (
            f" (modules are looked up in the current folder {cwd} and the installed packages; "
            "run from the folder that holds it, or set PYTHONPATH)"
            if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]
            else ""
        )
        raise UsageError(f"cannot import {module_name!r} for {flag} {spec}: {exc}{hint}") from None
    except Exception as exc:  # the module itself failed while importing
        raise UsageError(f"importing {module_name!r} for {flag} {spec} failed: "
                         f"{type(exc).__name__}: {exc}") from None
    return module


def load_tools(specs: Sequence[str] | None, tool_timeout_s: float | None = None) -> lw.ToolRegistry:
    """A registry from `module:attr` specs; the demo tools when there are none.

    tool_timeout_s: the registry's per-call limit for tools that set none (0: none);
    without it a registry that sets none gets DEFAULT_TOOL_TIMEOUT_S."""
    registry = _load_registry(specs)
    if tool_timeout_s is not None:
        registry.tool_timeout_s = tool_timeout_s or None
    elif registry.tool_timeout_s is None:
        registry.tool_timeout_s = DEFAULT_TOOL_TIMEOUT_S
    return registry


def _load_registry(specs: Sequence[str] | None) -> lw.ToolRegistry:
    if not specs:
        from loopwright.interfaces.demo_tools import demo_registry

        return demo_registry()
    if len(specs) == 1:  # a registry given whole keeps its own limits
        value = _import(specs[0], "--tools")
        if isinstance(value, lw.ToolRegistry):
            return value
    registry = lw.ToolRegistry()
    for spec in specs:
        value = _import(spec, "--tools")
        items = list(value) if isinstance(value, (lw.ToolRegistry, list, tuple)) else [value]
        for item in items:
            if not (isinstance(item, lw.Tool) or callable(item)):
                raise UsageError(f"{spec}: {item!r} is not a tool or a function")
            try:
                registry.register(item)
            except LoopwrightError as exc:
                raise UsageError(f"{spec}: {exc}") from None
    return registry


def apply_examples(registry: lw.ToolRegistry, spec: str | None) -> lw.ToolRegistry:
    """The registry with the tool examples of --examples FILE added (a new registry);
    a missing or bad file, or examples for tools that are not loaded, is a usage error."""
    if spec is None:
        return registry
    from loopwright.batch.bootstrap import BootstrapResult
    from loopwright.errors import ExamplesError

    try:
        return BootstrapResult.load(spec).apply(registry)
    except ExamplesError as exc:
        raise UsageError(f"--examples {exc}") from None


_PROMPT_FIELDS: Final = {f.name: f for f in dataclasses.fields(PromptSet)}


def load_prompts(spec: str | None) -> PromptSet | None:
    """The PromptSet named by --prompts: a JSON file of PromptSet fields (any subset), or
    MODULE:ATTR holding a PromptSet or such a dict. Each template may use only the fields
    its built-in counterpart uses, so a typo fails here, not in the middle of a run."""
    if spec is None:
        return None
    value: Any
    if Path(spec).is_file():
        try:
            value = json.loads(Path(spec).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"--prompts {spec!r}: not a JSON file ({exc})") from None
    elif ":" in spec and not spec.lower().endswith(".json"):
        value = _import(spec, "--prompts")
    else:
        raise UsageError(f"--prompts {spec!r}: no such file (give FILE.json or MODULE:ATTR)")
    if isinstance(value, PromptSet):
        value = dataclasses.asdict(value)
    if not isinstance(value, Mapping):
        raise UsageError(f"--prompts {spec}: expected a JSON object or a PromptSet, got {type(value).__name__}")
    unknown = sorted(set(value) - set(_PROMPT_FIELDS))
    if unknown:
        raise UsageError(f"--prompts {spec}: unknown field(s) {', '.join(map(repr, unknown))}; "
                         f"PromptSet has {', '.join(_PROMPT_FIELDS)}")
    changes: dict[str, Any] = {}
    for name, text in value.items():
        default = getattr(DEFAULT_PROMPTS, name)
        if isinstance(default, tuple):
            if not (isinstance(text, list | tuple) and all(isinstance(t, str) for t in text)):
                raise UsageError(f"--prompts {spec}: {name} must be a list of strings")
            changes[name] = tuple(text)
            continue
        if isinstance(default, (bool, int)):  # example_tokens, tool_examples
            if type(text) is not type(default):
                raise UsageError(f"--prompts {spec}: {name} must be {type(default).__name__}, got {type(text).__name__}")
            changes[name] = text
            continue
        if not isinstance(text, str):
            raise UsageError(f"--prompts {spec}: {name} must be a string, got {type(text).__name__}")
        try:
            used = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
        except ValueError as exc:
            raise UsageError(f"--prompts {spec}: {name} is not a valid template ({exc})") from None
        allowed = {f for _, f, _, _ in string.Formatter().parse(default) if f is not None}
        extra = sorted(used - allowed)
        if extra:
            may = ", ".join("{" + a + "}" for a in sorted(allowed)) or "no fields"
            raise UsageError(f"--prompts {spec}: {name} uses {', '.join('{' + e + '}' for e in extra)}; "
                             f"it may use {may}")
        changes[name] = text
    return dataclasses.replace(DEFAULT_PROMPTS, **changes)


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
    if name and name.startswith("hf:"):
        name = str(_hub_model(name))
    if name and not Path(name).is_file():
        raise UsageError(f"--model {name!r} is not a file (a .gguf model is expected)")
    if name:
        with open(name, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            raise UsageError(f"--model {name!r} is not a GGUF model file (it does not start with 'GGUF')")
    try:
        model = lw.models.LlamaCpp(
            name,
            n_ctx=getattr(args, "n_ctx", None),
            n_threads=getattr(args, "n_threads", None),
            grammar=not getattr(args, "no_grammar", False),
        )
        model.llm  # noqa: B018 - load now: a file that is no model is a usage error, not a failed run
    except lw.ModelNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # llama.cpp refused the file
        raise UsageError(f"--model {name or 'default'!r}: cannot load the model ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None
    return model


def _hub_model(ref: str) -> Path:
    """`--model hf:OWNER/NAME/FILE`: the file in the Hugging Face hub cache, fetched into it
    first when it is not there."""
    from loopwright.models.hub import hub_file, parse_hub_ref

    try:
        return hub_file(*parse_hub_ref(ref))
    except (ValueError, lw.ModelError) as exc:
        raise UsageError(f"--model {ref!r}: {exc}") from None
