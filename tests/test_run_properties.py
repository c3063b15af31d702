"""Property tests: whatever the policy does, every run terminates inside its limits
and returns a trace that round-trips through JSON."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopwright as lw
from conftest import act, final, make_registry

VALID = [
    act("add", '{"x": 1, "y": 2}'),
    act("multiply", '{"x": 3, "y": 4}'),
    act("divide", '{"x": 1, "y": 0}'),
    act("search", '{"q": "France"}'),
    act("no_such_tool", "{}"),
    act("add", '{"x": true, "y": "2"}'),
    "Thought 1: x\nAction 1: search[France]",
    "```json\n{\"plan\": []}\n```",
    json.dumps({"plan": [{"id": "E1", "tool": "add", "args": {"x": 1, "y": 2}}]}),
    json.dumps({"plan": [{"id": "E1", "tool": "divide", "args": {"x": 1, "y": 0}},
                         {"id": "E2", "tool": "add", "args": {"x": "#E1", "y": 1}}]}),
]

output = st.one_of(
    st.sampled_from(VALID),
    st.text(max_size=200),
    st.builds(lambda n: "Action: add\nAction Input: " + "{" * n, st.integers(0, 50)),
    st.just("x" * 20_000),  # huge output
    st.sampled_from([RuntimeError("boom"), ValueError("bad"), TimeoutError("slow")]),
    st.builds(lambda usage: lw.Completion(VALID[0], lw.Usage(usage, usage, usage)), st.integers(0, 5000)),
    st.just(final("done")),
    st.sampled_from([42, None, b"Final Answer: 1", ["list"]]),  # not a str or a Completion
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outputs=st.lists(output, min_size=0, max_size=40),
    mode=st.sampled_from(["react", "rewoo", "plan_execute", "reflexion", "tot"]),
    max_steps=st.integers(1, 12),
    budget=st.one_of(st.none(), st.integers(1, 20_000)),
    on_repeat=st.sampled_from(["nudge", "stop", "off"]),
    on_parse_error=st.sampled_from(["observe", "stop"]),
)
def test_every_run_terminates_within_its_limits(outputs, mode, max_steps, budget, on_repeat, on_parse_error):
    cycle = list(outputs)

    def policy(prompt: str):
        if not cycle:
            return final("fallback")
        item = cycle[len(prompt) % len(cycle)]
        if isinstance(item, BaseException):
            raise item
        return item

    registry = make_registry()
    trace = lw.run(
        "task", policy, registry, mode=mode, max_steps=max_steps, token_budget=budget,
        on_repeat=on_repeat, on_parse_error=on_parse_error, max_replans=2,
    )
    # only the reasons this run's limits make possible (no clock, no approver, no store)
    possible = {"final", "max_steps", "error"}
    possible |= {"token_budget"} if budget is not None else set()
    # "stop" ends at the first repeat, "nudge" after max_nudges nudged calls
    possible |= {"repeated_call"} if mode == "react" and on_repeat != "off" else set()
    possible |= {"max_replans"} if mode == "plan_execute" else set()
    possible |= {"max_reflections"} if mode == "reflexion" else set()  # a failed attempt is retried
    possible |= {"max_nodes", "exhausted"} if mode == "tot" else set()
    assert trace.stopped_reason in possible
    if trace.stopped_reason == "max_steps" and mode == "react":
        assert trace.llm_calls == max_steps
    if trace.stopped_reason == "max_steps" and mode == "reflexion":  # no room left for a critique
        assert trace.llm_calls >= max_steps - 1
    if mode in ("react", "reflexion"):  # reflexion: attempt steps + reflections, all within max_steps
        assert trace.llm_calls <= max_steps
        assert trace.llm_calls == len(trace.steps)
    elif mode == "tot":
        assert trace.llm_calls <= max_steps
        assert trace.llm_calls == sum(s.kind in ("propose", "value", "error") for s in trace.steps)
        assert trace.meta["tot"]["nodes"] <= 24
    elif mode == "rewoo":
        assert trace.llm_calls <= 2
    else:
        assert trace.llm_calls == 1 + trace.replans <= 3
    if budget is not None:
        per_call = max((s.usage.total_tokens for s in trace.steps), default=0)
        assert trace.usage.total_tokens < budget + per_call + 1
    if trace.stopped_reason == "final":
        assert isinstance(trace.final_answer, str)
    else:
        assert trace.final_answer is None
    data = trace.to_dict()
    assert lw.Trace.from_dict(json.loads(json.dumps(data))).to_dict() == data
