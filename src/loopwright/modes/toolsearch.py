"""Tool search: a run with many tools shows the model only the K most relevant to its task,
plus `search_tools(query)`, a built-in tool that loads others; a loaded tool stays loaded.

Search keeps the prompt small; it does not decide what may run. The registry (cut to a
run's `tools=` scope) is what a run may call: a call by name to a registered, in-scope
tool that is not loaded loads it and runs it (`load_called`), recorded in its step's
meta["tools_loaded"] like a search's finds.

The selection is data the machine computes (no I/O): the run's registry is narrowed to the
loaded tools, so the prompt's tool list, the native tool list and the embedded model's
grammar (built from `ModelRequest.tools`) offer the same set. ReAct offers `search_tools`;
ReWOO, plan-execute, Reflexion and Tree-of-Thoughts plan or branch from the task alone, so
they get the K tools and no search (and load what their plans or steps name). The index
(BM25 over each tool's name, description, parameter names and examples, fused by
reciprocal rank with dense recall when an embedder is given) is built once per registry
and kept in its memo, so a run pays only for its queries. Ranking is deterministic (ties
go to registration order), so a resumed or forked run, which replays the same model
replies over the same tools, loads the same tools; each load is journaled in its step's
meta ("tools_loaded") and the whole set in `trace.meta["tool_search"]`.

`tool_search="auto"` (the default) decides from the model's context window, as the policy
reports it (`context_window`: LlamaCpp's n_ctx, or what an OpenAI-compatible model was
told): search is on, with K=AUTO_K, when the whole tool list as the prompt renders it
(estimated at 3 bytes a token, an over-count for English) would take more than AUTO_SHARE
of the window. The rest of the window holds the instructions and worked examples (about
200 to 650 tokens), the task, the steps and the reply (a grammar-constrained step reserves
up to 512 tokens). A policy that reports no window (a scripted policy, a plain function,
a server whose window was not given) gets every tool. Measured on BFCL's function documents
(benchmarks/tool_search.py, the sweep's "auto" column): a tool's entry averages about 60
estimated tokens, so with the embedded model's 2,048-token window search is on in 0 of 100
random registries of 12 tools, 9 of 15 tools, 97 of 20 and all from 25; with a 128k-token
window it would take about a thousand tools.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

from loopwright.modes.spec import RunSpec, ToolSearchOption
from loopwright.prompts import describe_tools
from loopwright.tools.registry import Tool, ToolRegistry
from loopwright.trace import estimate_tokens

if TYPE_CHECKING:
    from loopwright.memory.embedders import Embedder
    from loopwright.modes.context import RunContext

SEARCH_TOOL: Final = "search_tools"
AUTO_K: Final = 10
AUTO_SHARE: Final = 0.5
""""auto" turns search on when the whole tool list would take more than this share of the window."""
PER_SEARCH: Final = 5
"""Tools one `search_tools` call loads at most (fewer when K is smaller)."""
_DEPTH: Final = 50  # each ranking's depth in the fusion, as HybridMemory's default


def context_window(policy: object) -> int | None:
    """The context window `policy` reports (its `context_window`, in tokens), or None."""
    window = getattr(policy, "context_window", None)
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return None
    return window


def list_tokens(registry: ToolRegistry) -> int:
    """The estimated tokens of the registry's whole tool list as a prompt renders it."""
    return registry.memo("tool_list_tokens", lambda reg: estimate_tokens(describe_tools(reg.schemas())))


def resolve(option: ToolSearchOption | None, registry: ToolRegistry, window: int | None) -> int | None:
    """K for a run over `registry` by a model with a `window`-token context (None: it
    reports none), or None when search is off."""
    count = len(registry)
    if option is None or option == "auto":
        if window is None or count <= AUTO_K:
            return None
        return AUTO_K if list_tokens(registry) > window * AUTO_SHARE else None
    if option == "off":
        return None
    return option if option < count else None  # K at least every tool: nothing to leave out


_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS: Final = re.compile(r"[._\-/]+")


def tool_document(tool: Tool) -> str:
    """What the index reads of a tool: its name as words (snake, dotted, camel case split),
    description, parameter names and descriptions, and its examples' questions."""
    name = _CAMEL.sub(" ", _SEPARATORS.sub(" ", tool.name))
    parts = [name, tool.name, tool.description]
    properties = tool.parameters.get("properties") or {}
    for param, spec in properties.items():
        parts.append(_CAMEL.sub(" ", str(param).replace("_", " ")))
        if isinstance(spec, Mapping) and isinstance(spec.get("description"), str):
            parts.append(spec["description"])
    parts += [e.question for e in tool.examples if e.question]
    return "\n".join(p for p in parts if p)


def as_words(text: str) -> str:
    """Text plus the words of its snake_case and camelCase names ("get_stock_price" also
    reads "get stock price"): the index's tokenizer keeps such a name whole, and a query
    that names a tool should meet the words of its document."""
    split = [_CAMEL.sub(" ", w.replace("_", " ")) for w in _NAME.findall(text) if "_" in w or _CAMEL.search(w)]
    return text + ("\n" + " ".join(split) if split else "")


_NAME: Final = re.compile(r"\w+")


class ToolIndex:
    """A registry's tools, ranked for a query by BM25, fused with dense recall (reciprocal
    rank fusion) when an embedder is given. Built once: see `tool_index`."""

    def __init__(self, registry: ToolRegistry, embedder: Embedder | None = None) -> None:
        from loopwright.memory.lexical import BM25Memory  # numpy and bm25s: only when searching

        self.names = registry.names
        documents = [tool_document(t) for t in registry]
        self.lexical = BM25Memory()
        self.lexical.add_many(documents)
        self.lexical.rebuild()  # one batch index: queries never scan a delta segment
        self.dense: Any = None
        if embedder is not None:
            from loopwright.memory.semantic import SemanticMemory

            self.dense = SemanticMemory(embedder)
            self.dense.add_many(documents)

    def rank(self, query: str, k: int, exclude: Collection[str] = (),
             within: Collection[str] | None = None) -> list[str]:
        """The names of the k tools best matching `query` that are not in `exclude` (and
        are in `within`, a run's tool scope), best first; only tools that share a word
        with it (or any, fused with dense recall)."""
        depth = len(self.names) if within is not None else max(k + len(exclude), _DEPTH)
        query = as_words(query)  # the document has the name's words: the query gets them too
        lexical = [i for i, _ in self.lexical.ranked(query, depth)]
        if self.dense is not None:
            from loopwright.memory.hybrid import reciprocal_rank_fusion

            dense = [r.id for r in self.dense.recall(query, depth)]
            order = [i for i, _ in reciprocal_rank_fusion([lexical, dense])]
        else:
            order = lexical
        names = self.names
        found = (names[i] for i in order)
        return [n for n in found if n not in exclude and (within is None or n in within)][:k]


def tool_index(registry: ToolRegistry, embedder: Embedder | None = None) -> ToolIndex:
    """The registry's index, built on first use and kept until the next `register`."""
    from loopwright.memory.embedders import embedder_name

    key = ("tool_index", None if embedder is None else embedder_name(embedder))
    return registry.memo(key, lambda reg: ToolIndex(reg, embedder))


def _no_direct_call(query: str) -> str:
    return "search_tools is answered by the run loop; it has nothing to run here"


SEARCH_DESCRIPTION: Final = (
    "Find and load more tools by what they do. Give a few words naming the action or the "
    "data you need; the tools found are listed with their arguments and can be called next."
)


def search_tool() -> Tool:
    """The `search_tools(query)` tool as the model sees it (the machine answers it)."""
    return Tool.from_schema(
        SEARCH_TOOL, SEARCH_DESCRIPTION,
        {"type": "object", "properties": {"query": {"type": "string", "description": "what the tool does"}},
         "required": ["query"]},
        _no_direct_call,
    )  # fmt: skip


class ToolSelection:
    """One run's loaded tools: the K chosen for its task, then each search's finds."""

    def __init__(self, registry: ToolRegistry, k: int, index: ToolIndex, *, searchable: bool) -> None:
        if SEARCH_TOOL in registry and searchable:
            raise ValueError(f"a registry with its own {SEARCH_TOOL!r} tool cannot use tool_search")
        self.full = registry
        self.k = k
        self.index = index
        # an index of a larger registry (the one a `tools=` scope was cut from) ranks within the scope
        self.within = None if index.names == registry.names else frozenset(registry.names)
        self.searchable = searchable
        self.loaded: list[str] = []
        self._search = search_tool() if searchable else None

    def choose(self, task: str) -> list[str]:
        """Load the K tools most relevant to the task (filled in registration order when
        fewer share a word with it, so a run always starts with K)."""
        chosen = self.index.rank(task, self.k, within=self.within)
        if len(chosen) < self.k:
            taken = set(chosen)
            chosen += [n for n in self.full.names if n not in taken][: self.k - len(chosen)]
        self.loaded += chosen
        return chosen

    def load(self, name: str) -> bool:
        """Load a tool the model called by name, if it is registered (in the run's scope)
        and not loaded yet; whether it was loaded now."""
        if name in self.loaded or name not in self.full or name == SEARCH_TOOL:
            return False
        self.loaded.append(name)
        return True

    def search(self, query: str) -> tuple[list[str], str]:
        """Load the tools best matching `query` (at most min(K, PER_SEARCH)); return them
        and the observation that lists them for the model."""
        found = self.index.rank(query, min(self.k, PER_SEARCH), exclude=set(self.loaded), within=self.within)
        self.loaded += found
        if not found:
            return [], f"No other tool matches {query!r}; try other words."
        listing = describe_tools(self.full[n].schema() for n in found)
        return found, f"Loaded {len(found)} tool(s), callable from now on:\n{listing}"

    def registry(self) -> ToolRegistry:
        """The loaded tools (and `search_tools` last, when searchable) as a registry."""
        registry = self.full.subset(self.loaded)
        if self._search is not None:
            registry.register(self._search)
        return registry

    def record(self) -> dict[str, Any]:
        return {"k": self.k, "tools": len(self.full), "loaded": list(self.loaded)}


def begin(ctx: RunContext, spec: RunSpec, *, searchable: bool) -> ToolSelection | None:
    """Narrow the run to the K tools most relevant to its task (None, and the run keeps
    every tool, when search is off for it)."""
    k = resolve(spec.tool_search, ctx.registry, context_window(ctx.policy))
    if k is None:
        return None
    index = tool_index(ctx.unscoped, spec.tool_embedder)  # built once, not once per scoped run
    selection = ToolSelection(ctx.registry, k, index, searchable=searchable)
    selection.choose(ctx.task)
    narrow(ctx, selection)
    return selection


def narrow(ctx: RunContext, selection: ToolSelection) -> None:
    """Point the run at the loaded tools (its prompt list, schemas and execution)."""
    ctx.use_registry(selection.registry())
    ctx.trace.meta["tool_search"] = selection.record()


def load_called(ctx: RunContext, selection: ToolSelection | None, name: str) -> list[str]:
    """Before a call of `name`: load it for the rest of the run when it is a registered,
    in-scope tool that is not loaded (the run's tools then include it); the tools loaded,
    for the step's meta["tools_loaded"] (empty when nothing was)."""
    if selection is None or not selection.load(name):
        return []
    narrow(ctx, selection)
    return [name]


def query_of(args: Any) -> str:
    """The query of a `search_tools` call: its `query` argument, else its one text value."""
    if isinstance(args, Mapping):
        value = args.get("query", args.get("input"))
        if isinstance(value, str):
            return value
        texts = [v for v in args.values() if isinstance(v, str)]
        return " ".join(texts)
    return str(args)


__all__ = ["AUTO_K", "AUTO_SHARE", "PER_SEARCH", "SEARCH_TOOL", "ToolIndex", "ToolSelection", "as_words", "begin",
           "context_window", "list_tokens", "load_called", "narrow", "query_of", "resolve", "search_tool",
           "tool_document", "tool_index"]
