"""run_many / arun_many: order, isolation, progress, bounded concurrency, resumption."""

from __future__ import annotations

import asyncio
import re
from functools import partial
from typing import Any

import pytest

import loopwright as lw
from conftest import act, final, make_registry
from loopwright.batch import task_run_id


def answer_policy(prompt: str) -> str:
    """Answers each task "add A and B" with A + B, through the add tool."""
    question = re.findall(r"Question: add (\d+) and (\d+)", prompt)[-1]
    if "Observation:" in prompt.split("Question: add")[-1]:
        return final(str(int(question[0]) + int(question[1])))
    return act("add", f'{{"x": {question[0]}, "y": {question[1]}}}')


TASKS = [f"add {i} and {10 * i}" for i in range(12)]


def test_traces_come_back_in_input_order_whatever_order_runs_end() -> None:
    async def policy(prompt: str) -> str:
        i = int(re.findall(r"Question: add (\d+)", prompt)[-1])
        await asyncio.sleep((12 - i) * 0.002)  # the last task ends first
        return answer_policy(prompt)

    ended: list[int] = []
    traces = lw.run_many(TASKS, policy, make_registry(), concurrency=12,
                         progress=lambda i, t: ended.append(i))
    assert [t.task for t in traces] == TASKS
    assert [t.final_answer for t in traces] == [str(11 * i) for i in range(12)]
    assert sorted(ended) == list(range(12))
    assert ended != list(range(12))  # they did end out of order


def test_a_crashing_or_failing_run_never_stops_the_others() -> None:
    def policy(prompt: str) -> str:
        if "add 3 and" in prompt:
            raise RuntimeError("model exploded")
        return answer_policy(prompt)

    made = 0

    def make() -> Any:
        nonlocal made
        made += 1
        if made == 5:
            raise ValueError("no policy for you")
        return policy

    traces = lw.run_many(TASKS[:8], lw.policy_factory(make), make_registry(), concurrency=1)
    reasons = [t.stopped_reason for t in traces]
    assert reasons == ["final", "final", "final", "error", "error", "final", "final", "final"]
    assert traces[3].steps[0].error == "policy raised RuntimeError: model exploded"
    assert traces[4].steps[0].error == "run failed: ValueError: no policy for you"
    assert "Traceback" in traces[4].steps[0].meta["traceback"]
    assert traces[4].meta["batch"] == {"index": 4, "journal": "crashed"}


def test_bad_run_options_fail_each_run_with_a_clear_error_not_the_batch() -> None:
    traces = lw.run_many(TASKS[:2], answer_policy, make_registry(), branching=3)  # a Tree-of-Thoughts setting
    assert [t.stopped_reason for t in traces] == ["error", "error"]
    assert traces[0].steps[0].error == "run failed: TypeError: unknown run option(s) for mode 'react': branching"
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_stepz'"):  # a misspelling: at once
        lw.run_many(TASKS[:2], answer_policy, make_registry(), max_stepz=3)  # type: ignore[call-arg]


def test_concurrency_bounds_the_runs_in_flight() -> None:
    in_flight = peak = 0

    async def policy(prompt: str) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.005)
        in_flight -= 1
        return final("x")

    lw.run_many(TASKS, policy, make_registry(), concurrency=3)
    assert peak == 3


def test_a_policy_factory_gives_each_run_its_own_policy() -> None:
    made: list[lw.ScriptedPolicy] = []

    def make() -> lw.ScriptedPolicy:
        made.append(lw.ScriptedPolicy([final(str(len(made)))]))
        return made[-1]

    traces = lw.run_many(["a", "b", "c"], lw.policy_factory(make), make_registry(), concurrency=1)
    assert [t.final_answer for t in traces] == ["0", "1", "2"]
    for policy in made:
        policy.assert_consumed()


def test_a_per_worker_factory_is_called_once() -> None:
    made = []

    def make() -> Any:
        made.append(1)
        return answer_policy

    traces = lw.run_many(TASKS[:5], lw.policy_factory(make, per="worker"), make_registry())
    assert len(made) == 1 and all(t.stopped_reason == "final" for t in traces)


def test_run_many_and_arun_many_give_the_same_traces() -> None:
    sync = lw.run_many(TASKS[:4], answer_policy, make_registry(), mode="react", max_steps=3)
    run_async = asyncio.run(lw.arun_many(TASKS[:4], answer_policy, make_registry(), max_steps=3))
    assert [t.final_answer for t in sync] == [t.final_answer for t in run_async]
    assert [t.llm_calls for t in sync] == [t.llm_calls for t in run_async] == [2] * 4


def test_rerun_with_a_journal_skips_finished_tasks_and_resumes_interrupted_ones(tmp_path: Any) -> None:
    """First pass: task 2's second model call hangs and the batch is cancelled after the
    others end. Second pass: the finished tasks are read back without a model call;
    task 2 replays its first step from the journal and continues live."""
    store = lw.SQLiteStore(tmp_path / "runs.db")
    tasks = TASKS[:4]

    async def first(prompt: str) -> str:
        if "add 2 and" in prompt and "Observation:" in prompt.split("Question: add")[-1]:
            hanging.set()
            await asyncio.Event().wait()
        return answer_policy(prompt)

    async def first_pass() -> None:
        nonlocal hanging
        hanging = asyncio.Event()
        ended: list[int] = []
        batch = asyncio.ensure_future(
            lw.arun_many(tasks, first, make_registry(), store=store, progress=lambda i, t: ended.append(i))
        )
        await hanging.wait()
        while len(ended) < 3:
            await asyncio.sleep(0.01)
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch

    hanging: asyncio.Event
    try:
        asyncio.run(first_pass())
        ids = [task_run_id(i, t) for i, t in enumerate(tasks)]
        assert [store.load_run(r).status for r in ids] == ["finished", "finished", "interrupted", "finished"]

        prompts: list[str] = []

        def second(prompt: str) -> str:
            prompts.append(prompt)
            return answer_policy(prompt)

        calls: list[tuple[str, dict[str, object]]] = []
        traces = lw.run_many(tasks, second, make_registry(calls), store=store)
        assert [t.final_answer for t in traces] == ["0", "11", "22", "33"]
        assert [t.meta["batch"]["journal"] for t in traces] == ["finished", "finished", "resumable", "finished"]
        assert len(prompts) == 1 and "Question: add 2 and 20" in prompts[0]  # only the missing call
        assert calls == []  # task 2's tool call was replayed from the journal
        assert traces[2].llm_calls == 2 and [s.kind for s in traces[2].steps] == ["action", "final"]
        assert store.load_run(ids[2]).status == "finished"
    finally:
        store.close()


def test_run_ids_follow_the_task_and_its_position() -> None:
    assert task_run_id(3, "add 1 and 2") == task_run_id(3, "add 1 and 2")
    assert task_run_id(3, "add 1 and 2") != task_run_id(4, "add 1 and 2")
    assert task_run_id(3, "add 1 and 2") != task_run_id(3, "add 1 and 3")
    assert task_run_id(0, "x", "nightly").startswith("nightly-000000-")


def test_run_many_rejects_bad_arguments_clearly() -> None:
    with pytest.raises(ValueError, match="concurrency must be a positive integer, got 0"):
        lw.run_many(["a"], answer_policy, make_registry(), concurrency=0)
    with pytest.raises(TypeError, match="tasks must be str; item 1 is int"):
        lw.run_many(["a", 2], answer_policy, make_registry())  # type: ignore[list-item]
    with pytest.raises(TypeError, match="policy_factory needs a callable"):
        lw.policy_factory(3)  # type: ignore[arg-type]


def test_run_many_works_from_inside_a_running_event_loop() -> None:
    async def main() -> list[lw.Trace]:
        return lw.run_many(TASKS[:2], partial(answer_policy), make_registry())

    assert [t.final_answer for t in asyncio.run(main())] == ["0", "11"]
