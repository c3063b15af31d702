"""Tool search: a run with many tools shows the model only the K most relevant to its task,
plus `search_tools(query)`, a built-in tool that loads others; a loaded tool stays loaded.

Search keeps the prompt small; it does not decide what may run. The registry (cut to a
run's `tools=` scope) is what a run may call: a call by name to a registered, in-scope
tool that is not loaded loads it and runs it (`load_called`), recorded in its step's
meta["tools_loaded"] like a search's finds.

The selection is data the machine computes (no I/O): a dense embedder is asked through the
driver (an `Embed` request: the tools' documents once per registry, then each query), and
the run's registry is narrowed to the loaded tools, so the prompt's tool list, the native tool list and the embedded model's
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
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from loopwright.modes.machine import (
    Embed,
    Machine,
    Record,
    RunView,
    Settings,
    StepGen,
    ToolSearchOption,
    UseTools,
)
from loopwright.prompting.templates import describe_tools
from loopwright.tools.registry import Tool, ToolRegistry
from loopwright.trace import estimate_tokens

if TYPE_CHECKING:
    from loopwright.memory.embedders import Embedder

SEARCH_TOOL: Final = "search_tools"
AUTO_K: Final = 10
AUTO_SHARE: Final = 0.5
""""auto" turns search on when the whole tool list would take more than this share of the window."""
PER_SEARCH: Final = 5
"""Tools one `search_tools` call loads at most (fewer when K is smaller)."""
_DEPTH: Final = 50  # each ranking's depth in the fusion, as HybridMemory's default


def check_option(value: object) -> None:
    """Raise for a `tool_search` value that is not an int >= 1, "auto" or "off"."""
    if value in ("auto", "off"):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"tool_search must be an integer >= 1, 'auto' or 'off', got {value!r}")


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
    rank fusion) when a dense ranking is given, or an embedder to this index. Built once:
    see `tool_index`. A run's machine asks its embedder through the driver (`dense_ranking`)."""

    def __init__(self, registry: ToolRegistry, embedder: Embedder | None = None) -> None:
        from loopwright.memory.lexical import BM25Memory  # numpy and bm25s: only when searching

        self.names = registry.names
        self.documents = [tool_document(t) for t in registry]
        self.lexical = BM25Memory()
        self.lexical.add_many(self.documents)
        self.lexical.rebuild()  # one batch index: queries never scan a delta segment
        self.dense: dict[str, Any] = {}  # by embedder name: the documents' SemanticMemory
        self.embedder = embedder
        if embedder is not None:  # used directly (not by a run): the embedder is called here
            self.keep_dense(embedder, embedder.embed(self.documents))

    def keep_dense(self, embedder: Embedder, vectors: Any) -> Any:
        """Keep the documents' vectors by `embedder` for dense recall; the memory kept."""
        from loopwright.memory.embedders import embedder_name
        from loopwright.memory.semantic import SemanticMemory

        memory = SemanticMemory(embedder)
        memory.add_embeddings(self.documents, vectors)
        self.dense[embedder_name(embedder)] = memory
        return memory

    def depth(self, k: int, exclude: Collection[str] = (), within: Collection[str] | None = None) -> int:
        """How deep each ranking goes in the fusion for a query of `rank`."""
        return len(self.names) if within is not None else max(k + len(exclude), _DEPTH)

    def rank(self, query: str, k: int, exclude: Collection[str] = (),
             within: Collection[str] | None = None, dense: Sequence[int] | None = None) -> list[str]:
        """The names of the k tools best matching `query` that are not in `exclude` (and
        are in `within`, a run's tool scope), best first; only tools that share a word
        with it (or any, fused with the `dense` ranking of the documents, or with this
        index's embedder's recall)."""
        depth = self.depth(k, exclude, within)
        query = as_words(query)  # the document has the name's words: the query gets them too
        lexical = [i for i, _ in self.lexical.ranked(query, depth)]
        if dense is None and self.embedder is not None:
            from loopwright.memory.embedders import embedder_name

            dense = [r.id for r in self.dense[embedder_name(self.embedder)].recall(query, depth)]
        if dense is not None:
            from loopwright.memory.hybrid import reciprocal_rank_fusion

            order = [i for i, _ in reciprocal_rank_fusion([lexical, list(dense)])]
        else:
            order = lexical
        names = self.names
        found = (names[i] for i in order)
        return [n for n in found if n not in exclude and (within is None or n in within)][:k]


def tool_index(registry: ToolRegistry) -> ToolIndex:
    """The registry's index, built on first use and kept until the next `register`."""
    return registry.memo(("tool_index", None), ToolIndex)


def dense_ranking(index: ToolIndex, embedder: Embedder | None, query: str, depth: int) -> Machine[list[int] | None]:
    """The documents' order by `embedder`'s recall of `query` (None without one). The
    driver calls the embedder (Embed): for the documents once per index, then the query."""
    if embedder is None:
        return None
    from loopwright.memory.embedders import embedder_name

    memory = index.dense.get(embedder_name(embedder))
    if memory is None:
        memory = index.keep_dense(embedder, _vectors((yield Embed(embedder, index.documents))))
    vector = _vectors((yield Embed(embedder, [as_words(query)])))
    return [r.id for r in memory.recall(vector, depth)]


def _vectors(answer: Any) -> Any:
    """The vectors an Embed was answered with; what the embedder raised is raised here (a
    defect in user code: the run ends with an error step)."""
    if isinstance(answer, Exception):
        raise answer
    return answer


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
    )


class ToolSelection:
    """One run's loaded tools: the K chosen for its task, then each search's finds."""

    def __init__(self, registry: ToolRegistry, k: int, index: ToolIndex, *, searchable: bool,
                 embedder: Embedder | None = None) -> None:
        if SEARCH_TOOL in registry and searchable:
            raise ValueError(f"a registry with its own {SEARCH_TOOL!r} tool cannot use tool_search")
        self.full = registry
        self.k = k
        self.index = index
        # an index of a larger registry (the one a `tools=` scope was cut from) ranks within the scope
        self.within = None if index.names == registry.names else frozenset(registry.names)
        self.searchable = searchable
        self.embedder = embedder  # dense recall fused in: asked through the driver (see `chosen`, `searched`)
        self.loaded: list[str] = []
        self._search = search_tool() if searchable else None

    def choose(self, task: str, dense: Sequence[int] | None = None) -> list[str]:
        """Load the K tools most relevant to the task (filled in registration order when
        fewer share a word with it, so a run always starts with K); `dense`: the
        embedder's ranking of the tools for it."""
        chosen = self.index.rank(task, self.k, within=self.within, dense=dense)
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

    def search(self, query: str, dense: Sequence[int] | None = None) -> tuple[list[str], str]:
        """Load the tools best matching `query` (at most min(K, PER_SEARCH)); return them
        and the observation that lists them for the model. `dense`: as for `choose`."""
        found = self.index.rank(query, min(self.k, PER_SEARCH), exclude=set(self.loaded), within=self.within,
                                dense=dense)
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


def begin(view: RunView, spec: Settings, *, searchable: bool) -> ToolSelection | None:
    """The run's tool search (None, and the run keeps every tool, when search is off for
    it); its machine starts by loading the K tools most relevant to the task (`chosen`)."""
    k = resolve(spec.tool_search, view.registry, view.context_window)
    if k is None:
        return None
    index = tool_index(view.unscoped)  # built once, not once per scoped run
    return ToolSelection(view.registry, k, index, searchable=searchable, embedder=spec.tool_embedder)


def chosen(view: RunView, selection: ToolSelection | None) -> StepGen:
    """Narrow the run to the K tools most relevant to its task (nothing when search is off)."""
    if selection is None:
        return
    index = selection.index
    dense = yield from dense_ranking(index, selection.embedder, view.task, index.depth(selection.k, (), selection.within))
    selection.choose(view.task, dense)
    yield from narrow(selection)


def searched(view: RunView, selection: ToolSelection, query: str) -> Machine[tuple[list[str], str]]:
    """`selection.search(query)`, the embedder asked through the driver, and the run
    pointed at the tools loaded."""
    index, loaded = selection.index, selection.loaded
    depth = index.depth(min(selection.k, PER_SEARCH), loaded, selection.within)
    dense = yield from dense_ranking(index, selection.embedder, query, depth)
    found = selection.search(query, dense)
    yield from narrow(selection)
    return found


def narrow(selection: ToolSelection) -> StepGen:
    """Point the run at the loaded tools (its prompt list, schemas and execution)."""
    yield UseTools(selection.registry())
    yield Record(meta={"tool_search": selection.record()})


def load_called(selection: ToolSelection | None, name: str) -> Machine[list[str]]:
    """Before a call of `name`: load it for the rest of the run when it is a registered,
    in-scope tool that is not loaded (the run's tools then include it); the tools loaded,
    for the step's meta["tools_loaded"] (empty when nothing was)."""
    if selection is None or not selection.load(name):
        return []
    yield from narrow(selection)
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


__all__ = ["AUTO_K", "AUTO_SHARE", "PER_SEARCH", "SEARCH_TOOL", "ToolIndex", "ToolSearchOption", "ToolSelection", "as_words",
           "begin", "check_option", "chosen", "context_window", "dense_ranking", "list_tokens", "load_called", "narrow", "query_of",
           "resolve", "search_tool", "searched", "tool_document", "tool_index"]
