"""A side effect whose outcome is unknown stops the run instead of being reported as a
failure: a non-idempotent tool call that outlives its deadline is abandoned while it
still runs, so it may take effect, exactly as after a crash. Reported to the model as a
failed call, the model calls it again and the invoice is paid twice."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import loopwright as lw
from conftest import STORE_KINDS, act, final, open_journal

PAY_TWICE = [act("pay", '{"invoice": "42"}', "pay it"), act("pay", '{"invoice": "42"}', "it failed, retry"),
             final("paid")]


def payment_tools(paid: list[str], release: threading.Event, abandoned: list[threading.Thread],
                  **options: object) -> lw.ToolRegistry:
    """`pay` waits for `release` before the payment goes through: a call abandoned at its
    deadline completes the payment later, on its own thread."""

    @lw.tool(side_effects="write", timeout_s=0.05, **options)  # type: ignore[call-overload]
    def pay(invoice: str) -> str:
        """Pay an invoice."""
        abandoned.append(threading.current_thread())
        release.wait(30)
        call = lw.current_call()
        paid.append(invoice if call is None else call.key)
        return f"paid {invoice}"

    return lw.ToolRegistry([pay])


def settle_threads(release: threading.Event, abandoned: list[threading.Thread]) -> None:
    release.set()
    for thread in abandoned:
        thread.join(30)


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    with open_journal(request.param, request, tmp_path / "runs.db") as s:
        yield s


def test_a_timed_out_payment_stops_the_run_in_doubt_and_is_paid_once(store):
    paid: list[str] = []
    release, abandoned = threading.Event(), []
    trace = lw.run("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE), payment_tools(paid, release, abandoned),
                   store=store, run_id="r")
    settle_threads(release, abandoned)
    assert paid == ["r:1"]  # the abandoned call went through; the model never got to retry
    assert trace.stopped_reason == "error" and trace.llm_calls == 1
    assert trace.steps[-1].kind == "error" and "whether it took effect is unknown" in trace.steps[-1].error
    assert trace.steps[-1].meta["in_doubt"] is True and trace.steps[-1].meta["call_key"] == "r:1"
    record = store.load_run("r")
    assert record.status == "blocked"
    [call] = store.unsettled("r")  # a person checks, then settles it, as after a crash
    assert (call.key, call.tool, call.call_key) == ("1", "pay", "r:1")


def test_a_settled_timed_out_payment_resumes_to_the_answer_without_paying_again(store):
    paid: list[str] = []
    release, abandoned = threading.Event(), []
    lw.run("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE), payment_tools(paid, release, abandoned),
           store=store, run_id="r")
    settle_threads(release, abandoned)
    store.settle("r", "1", result="paid 42")
    trace = lw.resume("r", lw.ScriptedPolicy([final("paid")]), payment_tools(paid, release, abandoned), store=store)
    assert trace.stopped_reason == "final" and trace.final_answer == "paid"
    assert paid == ["r:1"]


def test_a_timed_out_call_that_dedupes_on_its_key_is_run_again_with_the_same_key_on_resume(store):
    paid: list[str] = []
    release, abandoned = threading.Event(), []
    trace = lw.run("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE),
                   payment_tools(paid, release, abandoned, dedupes_on_call_key=True), store=store, run_id="r")
    assert trace.stopped_reason == "error" and "same call key" in trace.steps[-1].error
    settle_threads(release, abandoned)
    resumed = lw.resume("r", lw.ScriptedPolicy([final("paid")]),
                        payment_tools(paid, release, abandoned, dedupes_on_call_key=True), store=store)
    assert resumed.stopped_reason == "final"
    assert paid == ["r:1", "r:1"]  # both with one key: the payment system keeps one


def test_without_a_journal_a_timed_out_payment_still_stops_the_run():
    paid: list[str] = []
    release, abandoned = threading.Event(), []
    trace = lw.run("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE), payment_tools(paid, release, abandoned))
    settle_threads(release, abandoned)
    assert len(paid) == 1 and trace.stopped_reason == "error" and trace.steps[-1].meta["in_doubt"] is True


def test_a_timed_out_read_is_still_an_observation_the_model_sees():
    release = threading.Event()

    @lw.tool(side_effects="read", timeout_s=0.05)
    def lookup(invoice: str) -> str:
        """Look an invoice up."""
        release.wait(30)
        return "open"

    trace = lw.run("t", lw.ScriptedPolicy([act("lookup", '{"invoice": "42"}'), final("unknown")]),
                   lw.ToolRegistry([lookup]))
    release.set()
    assert trace.stopped_reason == "final" and trace.steps[0].error.startswith("timeout")


def test_a_timed_out_payment_in_the_async_driver_stops_the_run_in_doubt(tmp_path):
    import asyncio

    paid: list[str] = []
    release, abandoned = threading.Event(), []
    with lw.SQLiteStore(tmp_path / "runs.db") as store:
        trace = asyncio.run(lw.arun("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE),
                                    payment_tools(paid, release, abandoned), store=store, run_id="r"))
        settle_threads(release, abandoned)
        assert paid == ["r:1"] and trace.stopped_reason == "error"
        assert store.load_run("r").status == "blocked" and [c.key for c in store.unsettled("r")] == ["1"]


def test_a_payment_cut_by_the_runs_own_timeout_stops_it_as_timeout_with_the_call_in_doubt(store):
    paid: list[str] = []
    release, abandoned = threading.Event(), []

    @lw.tool(side_effects="write")
    def pay(invoice: str) -> str:
        """Pay an invoice."""
        abandoned.append(threading.current_thread())
        release.wait(30)
        paid.append(invoice)
        return f"paid {invoice}"

    trace = lw.run("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE), lw.ToolRegistry([pay]), store=store,
                   run_id="r", timeout_s=0.2)
    settle_threads(release, abandoned)
    assert paid == ["42"] and trace.stopped_reason == "timeout" and trace.steps[-1].meta["in_doubt"]
    assert store.load_run("r").status == "blocked" and [c.key for c in store.unsettled("r")] == ["1"]


IN_DOUBT = ("pay did not finish in time (timeout after 0.05s) and was abandoned while it ran; it is not idempotent, "
            "so whether it took effect is unknown and it was not reported to the model as failed (a retry could "
            "repeat it). ")


@pytest.mark.parametrize("journaled", ["journal", "dedupes", "none"])
def test_the_in_doubt_step_names_the_call_and_says_what_a_person_can_do(journaled, tmp_path):
    paid: list[str] = []
    release, abandoned = threading.Event(), []
    options = {"dedupes_on_call_key": True} if journaled == "dedupes" else {}
    durable = {} if journaled == "none" else {"store": lw.SQLiteStore(tmp_path / "runs.db"), "run_id": "r"}
    trace = lw.run("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE), payment_tools(paid, release, abandoned, **options),
                   **durable)
    settle_threads(release, abandoned)
    step = trace.steps[-1]
    then = {
        "journal": "Check whether it took effect, then settle it (store.settle or `loopwright runs settle`), "
                   "resume with rerun_unfinished=True, or finish the run by hand.",
        "dedupes": "A resume runs it again with the same call key, which its system deduplicates on; "
                   "or settle it (store.settle or `loopwright runs settle`).",
        "none": "Check whether it took effect before running the task again.",
    }[journaled]
    assert (step.kind, step.tool, step.args, step.error) == ("error", "pay", {"invoice": "42"}, IN_DOUBT + then)
    assert step.meta == ({"in_doubt": True} if journaled == "none" else {"in_doubt": True, "call_key": "r:1"})


def test_a_tool_that_cannot_tell_whether_it_took_effect_stops_the_run_in_its_own_words(tmp_path):
    """kind "in_doubt": the gate stops the run as for a timed-out side effect, and says the
    tool's reason, not "did not finish in time"."""
    tried: list[str] = []

    @lw.tool(side_effects="write")
    def pay(invoice: str) -> str:
        """Pay an invoice."""
        tried.append(invoice)
        raise lw.ToolError("pay", "the provider dropped the connection after reading the request", "in_doubt")

    store = lw.SQLiteStore(tmp_path / "runs.db")
    trace = lw.run("pay invoice 42", lw.ScriptedPolicy(PAY_TWICE), lw.ToolRegistry([pay]), store=store, run_id="r")
    step = trace.steps[-1]
    assert step.error == (
        "pay cannot tell whether it took effect: the provider dropped the connection after reading the request. "
        "It is not idempotent, so it was not reported to the model as failed (a retry could repeat it). Check "
        "whether it took effect, then settle it (store.settle or `loopwright runs settle`), resume with "
        "rerun_unfinished=True, or finish the run by hand.")
    assert step.meta == {"in_doubt": True, "call_key": "r:1"}
    assert tried == ["42"] and trace.stopped_reason == "error" and trace.llm_calls == 1
    assert store.load_run("r").status == "blocked" and [c.key for c in store.unsettled("r")] == ["1"]
