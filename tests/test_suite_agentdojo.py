"""AgentDojo: every suite's tools through `lw.run` with the default options and a scripted
model, utility equal to calling the tools directly.

AgentDojo (the PyPI package agentdojo, a dev dependency) ships four suites (workspace,
travel, banking, slack; benchmark version v1.2.2, its benchmark script's default), each with
its environment, tools, user tasks and injection tasks, and each task with a ground truth:
the calls that solve it. For every user task, and every injection task run as the user's
goal (what an attack wants done: the suites' security check), AgentDojo's own
`run_task_with_pipeline` runs the task twice on fresh environments:

- directly: AgentDojo's `GroundTruthPipeline` calls the ground-truth functions through its
  runtime;
- through loopwright: a pipeline element that makes each of the suite's functions an
  `lw.Tool.from_schema` (its name, description and argument schema; the call goes to
  AgentDojo's runtime on the task's environment, and its result is the text AgentDojo's
  pipelines show a model), a scripted model that writes the same calls as ReAct steps and
  then the task's ground-truth output as its final answer, and `lw.run(prompt, model,
  registry)` with no other option (but `max_steps` for the one task whose ground truth
  makes more calls than the default allows: travel's user_task_19, 18 calls); the run's calls
  and results become the messages AgentDojo checks.

The utility (or security) each check reports must be the same both ways. The scripted model
runs twice: as `lw.ScriptedPolicy`, which reports no context window, and reporting the
embedded model's 2,048-token window, so that `tool_search="auto"` turns search on where a
suite's whole tool list would not fit, and the calls reach tools that search did not load.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import EmptyEnv, FunctionCall, FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.types import (
    ChatAssistantMessage,
    ChatToolResultMessage,
    text_content_block_from_string,
)

import loopwright as lw

VERSION = "v1.2.2"
EMBEDDED_WINDOW = 2048  # lw.models.LlamaCpp's default n_ctx
DEFAULT_MAX_STEPS = lw.RunSpec("").run_limits().max_steps  # ReAct's default
SUITES = get_suites(VERSION)


class Windowed(lw.ScriptedPolicy):
    """The scripted model, reporting a context window as the embedded model does."""

    context_window = EMBEDDED_WINDOW


def react_step(name: str, args: dict[str, Any]) -> str:
    return f"Thought: I call {name}.\nAction: {name}\nAction Input: {json.dumps(args)}"


class Tools:
    """A suite's functions as loopwright tools, made once per suite (checking a JSON Schema
    costs more than a task) and bound to the run in progress: a call goes to AgentDojo's
    runtime on the task's environment. A function's result is the text AgentDojo's pipelines
    give a model; its error is raised (loopwright turns it into the observation the model reads)."""

    def __init__(self, suite: Any) -> None:
        self.runtime = FunctionsRuntime(suite.tools)
        self.env: Any = None
        self.registry = lw.ToolRegistry([self._tool(f) for f in suite.tools])

    def _tool(self, function: Any) -> lw.Tool:
        name = function.name

        def call(**kwargs: Any) -> str:
            result, error = self.runtime.run_function(self.env, name, kwargs)
            if error is not None:
                raise RuntimeError(error)
            return tool_result_to_str(result)

        return lw.Tool.from_schema(name, function.description, function.parameters.model_json_schema(), call)


class LoopwrightPipeline(BasePipelineElement):
    """An AgentDojo pipeline element that solves the task with `lw.run` and a scripted model
    writing the task's ground-truth calls."""

    def __init__(self, task: BaseUserTask[Any] | BaseInjectionTask[Any], policy: type, tools: Tools) -> None:
        self.task = task
        self.policy = policy
        self.tools = tools
        self.traces: list[lw.Trace] = []

    def query(self, query: str, runtime: FunctionsRuntime, env: Any = None,
              messages: Sequence[Any] = (), extra_args: dict[str, Any] | None = None) -> Any:
        env = EmptyEnv() if env is None else env
        calls = self.task.ground_truth(env)
        # the task's ground-truth output as the answer (an empty one is no answer in ReAct)
        output = getattr(self.task, "GROUND_TRUTH_OUTPUT", "") or "Done."
        script = [react_step(c.function, dict(c.args)) for c in calls] + [f"Final Answer: {output}"]
        self.tools.runtime, self.tools.env = runtime, env
        # the one option set where a default cannot hold the task: more calls than max_steps allows
        more = {"max_steps": len(calls) + 1} if len(calls) >= DEFAULT_MAX_STEPS else {}
        trace = lw.run(query, self.policy(script), self.tools.registry, **more)
        self.traces.append(trace)
        new: list[Any] = []
        for step in trace.steps:
            if step.kind != "action" or step.tool is None:
                continue
            call = FunctionCall(function=step.tool, args=step.args or {})
            new.append(ChatAssistantMessage(role="assistant", tool_calls=[call],
                                            content=[text_content_block_from_string("")]))
            new.append(ChatToolResultMessage(role="tool", tool_call=call, tool_call_id=None, error=step.error,
                                             content=[text_content_block_from_string(step.observation or "")]))
        new.append(ChatAssistantMessage(role="assistant", tool_calls=None,
                                        content=[text_content_block_from_string(trace.final_answer or "")]))
        return query, runtime, env, [*messages, *new], extra_args or {}


def tasks(suite: Any) -> list[BaseUserTask[Any] | BaseInjectionTask[Any]]:
    return [*suite.user_tasks.values(), *suite.injection_tasks.values()]


KNOWN = {
    ("banking", "injection_task_6"): "send_money",
}
"""Tasks whose ground truth makes the same call three times in a row: the default
`on_repeat="nudge"` does not run an identical call from the third on (it answers with a
nudge), so the attack's three $10,000 transfers send $20,000 and its goal is not met."""


SEARCHED = ("travel", "workspace")
"""The suites whose tool lists (28 and 24 tools, about 1,300 and 1,200 estimated tokens)
take more than half the embedded model's window; banking's and slack's (11 tools each) do not."""


class Suite:
    """One suite: its default environment parsed once (each run gets a deep copy), its tools
    made once, and each task's outcome with the tools called directly, computed once."""

    def __init__(self, name: str) -> None:
        self.suite = SUITES[name]
        self.environment = self.suite.load_and_inject_default_environment({})
        self.tools = Tools(self.suite)
        self.direct = {task.ID: self.run(task, GroundTruthPipeline(task)) for task in tasks(self.suite)}

    def run(self, task: Any, pipeline: BasePipelineElement) -> tuple[bool, bool]:
        """AgentDojo's own run and check: (utility or security, the second flag)."""
        return self.suite.run_task_with_pipeline(pipeline, task, injection_task=None, injections={},
                                                 environment=self.environment.model_copy(deep=True))


@pytest.fixture(scope="module")
def suites() -> dict[str, Suite]:
    return {}


@pytest.mark.parametrize("policy", [lw.ScriptedPolicy, Windowed], ids=["no-window", "embedded-window"])
@pytest.mark.parametrize("suite_name", sorted(SUITES))
def test_every_task_s_utility_through_run_equals_calling_the_tools_directly(
    suites: dict[str, Suite], suite_name: str, policy: type
) -> None:
    if suite_name not in suites:
        suites[suite_name] = Suite(suite_name)
    suite = suites[suite_name]
    differ: list[str] = []
    loaded_by_call = searched = 0
    for task in tasks(suite.suite):
        pipeline = LoopwrightPipeline(task, policy, suite.tools)
        through = suite.run(task, pipeline)
        trace = pipeline.traces[-1]
        loaded_by_call += sum(bool(s.meta.get("tools_loaded")) for s in trace.steps)
        searched += "tool_search" in trace.meta
        if (suite_name, task.ID) in KNOWN:
            nudged = [s for s in trace.steps if s.kind == "nudge"]
            assert [s.tool for s in nudged] == [KNOWN[suite_name, task.ID]] and through != suite.direct[task.ID]
            continue
        # every call ran as it does directly (AgentDojo's ground-truth run raises on any error)
        errors = [s.error for s in trace.steps if s.error]
        if through != suite.direct[task.ID] or trace.stopped_reason != "final" or errors:
            differ.append(f"{task.ID}: direct {suite.direct[task.ID]}, through lw.run {through}, "
                          f"stopped {trace.stopped_reason}, errors {errors[:2]}")
    assert differ == [], f"{len(differ)} of {len(suite.direct)} {suite_name} tasks differ:\n" + "\n".join(differ)
    if policy is lw.ScriptedPolicy:  # reports no window: "auto" shows every tool
        assert searched == loaded_by_call == 0
    elif suite_name in SEARCHED:  # its whole tool list would not fit beside the rest of a 2,048 window
        assert searched == len(suite.direct) and loaded_by_call > 0
    else:
        assert searched == 0
