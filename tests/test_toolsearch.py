"""Tool search (issue 25, part 1): a run with many tools sees the K most relevant to its task
plus search_tools, which loads others for the rest of the run; resume and fork see the same."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import loopwright as lw
from loopwright.models.grammar import grammar_for
from loopwright.modes.toolsearch import AUTO_K, AUTO_MIN_TOOLS, SEARCH_TOOL, ToolIndex, resolve

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


def test_auto_is_off_at_or_below_the_threshold_and_on_above_it() -> None:
    assert resolve("auto", AUTO_MIN_TOOLS) is None and resolve(None, AUTO_MIN_TOOLS) is None
    assert resolve("auto", AUTO_MIN_TOOLS + 1) == AUTO_K
    assert resolve("off", 10_000) is None and resolve(5, 60) == 5 and resolve(60, 60) is None
    few = lw.ScriptedPolicy(["Final Answer: ok"])
    lw.run("weather in Paris", few, lw.ToolRegistry(list(many_tools())[:5]))
    assert SEARCH_TOOL not in offered(few.requests[0]) and len(few.requests[0].tools) == 5
    policy = lw.ScriptedPolicy(["Final Answer: ok"])
    trace = lw.run("weather in Paris", policy, many_tools())  # 60 tools: on by default
    assert len(policy.requests[0].tools) == AUTO_K + 1 and offered(policy.requests[0])[-1] == SEARCH_TOOL
    assert trace.meta["tool_search"]["k"] == AUTO_K


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


def test_a_tool_not_loaded_is_an_unknown_tool_and_does_not_run() -> None:
    calls: list[str] = []
    policy = lw.ScriptedPolicy([step("delete_hotel", {"nights": "2"}), "Final Answer: no"])
    trace = lw.run("weather in Paris", policy, many_tools(calls), tool_search=3)
    assert calls == [] and "unknown tool" in (trace.steps[0].error or "")


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
