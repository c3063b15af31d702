"""Tool search: a run with many tools sees the K most relevant to its task plus search_tools,
which loads others for the rest of the run; a registered tool called by name loads and runs;
"auto" decides from the model's context window; resume and fork see the same tools."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

import loopwright as lw
from loopwright.models.grammar import grammar_for
from loopwright.modes.toolsearch import (
    AUTO_K,
    AUTO_SHARE,
    SEARCH_DESCRIPTION,
    SEARCH_TOOL,
    ToolIndex,
    as_words,
    context_window,
    list_tokens,
    query_of,
    resolve,
    search_tool,
    tool_document,
    tool_index,
)

TOPICS = [
    ("weather", "Get the weather forecast for a city", "city"),
    ("currency", "Convert an amount of money between currencies", "amount"),
    ("stock", "Look up the price of a stock ticker", "ticker"),
    ("email", "Send an email message to a recipient", "recipient"),
    ("calendar", "Create a calendar event on a date", "date"),
    ("translate", "Translate text into another language", "text"),
    ("flight", "Search flights between two airports", "origin"),
    ("hotel", "Book a hotel room in a city", "nights"),
    ("recipe", "Find a cooking recipe by ingredient", "ingredient"),
    ("movie", "Find showtimes for a movie at a cinema", "title"),
    ("distance", "Compute the driving distance between two places", "start"),
    ("timezone", "Tell the current time in a timezone", "zone"),
]
VERBS = ["get", "list", "update", "delete", "check"]


def many_tools(calls: list[str] | None = None) -> lw.ToolRegistry:
    """60 tools: 12 topics x 5 verbs, each with one string parameter."""
    made = []
    for topic, description, param in TOPICS:
        for verb in VERBS:
            name = f"{verb}_{topic}"

            def func(_name: str = name, **kwargs: Any) -> str:
                if calls is not None:
                    calls.append(_name)
                return f"{_name} ok: {json.dumps(kwargs, sort_keys=True)}"

            schema = {"type": "object", "properties": {param: {"type": "string"}}, "required": [param]}
            made.append(lw.Tool.from_schema(name, f"{verb.capitalize()}: {description.lower()}.", schema, func))
    return lw.ToolRegistry(made)


def step(name: str, args: dict[str, Any], thought: str = "next") -> str:
    return f"Thought: {thought}\nAction: {name}\nAction Input: {json.dumps(args)}"


def offered(request: lw.ModelRequest) -> list[str]:
    return [t["name"] for t in request.tools]


class Windowed(lw.ScriptedPolicy):
    """A scripted model that reports a context window, as LlamaCpp reports its n_ctx."""

    def __init__(self, outputs: Sequence[Any], context_window: int = 2048) -> None:
        super().__init__(outputs)
        self.context_window = context_window


def test_auto_is_on_only_when_the_whole_tool_list_would_not_fit_the_window() -> None:
    registry = many_tools()
    tokens = list_tokens(registry)  # the whole list as the prompt renders it, estimated
    edge = int(tokens / AUTO_SHARE)
    assert resolve("auto", registry, edge) is None and resolve(None, registry, edge) is None  # fits: off
    assert resolve("auto", registry, edge - 1) == AUTO_K  # takes more than AUTO_SHARE of the window: on
    assert resolve("auto", registry, None) is None  # the policy says nothing: off
    assert resolve("auto", registry, 128_000) is None
    assert resolve("off", registry, 16) is None and resolve(5, registry, None) == 5 and resolve(60, registry, 16) is None
    few = lw.ToolRegistry(list(registry)[:AUTO_K])
    assert resolve("auto", few, 16) is None  # no more tools than K: nothing to leave out
    # the run: the embedded model's 2,048-token window cannot hold 60 tools' list
    policy = Windowed(["Final Answer: ok"], 2048)
    trace = lw.run("weather in Paris", policy, registry)
    assert len(policy.requests[0].tools) == AUTO_K + 1 and offered(policy.requests[0])[-1] == SEARCH_TOOL
    assert trace.meta["tool_search"]["k"] == AUTO_K
    for policy in (Windowed(["Final Answer: ok"], 128_000), lw.ScriptedPolicy(["Final Answer: ok"])):
        trace = lw.run("weather in Paris", policy, registry)  # a large window, or none reported: every tool
        assert len(policy.requests[0].tools) == 60 and "tool_search" not in trace.meta


def test_models_report_their_context_window() -> None:
    assert lw.models.LlamaCpp(n_ctx=4096).context_window == 4096  # the weights load on first use, not here
    assert lw.models.OpenAICompatible("http://127.0.0.1:9/v1", "m", context_window=32_768).context_window == 32_768
    assert lw.models.OpenAICompatible("http://127.0.0.1:9/v1", "m").context_window is None
    for bad in (0, -5, True, "8k"):
        with pytest.raises(ValueError, match="context_window"):
            lw.models.OpenAICompatible("http://127.0.0.1:9/v1", "m", context_window=bad)  # type: ignore[arg-type]


def test_k_is_respected_and_the_tools_are_the_task_s_most_relevant() -> None:
    policy = lw.ScriptedPolicy(["Final Answer: ok"])
    lw.run("What is the weather forecast in Paris?", policy, many_tools(), tool_search=3)
    names = offered(policy.requests[0])
    assert len(names) == 4 and names[-1] == SEARCH_TOOL
    assert all("weather" in n for n in names[:3])
    prompt = policy.requests[0].prompt
    assert "get_weather(" in prompt and "get_currency(" not in prompt and "search_tools(query: string)" in prompt


def test_search_tools_loads_tools_that_stay_loaded_for_the_run() -> None:
    calls: list[str] = []
    policy = lw.ScriptedPolicy([
        step(SEARCH_TOOL, {"query": "convert money currencies"}),
        step("get_currency", {"amount": "10 EUR"}),
        step(SEARCH_TOOL, {"query": "stock ticker price"}),
        step("get_currency", {"amount": "20 EUR"}),
        "Final Answer: done",
    ])
    trace = lw.run("What is the weather in Paris?", policy, many_tools(calls), tool_search=2, on_repeat="off")
    assert trace.stopped_reason == "final" and calls == ["get_currency", "get_currency"]
    first = trace.steps[0]
    assert first.tool == SEARCH_TOOL and first.meta["tools_loaded"] == ["get_currency", "list_currency"]
    assert "get_currency(amount: string)" in (first.observation or "")
    assert trace.tool_calls == 2  # a search runs no tool
    before, after_one, after_two = (offered(policy.requests[i]) for i in (0, 1, 3))
    assert "get_currency" not in before and "get_currency" in after_one
    assert set(after_one) < set(after_two) and "get_stock" in after_two  # loaded stays loaded
    assert len(trace.steps[2].meta["tools_loaded"]) == 2  # min(K, PER_SEARCH)
    assert trace.meta["tool_search"]["loaded"] == [*offered(policy.requests[0])[:2], "get_currency",
                                                    "list_currency", *trace.steps[2].meta["tools_loaded"]]
    # every prompt extends the one before: the search results arrive as observations
    assert all(b.startswith(a) for a, b in zip(policy.prompts, policy.prompts[1:], strict=False))


def test_a_registered_tool_not_loaded_is_loaded_and_run_when_called_by_name() -> None:
    calls: list[str] = []
    policy = Windowed([step("delete_hotel", {"nights": "2"}), step("get_weather", {"city": "Paris"}),
                       "Final Answer: done"])
    trace = lw.run("weather in Paris", policy, many_tools(calls), tool_search=3)
    assert "delete_hotel" not in offered(policy.requests[0])
    assert trace.stopped_reason == "final" and calls == ["delete_hotel", "get_weather"]
    first = trace.steps[0]
    assert first.error is None and first.observation.startswith("delete_hotel ok")
    assert first.meta["tools_loaded"] == ["delete_hotel"] and "tools_loaded" not in trace.steps[1].meta
    assert trace.meta["tool_search"]["loaded"] == [*offered(policy.requests[0])[:3], "delete_hotel"]
    # from then on it is offered like a search's find: prompt list, native list and grammar agree
    assert offered(policy.requests[1]) == [*offered(policy.requests[0])[:3], "delete_hotel", SEARCH_TOOL]
    grammar = grammar_for(policy.requests[1])
    assert grammar is not None
    offered_in_grammar = re.findall(r'^tool\d+ ::= "([\w.-]+)\\nAction Input: ', grammar, re.MULTILINE)
    assert offered_in_grammar == offered(policy.requests[1])  # the loaded tools and search_tools, no other
    again = Windowed([step("delete_hotel", {"nights": "2"}), step("get_weather", {"city": "Paris"}),
                      "Final Answer: done"])
    async_trace = asyncio.run(lw.arun("weather in Paris", again, many_tools(), tool_search=3))
    assert async_trace.steps[0].meta["tools_loaded"] == ["delete_hotel"]  # the async driver: the same
    assert async_trace.meta["tool_search"] == trace.meta["tool_search"] and again.prompts == policy.prompts


def test_a_name_outside_the_registry_or_the_run_s_scope_is_still_an_unknown_tool() -> None:
    calls: list[str] = []
    registry = many_tools(calls)
    scope = [n for n in registry.names if n != "delete_hotel"]
    policy = lw.ScriptedPolicy([step("delete_hotel", {"nights": "2"}), step("no_such_tool", {"x": "1"}),
                                "Final Answer: no"])
    trace = lw.run("weather in Paris", policy, registry, tools=scope, tool_search=3)
    assert calls == [] and all("unknown tool" in (s.error or "") for s in trace.steps[:2])
    assert "delete_hotel" not in trace.meta["tool_search"]["loaded"]
    assert all("tools_loaded" not in s.meta for s in trace.steps)


def test_selection_and_prompts_are_deterministic() -> None:
    def once() -> tuple[list[str], list[str]]:
        policy = lw.ScriptedPolicy([step(SEARCH_TOOL, {"query": "book a room"}), "Final Answer: ok"])
        trace = lw.run("Plan a trip: flights and a hotel", policy, many_tools(), tool_search=4)
        return trace.meta["tool_search"]["loaded"], policy.prompts

    assert once() == once()
    policy = lw.ScriptedPolicy([step(SEARCH_TOOL, {"query": "book a room"}), "Final Answer: ok"])
    trace = asyncio.run(lw.arun("Plan a trip: flights and a hotel", policy, many_tools(), tool_search=4))
    assert (trace.meta["tool_search"]["loaded"], policy.prompts) == once()  # the async driver: the same


def test_a_registry_with_its_own_search_tools_cannot_search() -> None:
    @lw.tool
    def search_tools(query: str) -> str:
        """My own search."""
        return query

    registry = lw.ToolRegistry([*many_tools(), search_tools])
    with pytest.raises(ValueError, match="its own 'search_tools'"):
        lw.run("t", lw.ScriptedPolicy([]), registry, tool_search=3)
    policy = lw.ScriptedPolicy(["Final Answer: ok"])
    lw.run("t", policy, registry, mode="rewoo", tool_search=3, max_steps=1)  # no search offered: fine


def test_index_ranks_by_name_description_parameters_and_examples() -> None:
    @lw.tool(examples=[{"args": {"n": 5}, "question": "how many rabbits after five generations"}])
    def fib(n: int) -> int:
        """Fibonacci number."""
        return n

    index = ToolIndex(lw.ToolRegistry([*many_tools(), fib]))
    assert index.rank("rabbits generations", 1) == ["fib"]  # only its example says so
    assert index.rank("ticker", 1, exclude={"get_stock"})[0].endswith("_stock")  # a parameter name
    assert index.rank("zzz unknown words", 5) == []


def test_tool_search_option_is_checked_and_journaled(tmp_path: Any) -> None:
    for bad in (0, -1, True, "some"):
        with pytest.raises(ValueError, match="tool_search"):
            lw.run("t", lw.ScriptedPolicy([]), many_tools(), tool_search=bad)  # type: ignore[arg-type]
    store = lw.SQLiteStore(tmp_path / "runs.db")
    trace = lw.run("t", lw.ScriptedPolicy(["Final Answer: ok"]), many_tools(), tool_search=7, store=store)
    assert store.load_run(trace.run_id).config["tool_search"] == 7


def test_rewoo_and_plan_execute_plan_from_the_k_tools_the_task_needs() -> None:
    plan = json.dumps({"plan": [{"id": "E1", "tool": "get_weather", "args": {"city": "Paris"}}]})
    for mode in ("rewoo", "plan_execute"):
        policy = lw.ScriptedPolicy([plan, "sunny"] if mode == "rewoo" else [plan])
        trace = lw.run("weather forecast in Paris", policy, many_tools(), mode, tool_search=3)
        assert trace.stopped_reason == "final", mode
        assert len(policy.requests[0].tools) == 3 and SEARCH_TOOL not in offered(policy.requests[0])
        assert "get_weather(" in policy.prompts[0] and "get_hotel(" not in policy.prompts[0]


def _search_then_crash() -> list[Any]:
    return [step(SEARCH_TOOL, {"query": "stock ticker price"}), step("get_stock", {"ticker": "ACME"}),
            RuntimeError("the process died")]


@pytest.mark.parametrize("how", ["resume", "fork"])
def test_resume_and_fork_see_the_same_tools(tmp_path: Any, how: str) -> None:
    store = lw.SQLiteStore(tmp_path / "runs.db")
    calls: list[str] = []
    first = lw.ScriptedPolicy(_search_then_crash())
    trace = lw.run("weather in Paris", first, many_tools(calls), tool_search=3, store=store)
    assert trace.stopped_reason == "error" and calls == ["get_stock"]
    loaded = trace.meta["tool_search"]["loaded"]
    assert "get_stock" in loaded
    then = lw.ScriptedPolicy([step("get_stock", {"ticker": "XYZ"}), "Final Answer: done"])
    if how == "resume":
        after = lw.resume(trace.run_id, then, many_tools(calls), store=store)
    else:
        after = lw.fork(trace.run_id, 2, then, many_tools(calls), store=store)
    assert after.stopped_reason == "final"
    assert calls == ["get_stock", "get_stock"]  # replayed from the journal, then run once more live
    assert after.meta["tool_search"]["loaded"] == loaded
    assert offered(then.requests[0]) == offered(first.requests[2])  # the crashed step saw the same tools
    assert after.steps[0].meta["tools_loaded"] == trace.steps[0].meta["tools_loaded"]
    assert store.trace(after.run_id).steps[0].meta["tools_loaded"] == trace.steps[0].meta["tools_loaded"]


def test_a_dense_embedder_is_fused_and_a_resume_must_be_given_it_again(tmp_path: Any) -> None:
    from loopwright.memory import HashingEmbedder

    registry = many_tools()
    lexical, fused = ToolIndex(registry), ToolIndex(registry, HashingEmbedder())
    assert lexical.rank("wheather", 3) == []  # misspelt: BM25 shares no word with any tool
    assert fused.rank("wheather", 3) and all(n.endswith("_weather") for n in fused.rank("wheather", 3))
    store = lw.SQLiteStore(tmp_path / "runs.db")
    policy = lw.ScriptedPolicy([RuntimeError("died")])
    trace = lw.run("wheather", policy, registry, tool_search=3, tool_embedder=HashingEmbedder(), store=store)
    assert all(n.endswith("_weather") for n in offered(policy.requests[0])[:3])
    assert store.load_run(trace.run_id).config["tool_embedder"] == HashingEmbedder().name
    with pytest.raises(TypeError, match="tool_embedder"):
        lw.resume(trace.run_id, lw.ScriptedPolicy([]), registry, store=store)
    again = lw.ScriptedPolicy(["Final Answer: ok"])
    lw.resume(trace.run_id, again, registry, store=store, tool_embedder=HashingEmbedder())
    assert offered(again.requests[0]) == offered(policy.requests[0])


@pytest.mark.slow
def test_the_embedded_model_s_grammar_accepts_exactly_the_loaded_tools() -> None:
    model = lw.models.LlamaCpp(n_ctx=2048, max_tokens=64)
    seen: list[lw.ModelRequest] = []

    class Recording:
        def complete(self, request: lw.ModelRequest) -> Any:
            seen.append(request)
            return model.complete(request)

    trace = lw.run("What is the weather forecast in Paris?", Recording(), many_tools(), tool_search=3,
                   max_steps=1)
    loaded = offered(seen[0])
    assert len(loaded) == 4 and trace.steps[0].kind in ("action", "final")
    assert trace.steps[0].tool in (None, *loaded)  # what the model wrote is one of them
    grammar = grammar_for(seen[0])
    assert grammar is not None
    for schema in seen[0].tools:
        param = next(iter(schema["parameters"]["properties"]))
        ok = f' look\nAction: {schema["name"]}\nAction Input: {json.dumps({param: "Paris"})}'
        assert model.grammar_accepts(grammar, ok), schema["name"]
    outside = next(t for t in many_tools() if t.name not in loaded)
    param = next(iter(outside.parameters["properties"]))
    assert not model.grammar_accepts(grammar, f' look\nAction: {outside.name}\nAction Input: {{"{param}": "x"}}')


def test_native_tool_calling_gets_the_loaded_tools_and_the_search_as_messages() -> None:
    calls: list[str] = []
    search = lw.ToolCall(SEARCH_TOOL, json.dumps({"query": "stock ticker price"}), id="c1")
    use = lw.ToolCall("get_stock", json.dumps({"ticker": "ACME"}), id="c2")
    policy = lw.ScriptedPolicy([lw.Completion("", tool_calls=(search,)), lw.Completion("", tool_calls=(use,)),
                                lw.Completion("done")])
    trace = lw.run("weather in Paris", policy, many_tools(calls), dialect="native", tool_search=3)
    assert trace.final_answer == "done" and calls == ["get_stock"]
    assert "get_stock" not in offered(policy.requests[0]) and "get_stock" in offered(policy.requests[1])
    reply = policy.requests[1].messages[-1]
    assert reply["role"] == "tool" and reply["tool_call_id"] == "c1" and "get_stock(" in reply["content"]


def test_a_scoped_run_searches_only_its_scope_with_the_registry_s_one_index(monkeypatch: Any) -> None:
    from loopwright.modes import toolsearch

    built: list[int] = []
    real = toolsearch.ToolIndex.__init__

    def counting(self: Any, registry: lw.ToolRegistry, embedder: Any = None) -> None:
        built.append(len(registry))
        real(self, registry, embedder)

    monkeypatch.setattr(toolsearch.ToolIndex, "__init__", counting)
    registry = many_tools()
    scope = [t.name for t in registry if not t.name.endswith("_weather")][:40]
    for _ in range(2):
        policy = lw.ScriptedPolicy([step(SEARCH_TOOL, {"query": "weather forecast"}), "Final Answer: ok"])
        trace = lw.run("weather forecast in Paris", policy, registry, tools=scope, tool_search=3)
        assert set(trace.meta["tool_search"]["loaded"]) <= set(scope)
        assert trace.steps[0].meta["tools_loaded"] == []  # the weather tools are outside the scope
    assert built == [60]  # one index, of the whole registry, for both runs


def test_a_journal_from_before_tool_search_resumes_with_every_tool() -> None:
    config = {"max_steps": 10, "tools": None, "on_deny": "observe"}
    assert lw.RunSpec.from_config("t", "react", config).tool_search == "off"
    assert lw.RunSpec.from_config("t", "react", {**config, "tool_search": "auto"}).tool_search == "auto"


def test_a_replan_loads_the_tools_that_match_the_failure() -> None:
    calls: list[str] = []
    guess = json.dumps({"plan": [{"id": "E1", "tool": "get_stock_price", "args": {"ticker": "ACME"}}]})
    right = json.dumps({"plan": [{"id": "E1", "tool": "get_stock", "args": {"ticker": "ACME"}}]})
    policy = lw.ScriptedPolicy([guess, right])
    trace = lw.run("weather forecast in Paris", policy, many_tools(calls), "plan_execute", tool_search=3)
    assert "get_stock" not in offered(policy.requests[0])
    assert "get_stock" in offered(policy.requests[1]) and "get_stock(" in policy.prompts[1]
    assert trace.stopped_reason == "final" and calls == ["get_stock"] and trace.replans == 1
    assert "get_stock" in trace.meta["tool_search"]["loaded"]


class WindowedTree:
    """A scripted Tree-of-Thoughts model (a prompt -> text callable) with a context window:
    it proposes `first` at the question, then the final answer, and scores every step sure."""

    context_window = 2048

    def __init__(self, first: str) -> None:
        self.first = first
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if prompt.endswith("Evaluation:"):
            return "sure"
        return f"1. {self.first}" if "Step 1:" not in prompt else "1. Final Answer: done"


FAR = "delete_timezone"  # registered last: never among the K a weather task starts with


def _script(mode: str) -> Any:
    plan = json.dumps({"plan": [{"id": "E1", "tool": FAR, "args": {"zone": "UTC"}}]})
    return {
        "react": Windowed([step(FAR, {"zone": "UTC"}), "Final Answer: done"]),
        "reflexion": Windowed([step(FAR, {"zone": "UTC"}), "Final Answer: done"]),
        "rewoo": Windowed([plan, "Final Answer: done"]),
        "plan_execute": Windowed([plan]),
        "tot": WindowedTree(f"{FAR}[UTC]"),
    }[mode]


@pytest.mark.parametrize("mode", ["react", "rewoo", "plan_execute", "reflexion", "tot"])
def test_every_mode_runs_a_registered_tool_outside_the_first_k_with_default_options(mode: str) -> None:
    """60 tools and a model with the embedded model's window: "auto" turns search on, and a
    call by name to a tool the task did not load runs (the default options, nothing else)."""
    calls: list[str] = []
    policy = _script(mode)
    trace = lw.run("What is the weather forecast in Paris?", policy, many_tools(calls), mode)
    search = trace.meta["tool_search"]
    assert search["k"] == AUTO_K and search["loaded"].index(FAR) == AUTO_K  # not among the first K
    assert trace.stopped_reason == "final" and trace.final_answer is not None, [s.error for s in trace.steps]
    assert calls == [FAR]
    ran = next(s for s in trace.steps if s.tool == FAR)
    assert ran.error is None and ran.observation.startswith(f"{FAR} ok")
    loading = next(s for s in trace.steps if s.meta.get("tools_loaded"))
    assert loading.meta["tools_loaded"] == [FAR]  # the action's step, or the plan's that named it
    assert loading.kind == ("plan" if mode in ("rewoo", "plan_execute") else "action")


def test_a_native_tool_call_to_a_registered_tool_outside_the_list_loads_and_runs() -> None:
    calls: list[str] = []
    use = lw.ToolCall("get_stock", json.dumps({"ticker": "ACME"}), id="c1")
    policy = Windowed([lw.Completion("", tool_calls=(use,)), lw.Completion("done")])
    trace = lw.run("weather in Paris", policy, many_tools(calls), dialect="native", tool_search=3)
    assert "get_stock" not in offered(policy.requests[0])
    assert trace.final_answer == "done" and calls == ["get_stock"]
    assert trace.steps[0].meta["tools_loaded"] == ["get_stock"]
    assert "get_stock" in offered(policy.requests[1])
    reply = policy.requests[1].messages[-1]
    assert reply["role"] == "tool" and reply["tool_call_id"] == "c1" and "get_stock ok" in reply["content"]


@pytest.mark.parametrize("how", ["resume", "fork"])
def test_resume_and_fork_load_what_a_call_by_name_loaded(tmp_path: Any, how: str) -> None:
    store = lw.SQLiteStore(tmp_path / "runs.db")
    calls: list[str] = []
    first = Windowed([step("get_stock", {"ticker": "ACME"}), RuntimeError("the process died")])
    trace = lw.run("weather in Paris", first, many_tools(calls), store=store)  # auto: on for 60 tools
    assert trace.stopped_reason == "error" and calls == ["get_stock"]
    loaded = trace.meta["tool_search"]["loaded"]
    assert loaded[-1] == "get_stock" and trace.steps[0].meta["tools_loaded"] == ["get_stock"]
    then = Windowed([step("get_stock", {"ticker": "XYZ"}), "Final Answer: done"])
    if how == "resume":
        after = lw.resume(trace.run_id, then, many_tools(calls), store=store)
    else:
        after = lw.fork(trace.run_id, 1, then, many_tools(calls), store=store)
    assert after.stopped_reason == "final" and calls == ["get_stock", "get_stock"]  # replayed, then one live call
    assert after.meta["tool_search"]["loaded"] == loaded
    assert offered(then.requests[0]) == offered(first.requests[1])  # the crashed step saw the same tools
    assert store.trace(after.run_id).steps[0].meta["tools_loaded"] == ["get_stock"]


@pytest.mark.slow
def test_two_real_mcp_servers_tools_run_when_called_by_name() -> None:
    """server-everything (npm) and mcp-server-time (PyPI) connected at once (15 tools): with
    the embedded model's window "auto" shows them all (their list fits); with search on, a
    call of the time server's tool, which the task's K did not load, runs on the real server."""
    from helpers.mcp_servers import everything_server, time_server
    from loopwright.mcp import MCPServer

    with MCPServer.stdio(everything_server(), [], timeout_s=60) as everything, \
            MCPServer.stdio(time_server(), ["--local-timezone", "Etc/UTC"], timeout_s=60) as clock:
        registry = lw.ToolRegistry([*everything.tools(), *clock.tools()])
        traces, policies = [], []
        for tool_search in ("auto", 3):
            policy = Windowed([step("get_current_time", {"timezone": "Etc/UTC"}), "Final Answer: done"])
            traces.append(lw.run("Repeat the message hello back to me.", policy, registry, tool_search=tool_search))
            policies.append(policy)
    every, searched = traces
    assert "tool_search" not in every.meta and len(policies[0].requests[0].tools) == len(registry) == 15
    assert searched.meta["tool_search"]["k"] == 3 and "get_current_time" not in offered(policies[1].requests[0])
    assert searched.steps[0].meta["tools_loaded"] == ["get_current_time"]
    for trace in traces:
        assert trace.stopped_reason == "final" and trace.steps[0].error is None
        assert "Etc/UTC" in (trace.steps[0].observation or "")


class Lodging:
    """A two-dimensional embedder: a text about hotels (or "lodging") on one axis, the rest
    on the other; so only dense recall can match "lodging", which no tool's document has."""

    name = "lodging-v1"
    dim = 2

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        return np.array([[1.0, 0.0] if ("hotel" in t or "lodging" in t) else [0.0, 1.0] for t in texts],
                        dtype=np.float32)


def test_a_window_of_one_token_is_reported_and_none_or_zero_is_not() -> None:
    assert context_window(Windowed([], 1)) == 1
    assert context_window(Windowed([], 0)) is None and context_window(Windowed([], -3)) is None
    assert context_window(lw.ScriptedPolicy([])) is None


def test_a_tool_s_document_has_its_name_as_words_its_parameters_and_examples() -> None:
    @lw.tool(examples=[{"args": {"account_id": "a1"}, "question": "whose account is a1"}])
    def fetch_userProfile(account_id: str, verbose: bool = False) -> str:
        """Fetch a user's profile."""
        return account_id

    described = lw.Tool.from_schema(
        "billing.get-invoice", "Get an invoice.",
        {"type": "object", "properties": {"invoiceNumber": {"type": "string", "description": "as printed"}}},
        lambda invoiceNumber: invoiceNumber,
    )  # fmt: skip
    assert tool_document(fetch_userProfile).split("\n") == [
        "fetch user Profile", "fetch_userProfile", "Fetch a user's profile.", "account id", "verbose",
        "whose account is a1",
    ]
    assert tool_document(described).split("\n") == [
        "billing get invoice", "billing.get-invoice", "Get an invoice.", "invoice Number", "as printed",
    ]


def test_a_query_that_names_a_tool_also_reads_as_its_words() -> None:
    assert as_words("price via getStockPrice or get_stock") == (
        "price via getStockPrice or get_stock\nget Stock Price get stock")
    assert as_words("stock price") == "stock price"  # no names: the query as it is


def test_the_search_query_is_the_query_argument_else_the_input_else_every_text_value() -> None:
    assert query_of({"query": "stock price", "input": "x", "note": "y"}) == "stock price"
    assert query_of({"input": "stock price", "note": "y"}) == "stock price"
    assert query_of({"what": "stock", "limit": 3, "where": "price"}) == "stock price"
    assert query_of({"query": 3, "topic": "hotel"}) == "hotel"  # no text query: the text values
    assert query_of("stock price") == "stock price" and query_of(None) == "None"


def test_the_search_tool_offered_has_its_description_and_one_query_parameter() -> None:
    policy = lw.ScriptedPolicy(["Final Answer: ok"])
    lw.run("weather in Paris", policy, many_tools(), tool_search=3)
    assert policy.requests[0].tools[-1] == {
        "name": SEARCH_TOOL, "description": SEARCH_DESCRIPTION,
        "parameters": {"type": "object", "additionalProperties": False, "required": ["query"],
                       "properties": {"query": {"type": "string", "description": "what the tool does"}}},
    }
    assert f"search_tools(query: string): {SEARCH_DESCRIPTION}" in policy.prompts[0]
    assert search_tool()(query="x") == (  # outside a run it runs nothing
        "search_tools is answered by the run loop; it has nothing to run here")


def test_tool_search_records_how_many_tools_the_run_could_load() -> None:
    trace = lw.run("weather in Paris", lw.ScriptedPolicy(["Final Answer: ok"]), many_tools(), tool_search=3)
    assert trace.meta["tool_search"] == {"k": 3, "tools": 60,
                                         "loaded": ["get_weather", "list_weather", "update_weather"]}


def test_a_second_search_loads_other_tools_never_one_already_loaded() -> None:
    query = {"query": "stock ticker price"}
    policy = lw.ScriptedPolicy([step(SEARCH_TOOL, query), step(SEARCH_TOOL, query, "more"),
                                step(SEARCH_TOOL, query, "again"), "Final Answer: ok"])
    trace = lw.run("weather in Paris", policy, many_tools(), tool_search=3, on_repeat="off")
    first, second, third = (s.meta["tools_loaded"] for s in trace.steps[:3])
    assert len(first) == 3 and all(n.endswith("_stock") for n in first)
    assert set(second).isdisjoint(first) and {n for n in second if n.endswith("_stock")} == (
        {f"{v}_stock" for v in VERBS} - set(first))  # the other two stock tools come next
    loaded = trace.meta["tool_search"]["loaded"]
    assert len(loaded) == len(set(loaded)) == 3 + len(first) + len(second) + len(third)


def _reports(n: int) -> lw.ToolRegistry:
    """n tools whose documents match "report" equally: BM25 ranks them in registration order."""
    schema = {"type": "object", "properties": {}}
    return lw.ToolRegistry([lw.Tool.from_schema(f"t{i:02d}", "Write a report.", schema, lambda: "ok")
                            for i in range(n)])


def test_the_index_ranks_past_its_default_depth_for_what_is_excluded_or_out_of_scope() -> None:
    registry = _reports(70)
    names = list(registry.names)
    index = ToolIndex(registry)
    assert index.rank("report", 3) == names[:3]  # ties: registration order
    assert index.rank("report", 5, exclude=set(names[:50])) == names[50:55]  # 50 loaded: the next five
    assert index.rank("report", 3, within=set(names[60:])) == names[60:63]  # a scope ranked last


def test_dense_recall_reaches_as_deep_as_the_lexical_ranking() -> None:
    from loopwright.memory import HashingEmbedder

    found = ToolIndex(many_tools(), HashingEmbedder()).rank("wheather", 8)
    assert len(found) == 8 and {n for n in found[:5]} == {f"{v}_weather" for v in VERBS}


def test_the_registry_keeps_one_index_and_its_documents_vectors_per_embedder() -> None:
    from loopwright.memory import HashingEmbedder
    from loopwright.modes.toolsearch import dense_ranking

    registry = many_tools()
    index = tool_index(registry)
    assert tool_index(registry) is index and index.rank("lodging", 3) == []
    embedded: list[int] = []

    def ranked(embedder: Any, query: str) -> list[str]:
        machine, answer = dense_ranking(index, embedder, query, 5), None
        try:
            while True:
                request = machine.send(answer)
                embedded.append(len(request.texts))
                answer = request.embedder.embed(request.texts)
        except StopIteration as done:
            return index.rank(query, 5, dense=done.value)

    assert set(ranked(Lodging(), "lodging")) == {f"{v}_hotel" for v in VERBS}
    assert embedded == [len(index.documents), 1]  # the documents, then the query
    assert all(n.endswith("_weather") for n in ranked(HashingEmbedder(), "wheather"))
    assert ranked(Lodging(), "lodging")[:1] and embedded[-1:] == [1] and len(embedded) == 5  # documents kept
    assert sorted(name.split("-")[0] for name in index.dense) == ["hashing", "lodging"]  # one set of vectors each


def test_a_run_s_tool_embedder_chooses_its_first_k_tools() -> None:
    policy = lw.ScriptedPolicy(["Final Answer: ok"])
    trace = lw.run("somewhere for lodging", policy, many_tools(), tool_search=3, tool_embedder=Lodging())
    assert all(n.endswith("_hotel") for n in trace.meta["tool_search"]["loaded"])
    assert all(n.endswith("_hotel") for n in offered(policy.requests[0])[:3])


class _ThreadNoting:
    """A HashingEmbedder that notes the thread each `embed` runs on."""

    def __init__(self) -> None:
        from loopwright.memory import HashingEmbedder

        self.inner = HashingEmbedder()
        self.name = self.inner.name
        self.threads: list[str] = []

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> Any:
        import threading

        self.threads.append(threading.current_thread().name)
        return self.inner.embed(texts)


def test_the_dense_embedder_is_a_request_the_driver_serves_off_the_event_loop() -> None:
    import threading

    from loopwright.modes.machine import Embed
    from loopwright.modes.toolsearch import dense_ranking

    registry = many_tools()
    index, embedder = ToolIndex(registry), _ThreadNoting()
    ask = dense_ranking(index, embedder, "wheather", 5)
    documents = next(ask)  # the machine asks; it calls no embedder
    assert isinstance(documents, Embed) and documents.texts == index.documents and embedder.threads == []
    query = ask.send(embedder.inner.embed(documents.texts))
    assert isinstance(query, Embed) and query.texts == ["wheather"]
    with pytest.raises(StopIteration) as ranked:
        ask.send(embedder.inner.embed(query.texts))
    assert all(registry.names[i].endswith("_weather") for i in ranked.value.value[:3])

    def search_run() -> lw.ScriptedPolicy:
        return lw.ScriptedPolicy([step(SEARCH_TOOL, {"query": "wheather"}), "Final Answer: ok"])

    sync_policy, async_policy = search_run(), search_run()
    trace = lw.run("stock ticker", sync_policy, many_tools(), tool_search=3, tool_embedder=embedder)
    assert trace.steps[0].meta["tools_loaded"] and embedder.threads  # the task, then the search
    embedder.threads.clear()

    async def main() -> lw.Trace:
        return await lw.arun("stock ticker", async_policy, many_tools(), tool_search=3, tool_embedder=embedder)

    again = asyncio.run(main())
    assert again.steps[0].meta["tools_loaded"] == trace.steps[0].meta["tools_loaded"]
    assert offered(async_policy.requests[1]) == offered(sync_policy.requests[1])
    assert len(embedder.threads) >= 2 and threading.main_thread().name not in embedder.threads


def test_an_embedder_that_raises_ends_the_run_with_an_error_step() -> None:
    class Broken(_ThreadNoting):
        def embed(self, texts: Sequence[str]) -> Any:
            raise OSError("embedding server down")

    trace = lw.run("stock ticker", lw.ScriptedPolicy([]), many_tools(), tool_search=3, tool_embedder=Broken())
    assert trace.stopped_reason == "error" and "embedding server down" in (trace.steps[-1].error or "")
