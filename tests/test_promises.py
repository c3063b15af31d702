"""Twelve behaviours no fast test guarded (issue 40): an independent check planted a small
fault in each and the fast suite caught none. Each has a test here that fails when it
breaks, written through public surfaces (runs, traces, events, the store, the HTTP app) so
it outlives rewrites of the code behind it; scripts/mutate.py plants the faults
(`--test tests/test_promises.py`) and names the test that catches each.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest

import loopwright as lw
from conftest import act, final, make_registry
from helpers.agui import answer, custom, serving, start_run, watch
from loopwright.safety import ApprovalRequest, Decision

# -- 1. a tool's end says whether it failed -----------------------------------------------


def _finished_dicts(events: list[lw.Event]) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(e.to_dict())) for e in events if e.kind == "tool_finished"]


def test_tool_finished_says_in_its_dict_that_a_failing_tool_failed_and_a_passing_one_did_not() -> None:
    script = lw.ScriptedPolicy([act("add", '{"x": 1, "y": 2}'), act("divide", '{"x": 1, "y": 0}'), final("3")])
    finished = _finished_dicts(list(lw.iter_events("q", script, make_registry())))
    assert [(d["tool"], d["error"]) for d in finished] == [("add", False), ("divide", True)]


def test_tool_finished_error_flag_in_rewoo_workers_and_the_async_driver() -> None:
    plan = json.dumps({"plan": [{"id": "E1", "tool": "divide", "args": {"x": 1, "y": 0}},
                                {"id": "E2", "tool": "add", "args": {"x": 1, "y": 2}}]})

    async def watched() -> list[lw.Event]:
        return [e async for e in lw.aiter_events("q", lw.ScriptedPolicy([plan, "Final Answer: 3"]),
                                                 make_registry(), mode="rewoo")]

    finished = _finished_dicts(asyncio.run(watched()))
    assert sorted((d["call_key"], d["tool"], d["error"]) for d in finished) == [
        ("E1", "divide", True), ("E2", "add", False)]


# -- 2. a child's own token budget does not lift the parent's ------------------------------


def _billed(text: str, tokens: int = 100) -> lw.Completion:
    """A reply that costs exactly `tokens` (prompt sent plus completion)."""
    return lw.Completion(text, lw.Usage(prompt_tokens=tokens - 10, evaluated_tokens=tokens - 10,
                                        completion_tokens=10))


def test_a_child_with_its_own_token_budget_is_held_to_what_the_parent_has_left() -> None:
    child_script = [_billed(act("add", json.dumps({"x": i, "y": 1}))) for i in range(20)]
    helper = lw.Agent("helper", lw.ScriptedPolicy(child_script), make_registry(), max_steps=20,
                      token_budget=10_000)
    parent_script = lw.ScriptedPolicy([_billed(act("helper", '{"task": "count up"}')), _billed(final("done"))])
    trace = lw.run("q", parent_script, lw.ToolRegistry([helper.as_tool()]), token_budget=250, max_steps=5)

    [child] = trace.children.values()
    # 150 tokens were left after the parent's first call: the child stops at its second call
    assert child.stopped_reason == "token_budget" and child.llm_calls == 2
    assert child.usage.total_tokens == 200
    # and the parent, whose child spent its budget, makes no further model call
    assert trace.stopped_reason == "token_budget" and trace.llm_calls == 1
    assert trace.usage.total_tokens == 300


# -- 3. a child's approver cannot approve past the parent's --------------------------------


def _wipe_registry(ran: list[str]) -> lw.ToolRegistry:
    @lw.tool(requires_approval=True, side_effects="destructive")
    def wipe(path: str) -> str:
        """Delete everything under a path."""
        ran.append(path)
        return f"wiped {path}"

    return lw.ToolRegistry([wipe])


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("parent_approves", [False, True])
def test_a_gated_call_inside_a_child_agent_is_put_to_the_parents_approver(driver: str, parent_approves: bool) -> None:
    ran: list[str] = []
    asked_parent: list[ApprovalRequest] = []
    asked_child: list[ApprovalRequest] = []

    def parent_approver(request: ApprovalRequest) -> Decision:
        asked_parent.append(request)
        return Decision(parent_approves, "parent approves" if parent_approves else "parent says no")

    def child_approver(request: ApprovalRequest) -> Decision:
        asked_child.append(request)
        return Decision(not parent_approves, "the child's own say")

    cleaner = lw.Agent("cleaner", lw.ScriptedPolicy([act("wipe", '{"path": "/data"}'), final("done")]),
                       _wipe_registry(ran), approver=child_approver, max_steps=3)
    policy = lw.ScriptedPolicy([act("cleaner", '{"task": "wipe /data"}'), final("ok")])
    registry = lw.ToolRegistry([cleaner.as_tool()])
    if driver == "sync":
        trace = lw.run("q", policy, registry, approver=parent_approver, max_steps=3)
    else:
        trace = asyncio.run(lw.arun("q", policy, registry, approver=parent_approver, max_steps=3))

    assert asked_child == []
    assert [(r.tool, r.args, r.meta.get("agent")) for r in asked_parent] == [("wipe", {"path": "/data"}, "cleaner")]
    assert ran == (["/data"] if parent_approves else [])
    [child] = trace.children.values()
    assert child.steps[0].kind == ("action" if parent_approves else "denied")


def test_a_child_agents_own_approver_cannot_approve_under_a_parent_that_has_none() -> None:
    ran: list[str] = []
    asked_child: list[ApprovalRequest] = []

    def child_approver(request: ApprovalRequest) -> bool:
        asked_child.append(request)
        return True

    cleaner = lw.Agent("cleaner", lw.ScriptedPolicy([act("wipe", '{"path": "/data"}'), final("done")]),
                       _wipe_registry(ran), approver=child_approver, max_steps=3)
    trace = lw.run("q", lw.ScriptedPolicy([act("cleaner", '{"task": "wipe /data"}'), final("ok")]),
                   lw.ToolRegistry([cleaner.as_tool()]), max_steps=3)  # the parent would deny any gated call
    assert ran == [] and asked_child == []
    [child] = trace.children.values()
    assert child.steps[0].kind == "denied"


# -- 4. one search loads at most its per-search count ---------------------------------------

PER_SEARCH = 5  # what one search_tools call loads at most (fewer when K is smaller)
CITIES = ["oslo", "lima", "pune", "kyiv", "baku", "doha", "riga", "suva", "apia", "male", "bern", "rome",
          "nice", "lyon", "graz", "linz", "gent", "kiel", "bonn", "ulm", "turku", "espoo", "vaasa", "oulu"]


def _many_tools() -> lw.ToolRegistry:
    params = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tools = [lw.Tool.from_schema(f"misc_{i}", f"Miscellaneous helper number {i}.", params, lambda n: n)
             for i in range(10)]
    tools += [lw.Tool.from_schema(f"weather_{c}", f"Weather forecast for {c.title()}.", params, lambda n: n)
              for c in CITIES]
    return lw.ToolRegistry(tools)


@pytest.mark.parametrize("k", [2, 12])
def test_one_search_tools_call_loads_at_most_its_per_search_count_whatever_k(k: int) -> None:
    registry = _many_tools()
    script = lw.ScriptedPolicy([act("search_tools", '{"query": "weather forecast"}'), final("found")])
    trace = lw.run("Plan the day.", script, registry, tool_search=k, max_steps=3)

    search = trace.steps[0]
    assert search.tool == "search_tools"
    loaded = search.meta["tools_loaded"]
    assert 1 <= len(loaded) <= min(k, PER_SEARCH)  # twenty-odd weather tools matched; fewer were loaded
    assert all(name.startswith("weather_") for name in loaded)
    assert trace.meta["tool_search"]["k"] == k
    assert len(trace.meta["tool_search"]["loaded"]) == k + len(loaded)


# -- 5. a failing tool's long output keeps its error ----------------------------------------


def _exploding_registry() -> lw.ToolRegistry:
    @lw.tool
    def explode(n: int) -> str:
        """Fail loudly."""
        raise RuntimeError("disk on fire: " + "smoke " * 1000)

    @lw.tool
    def add(x: int, y: int) -> int:
        """Add two integers."""
        return x + y

    return lw.ToolRegistry([explode, add], max_observation_chars=200)


def _assert_failed_and_kept(step: lw.Step, outputs: dict[str, str]) -> None:
    assert step.tool == "explode" and step.error is not None and "disk on fire" in step.error
    handle = step.meta["output"]
    assert outputs[handle].startswith("ERROR[explode]") and len(outputs[handle]) > 5000
    assert step.observation is not None and handle in step.observation


def test_a_failing_tool_past_the_cap_keeps_its_error_beside_the_handle_live_and_replayed(tmp_path: Path) -> None:
    script = [act("explode", '{"n": 1}'), final("it failed")]
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        events = list(lw.iter_events("q", lw.ScriptedPolicy(script), _exploding_registry(), store=store, run_id="r"))
        trace = events[-1].trace  # type: ignore[union-attr]
        _assert_failed_and_kept(trace.steps[0], trace.outputs)
        assert [d["error"] for d in _finished_dicts(events)] == [True]
        replayed = lw.resume("r", lw.ScriptedPolicy([]), _exploding_registry(), store=store)
        assert replayed.steps[0].meta.get("replayed")
        _assert_failed_and_kept(replayed.steps[0], replayed.outputs)


def test_a_rewoo_step_that_uses_a_failed_long_result_is_not_run() -> None:
    plan = json.dumps({"plan": [{"id": "E1", "tool": "explode", "args": {"n": 1}},
                                {"id": "E2", "tool": "add", "args": {"x": "#E1", "y": 1}}]})
    trace = lw.run("q", lw.ScriptedPolicy([plan, "Final Answer: none"]), _exploding_registry(), mode="rewoo")
    first, second = trace.steps[1], trace.steps[2]
    _assert_failed_and_kept(first, trace.outputs)
    assert second.tool == "add" and second.error is not None and trace.tool_calls == 1


# -- 6. folding stubs the oldest results first ----------------------------------------------


def test_folding_stubs_the_oldest_results_first_and_newer_results_stay_whole() -> None:
    seen: list[str] = []

    @lw.tool
    def fetch(page: int) -> str:
        """Fetch a page of the report."""
        return f"page {page} body: " + "routine figures, nothing new. " * 60

    def policy(prompt: str) -> str:
        seen.append(prompt)
        if len(seen) == 10:
            return "Thought: done\nFinal Answer: ok"
        return f'Thought: read on\nAction: fetch\nAction Input: {{"page": {len(seen)}}}'

    trace = lw.run("Read the report.", policy, lw.ToolRegistry([fetch]), max_steps=10, context_tokens=3_000)
    assert trace.stopped_reason == "final"
    stubs = [f for f in trace.meta["folds"] if f["kind"] == "stub_results"]
    assert len(stubs) >= 2
    so_far: list[int] = []
    whole_after_fold: list[int] = []
    for fold in stubs:  # each fold stubs the oldest results still whole, oldest first
        stubbed, before = fold["folded_steps"], fold["before_step"]
        assert stubbed == list(range(len(so_far) + 1, len(so_far) + len(stubbed) + 1))
        so_far += stubbed
        prompt = seen[before - 1]  # the prompt of the step the fold was made for
        for k in so_far:
            assert f"page {k} body" not in prompt and f'read_output(handle="out-{k}")' in prompt
        newer = range(len(so_far) + 1, before)  # the newest step's result among them
        for k in newer:
            assert f"page {k} body" in prompt and f'read_output(handle="out-{k}")' not in prompt
        whole_after_fold.append(len(newer))
    assert min(whole_after_fold) >= 1 and max(whole_after_fold) >= 2  # a fold stubs only what it must


# -- 7. the AG-UI result of an error-only step carries the error ----------------------------


def test_the_agui_result_of_a_resumed_runs_in_doubt_step_carries_its_error(tmp_path: Path) -> None:
    from loopwright.events import RunFinished, RunStarted, StepEvent
    from loopwright.ui import AGUIMapper

    sent: list[str] = []

    @lw.tool(side_effects="write")
    def send(text: str) -> str:
        """Send a message."""
        sent.append(text)
        raise SystemExit("the process dies mid-call")

    registry = lw.ToolRegistry([send])
    script = [act("send", '{"text": "hi"}'), final("sent")]
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        with pytest.raises(SystemExit):
            lw.run("t", lw.ScriptedPolicy(script), registry, store=store, run_id="r")
        resumed = lw.resume("r", lw.ScriptedPolicy(script[1:]), registry, store=store)
        stored = store.trace("r")
    assert sent == ["hi"] and resumed.stopped_reason == "error"

    for trace in (resumed, stored):  # as the resumed run sent it, and as a viewer replays it from the store
        in_doubt = trace.steps[-1]
        assert in_doubt.tool == "send" and in_doubt.error and not in_doubt.observation
        mapper = AGUIMapper("thread")
        out = mapper.map(RunStarted(run_id="r", agent=None, task="t", mode="react"))
        for step in trace.steps:
            out += mapper.map(StepEvent(run_id="r", agent=None, step=step))
        out += mapper.map(RunFinished(run_id="r", agent=None, trace=trace))
        events = [json.loads(e.model_dump_json(by_alias=True)) for e in out]
        [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert in_doubt.error in result["content"]


# -- 8. the server forgets only finished runs -----------------------------------------------

WIPE = 'Thought: wipe it\nAction: wipe\nAction Input: {"path": "/data"}'


def _server_policy(prompt: str) -> str:
    """Wipe for the task that asks for it, until the prompt holds the result; answer every
    other task at once."""
    if "wipe-task" in prompt and "wiped /data" not in prompt:
        return WIPE
    return "Thought: I know it\nFinal Answer: 5"


def test_the_server_never_forgets_a_run_that_waits_for_approval() -> None:
    ran: list[str] = []
    web = _ui_app(_server_policy, _wipe_registry(ran), keep_runs=1, max_steps=4, approval_timeout_s=60)
    with serving(web) as base:
        waiting = start_run(base, "wipe-task")
        _first_approval_key(base, waiting)
        for task in ("a", "b", "c"):  # three runs finish past keep_runs=1 while the first waits
            assert watch(base, start_run(base, task))[-1]["type"] == "RUN_FINISHED"
        replies: list[httpx2.Response] = []

        def on_event(e: dict[str, Any]) -> None:
            if e["type"] == "CUSTOM" and e["name"] == "approval_requested":
                replies.append(answer(base, waiting, e["value"]["key"], True))

        events = watch(base, waiting, on_event)  # still there (200), from its first event to its end
    assert [r.status_code for r in replies] == [200] and ran == ["/data"]
    assert custom(events, "approval_decided")[0]["approved"] is True
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"]["stopped_reason"] == "final"


def test_a_run_that_finished_last_is_kept_over_runs_that_finished_before_it() -> None:
    ran: list[str] = []
    web = _ui_app(_server_policy, _wipe_registry(ran), keep_runs=1, max_steps=4, approval_timeout_s=60)
    with serving(web) as base:
        waiting = start_run(base, "wipe-task")
        key = _first_approval_key(base, waiting)
        assert watch(base, start_run(base, "a"))[-1]["type"] == "RUN_FINISHED"
        assert answer(base, waiting, key, True).status_code == 200
        _read_to_end(base, waiting)
        later = httpx2.get(f"{base}/runs/{waiting}/events", timeout=10)  # it ended: the stream is finite
    assert ran == ["/data"] and later.status_code == 200


def _read_to_end(base: str, run_id: str) -> None:
    """Wait for the run's end by reading its stream (whatever the stream's status after)."""
    with httpx2.stream("GET", f"{base}/runs/{run_id}/events", timeout=httpx2.Timeout(10.0, read=30.0)) as response:
        for _ in response.iter_lines():
            pass


def _ui_app(policy: Any, registry: lw.ToolRegistry, **options: Any) -> Any:
    from loopwright.ui import app

    return app(policy, registry, **options)


def _first_approval_key(base: str, run_id: str) -> str:
    """Read the run's stream until it asks for an approval; the request's key."""
    timeout = httpx2.Timeout(10.0, read=30.0)
    with httpx2.stream("GET", f"{base}/runs/{run_id}/events", timeout=timeout) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: "):])
                if event["type"] == "CUSTOM" and event["name"] == "approval_requested":
                    return str(event["value"]["key"])
    raise AssertionError("the run ended without asking for an approval")


# -- 9. cancelling an async ReWOO run cancels its workers -----------------------------------


def test_cancelling_an_async_rewoo_run_cancels_its_running_workers() -> None:
    async def scenario() -> None:
        started = {name: asyncio.Event() for name in ("a", "b")}
        cancelled = {name: asyncio.Event() for name in ("a", "b")}

        @lw.tool
        async def wait_for(name: str) -> str:
            """Wait for a signal that never comes."""
            started[name].set()
            try:
                await asyncio.sleep(120)
            except asyncio.CancelledError:
                cancelled[name].set()
                raise
            return name

        plan = json.dumps({"plan": [{"id": "E1", "tool": "wait_for", "args": {"name": "a"}},
                                    {"id": "E2", "tool": "wait_for", "args": {"name": "b"}}]})
        run = asyncio.ensure_future(lw.arun("q", lw.ScriptedPolicy([plan, "Final Answer: x"]),
                                            lw.ToolRegistry([wait_for]), mode="rewoo"))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 10)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        # the workers hear the cancellation (well within a second; the bound here is generous)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in cancelled.values())), 5)

    asyncio.run(scenario())


# -- 10. a failed side effect is not done: the same call again runs again -------------------


def _flaky_charge(charged: list[int]) -> lw.ToolRegistry:
    @lw.tool(side_effects="write")
    def charge(amount: int) -> str:
        """Charge a card."""
        charged.append(amount)
        if len(charged) == 1:
            raise ConnectionError("payment gateway unreachable")
        return f"charged {amount}"

    return lw.ToolRegistry([charge])


CHARGE = act("charge", '{"amount": 5}', "charge it")


@pytest.mark.parametrize("journaled", [False, True])
def test_a_failed_side_effect_retried_in_the_run_runs_again(tmp_path: Path, journaled: bool) -> None:
    charged: list[int] = []
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        trace = lw.run("q", lw.ScriptedPolicy([CHARGE, CHARGE, final("charged")]), _flaky_charge(charged),
                       store=store if journaled else None)
    assert charged == [5, 5]
    assert trace.steps[0].error is not None and trace.steps[1].error is None
    assert trace.steps[1].observation == "charged 5" and "exactly_once" not in trace.steps[1].meta


def test_a_failed_side_effect_retried_after_a_crash_and_resume_runs_again(tmp_path: Path) -> None:
    charged: list[int] = []
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        with pytest.raises(lw.RunInterrupted):
            lw.run("q", lw.ScriptedPolicy([CHARGE, KeyboardInterrupt()]), _flaky_charge(charged),
                   store=store, run_id="r")
        assert charged == [5]
        trace = lw.resume("r", lw.ScriptedPolicy([CHARGE, final("charged")]), _flaky_charge(charged), store=store)
    assert charged == [5, 5]  # the failure replayed, the retry run
    assert trace.steps[0].meta.get("replayed") and trace.steps[0].error is not None
    assert trace.steps[1].error is None and trace.steps[1].observation == "charged 5"
    assert trace.final_answer == "charged"


# -- 11. an approval is journaled before the call runs --------------------------------------


def test_an_approval_is_journaled_before_the_call_and_a_resume_after_a_crash_does_not_ask_again(
    tmp_path: Path,
) -> None:
    asked: list[str] = []
    seen_in_journal: list[list[tuple[str, bool | None]]] = []
    store = lw.SQLiteStore(tmp_path / "runs.db")

    @lw.tool(requires_approval=True, side_effects="write", dedupes_on_call_key=True)
    def publish(post: str) -> str:
        """Publish a post (the blog ignores a repeated call key)."""
        seen_in_journal.append([(r.tool, None if d is None else d.approved) for r, d in store.approvals("r")])
        if len(seen_in_journal) == 1:
            raise SystemExit("the process dies mid-call")
        return f"published {post}"

    def approver(request: ApprovalRequest) -> bool:
        asked.append(request.tool)
        return True

    script = [act("publish", '{"post": "hello"}'), final("done")]
    registry = lw.ToolRegistry([publish])
    with store:
        with pytest.raises(SystemExit):
            lw.run("t", lw.ScriptedPolicy(script), registry, approver=approver, store=store, run_id="r")
        assert asked == ["publish"] and seen_in_journal == [[("publish", True)]]  # decided before it ran
        trace = lw.resume("r", lw.ScriptedPolicy(script[1:]), registry, approver=approver, store=store)
    assert asked == ["publish"]  # not asked again
    assert len(seen_in_journal) == 2 and trace.final_answer == "done"
    assert trace.steps[0].observation == "published hello"


# -- 12. the local model's evaluated tokens are the whole evaluated suffix -----------------


class _StandInLlama:
    """A stand-in for llama_cpp.Llama with its contract for what the counting needs: one
    token per byte; `create_completion` reuses the KV cache's longest prefix (as
    `Llama.generate` does, always re-evaluating one token of a fully cached prompt),
    evaluates the rest in one `eval` call, then samples the reply, evaluating each token
    but the last (as it goes, with `stream=True`)."""

    REPLY = b" ok then"
    _model = SimpleNamespace(vocab=None)

    def __init__(self, **_: Any) -> None:
        self.input_ids: list[int] = []
        self.n_tokens = 0

    @property
    def _input_ids(self) -> list[int]:
        return self.input_ids[: self.n_tokens]

    def tokenize(self, data: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return [b + 1 for b in data]

    def detokenize(self, tokens: list[int]) -> bytes:
        return bytes(t - 1 for t in tokens)

    def reset(self) -> None:
        self.n_tokens = 0

    def eval(self, tokens: list[int]) -> None:
        self.input_ids[self.n_tokens:] = list(tokens)
        self.n_tokens += len(tokens)

    def sample(self, *args: Any, **kwargs: Any) -> int:
        return self.tokenize(self.REPLY)[self._generated]

    def _generate(self, tokens: list[int], max_tokens: int) -> Iterator[int]:
        prefix = 0
        for a, b in zip(self._input_ids, tokens, strict=False):
            if a != b:
                break
            prefix += 1
        self.n_tokens = max(prefix - 1 if prefix == len(tokens) else prefix, 0)
        self.eval(tokens[self.n_tokens:])
        self._generated = 0
        while True:
            token = self.sample()
            self._generated += 1
            yield token
            if self._generated >= min(max_tokens, len(self.REPLY)):
                return  # the last token is returned, not evaluated
            self.eval([token])

    def create_completion(self, tokens: list[int], max_tokens: int = 16, stream: bool = False, **_: Any) -> Any:
        if stream:
            return ({"choices": [{"text": self.detokenize([t]).decode(), "finish_reason": None}]}
                    for t in self._generate(list(tokens), max_tokens))
        out = list(self._generate(list(tokens), max_tokens))
        return {"choices": [{"text": self.detokenize(out).decode(), "finish_reason": "length"}],
                "usage": {"completion_tokens": len(out)}}


@pytest.mark.parametrize("streamed", [False, True])
def test_the_local_models_evaluated_tokens_are_the_whole_evaluated_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: bool,
) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    monkeypatch.setattr(llama_cpp, "Llama", _StandInLlama)
    monkeypatch.setattr(llama_cpp, "llama_vocab_is_eog", lambda vocab, token: False)
    weights = tmp_path / "stand-in.gguf"
    weights.write_bytes(b"GGUF")
    model = lw.models.LlamaCpp(weights, grammar=False, state_cache_bytes=0, max_tokens=4)

    def usage(prompt: str) -> lw.Usage:
        request = lw.ModelRequest(prompt, purpose="summarize")
        reply = list(model.stream(request))[-1] if streamed else model.complete(request)
        assert isinstance(reply, lw.Completion) and reply.usage is not None
        return reply.usage

    fresh = usage("The capital of France is")  # an empty cache evaluates all it was sent
    assert fresh.prompt_tokens == len("The capital of France is")
    assert fresh.evaluated_tokens == fresh.prompt_tokens and fresh.completion_tokens == 4
    longer = "The capital of France is ok t. And of Italy?"  # extends the first prompt and its reply
    cached = model.cached_tokens
    assert cached > fresh.prompt_tokens
    extended = usage(longer)
    assert extended.prompt_tokens == len(longer)
    assert 0 < extended.evaluated_tokens == len(longer) - cached  # only the suffix past the cached prefix
    model.reset()
    again = usage(longer)  # a reset cache evaluates the whole prompt again
    assert again.evaluated_tokens == again.prompt_tokens == len(longer)
