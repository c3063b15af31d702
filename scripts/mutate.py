"""Plant one-line bugs in src/, one at a time, and check that the fast tests catch each.

    .venv/bin/python scripts/mutate.py            # every mutation, then a table
    .venv/bin/python scripts/mutate.py --only fence --list
    .venv/bin/python scripts/mutate.py --test tests/test_promises.py   # those one test file must catch

Each mutation names a file, an exact piece of one line, its replacement and the test
files that must catch it. The file is changed in place and restored in a `finally`
(Ctrl-C included); at the end the script checks that `git diff --quiet src` holds, so a
run never leaves a bug behind. Tests run with the non-slow marker, `-x -q -p no:cacheprovider`,
and a fresh bytecode folder each time (a stale .pyc of the same size and second would
hide a mutation). Exit status 0 when every mutation is caught.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "src/loopwright/"


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # under src/loopwright/
    original: str  # an exact piece of one line
    replacement: str
    tests: tuple[str, ...]
    nth: int | None = None  # which occurrence, when the piece appears more than once


CORE = "runtime/context.py"
GATE = "runtime/gate.py"
FENCE_TEST = "tests/test_fence_model_text.py"
PROMISES = "tests/test_promises.py"
DBOS_TEST = "tests/test_dbos.py"
DBOS_QUEUE_TEST = "tests/test_dbos_queue.py"
DBOS_CLI_TEST = "tests/test_dbos_cli.py"
MUTATIONS = [
    # exactly-once
    Mutation("exactly-once: no per-key lock (ReWOO fan-out)", GATE,
             "return self._locks.setdefault(ledger, threading.RLock())", "return threading.RLock()",
             ("tests/test_safety.py",)),
    Mutation("exactly-once: callable idempotency_key ignored", GATE,
             "return str(spec(args))", 'return call_key("", args)', ("tests/test_safety.py",)),
    Mutation("exactly-once: named key ignores the other arguments", GATE,
             r'return call_key("", args) + "\x00" + str(args.get(spec))', "return str(args.get(spec))",
             ("tests/test_safety.py",)),
    Mutation("exactly-once: replayed result not put back in the ledger", GATE,
             "self._ledger[self._ledger_key(tool, call.args)] = (call.key, result)", "pass",
             ("tests/test_safety.py",)),
    # the run's wall clock reaches the tools: one call in each driver (every mode, gated or not)
    Mutation("timeout_s not passed to tools: sync driver (ReAct)", "runtime/driver.py",
             "result = ctx.registry.execute(call.name, call.args, timeout_s=timeout)",
             "result = ctx.registry.execute(call.name, call.args)", ("tests/test_react.py",)),
    Mutation("timeout_s not passed to tools: sync driver (ReWOO workers)", "runtime/driver.py",
             "result = ctx.registry.execute(call.name, call.args, timeout_s=timeout)",
             "result = ctx.registry.execute(call.name, call.args)", ("tests/test_rewoo.py",)),
    Mutation("timeout_s not passed to tools: async driver", "runtime/adriver.py",
             "result = await ctx.registry.aexecute(call.name, call.args, timeout_s=timeout)",
             "result = await ctx.registry.aexecute(call.name, call.args)", ("tests/test_asyncrun.py",)),
    Mutation("ReAct: no clock check after a tool call", "modes/react.py",
             "if self.timed and (yield CheckClock()):", "if False:", ("tests/test_react.py",)),
    # fences
    Mutation("fence: & not escaped", "untrusted.py",
             '.replace("&", "&amp;")', "", ("tests/test_prompts.py",)),
    Mutation("fence: < not escaped", "untrusted.py",
             '.replace("<", "&lt;")', "", ("tests/test_prompts.py",)),
    Mutation("fence: > not escaped", "untrusted.py",
             '.replace(">", "&gt;")', "", ("tests/test_prompts.py",)),
    Mutation("fence: source attribute not escaped", "untrusted.py",
             "        source = _attribute(source)", "        pass",
             ("tests/test_prompts.py",)),
    Mutation("fence: < not escaped (injection suite alone)", "untrusted.py",
             '.replace("<", "&lt;")', "", ("tests/test_injection.py",)),
    # model text echoed into later prompts (issue 22): one path at a time
    Mutation("model text: neutralise does not escape", "untrusted.py",
             "escaped = escape_untrusted(text)", "escaped = text", (FENCE_TEST,)),
    Mutation("model text: Observation lines not neutralised", "untrusted.py",
             "escaped = _OBSERVATION_LINE.sub(_entity_first, escaped)", "pass", (FENCE_TEST,)),
    Mutation("model text: ReAct thought (brackets)", "modes/folding.py",
             'f" {neutralise(thought)}\\nAction {k}:', 'f" {thought}\\nAction {k}:', (FENCE_TEST,)),
    Mutation("model text: ReAct thought (json, native transcript)", "modes/folding.py",
             'f" {neutralise(thought)}\\n{action}', 'f" {thought}\\n{action}', (FENCE_TEST,)),
    Mutation("model text: ReAct bracket argument", "modes/react.py",
             'return neutralise(f"{action.name}[', 'return (f"{action.name}[', (FENCE_TEST,)),
    Mutation("model text: ReAct Action Input as written", "modes/react.py",
             'return neutralise(f"Action: {action.name}', 'return (f"Action: {action.name}', (FENCE_TEST,)),
    Mutation("model text: ReAct parse error quoting the reply", "modes/react.py",
             "fence(first_line(raw), 'model')}\", neutralise(observation),",
             "fence(first_line(raw), 'model')}\", observation,", (FENCE_TEST,)),
    Mutation("model text: ReAct answer that does not fit the output type", "modes/react.py",
             "answer = neutralise(parsed.answer)", "answer = parsed.answer", (FENCE_TEST,)),
    Mutation("model text: ReAct output-type error quoting the answer", "modes/react.py",
             "self.pad.append(self.k, parsed.thought, said, neutralise(observation), observation)",
             "self.pad.append(self.k, parsed.thought, said, observation)", (FENCE_TEST,)),
    Mutation("model text: ReAct reflection line", "modes/react.py",
             "Reflection: {neutralise(critique)}", "Reflection: {critique}", (FENCE_TEST,)),
    Mutation("model text: native assistant thought", "modes/react.py",
             '"content": neutralise(action.thought) or None', '"content": action.thought or None', (FENCE_TEST,)),
    Mutation("model text: native tool-call arguments", "modes/react.py",
             '"arguments": neutralise(json.dumps(args, default=str))', '"arguments": json.dumps(args, default=str)',
             (FENCE_TEST,)),
    Mutation("model text: native unusable reply", "modes/react.py",
             '"content": neutralise(raw)', '"content": raw', (FENCE_TEST,)),
    Mutation("model text: native parse error", "modes/react.py",
             '"role": "user", "content": neutralise(observation)', '"role": "user", "content": observation',
             (FENCE_TEST,)),
    Mutation("model text: ReWOO solver retry echoes its reply", "modes/rewoo.py",
             "{neutralise(call.text.strip())}", "{call.text.strip()}", (FENCE_TEST,)),
    Mutation("model text: plan-execute replanner's error", "modes/plan_execute.py",
             'neutralise(plan_error or "")', 'plan_error or ""', (FENCE_TEST,)),
    Mutation("model text: Reflexion critiques in the next attempt", "modes/reflexion.py",
             "{neutralise(c)}", "{c}", (FENCE_TEST,)),
    Mutation("model text: Reflexion rejected answer", "modes/reflexion.py",
             "answer=neutralise(repr(answer))", "answer=repr(answer)", (FENCE_TEST,)),
    Mutation("model text: Reflexion evaluator feedback", "modes/reflexion.py",
             'feedback=neutralise(feedback) or "(no feedback)"', 'feedback=feedback or "(no feedback)"', (FENCE_TEST,)),
    Mutation("model text: Reflexion failed attempt's error", "modes/reflexion.py",
             "error=neutralise(first_line(", "error=(first_line(", (FENCE_TEST,)),
    Mutation("model text: ToT candidate", "modes/tot.py",
             "step=neutralise(text)", "step=text", (FENCE_TEST,)),
    Mutation("model text: tool name in a ReAct action", "modes/react.py",
             'return neutralise(f"Action: {action.name}', 'return (f"Action: {action.name}', (FENCE_TEST,)),
    Mutation("model text: plan ids and tool names in evidence", "prompting/templates.py",
             "{neutralise(sid)} [{neutralise(tool)}]", "{sid} [{tool}]", (FENCE_TEST,)),
    Mutation("model text: quotes in a fence's source", "untrusted.py",
             """return escape_untrusted(source).replace('"', "&quot;")""", "return escape_untrusted(source)",
             (FENCE_TEST,)),
    # the injection suite's containments can fail
    Mutation("scope ignored (injection suite alone)", CORE,
             "self.registry = registry if tools is None else registry.subset(tools)", "self.registry = registry",
             ("tests/test_injection.py",)),
    Mutation("approval gate skipped (injection suite alone)", GATE,
             "if tool is not None and tool.requires_approval:", "if False:", ("tests/test_injection.py",)),
    # boundaries
    Mutation("token budget: >= becomes >", CORE,
             "self.trace.usage.total_tokens >= budget", "self.trace.usage.total_tokens > budget",
             ("tests/test_react.py",)),
    Mutation("ReWOO: a plan of exactly max_steps refused", "modes/rewoo.py",
             "if len(plan) > ctx.limits.max_steps:", "if len(plan) >= ctx.limits.max_steps:",
             ("tests/test_rewoo.py",)),
    Mutation("ReAct: a good action does not reset the parse-error streak", "modes/react.py",
             "self.parse_errors = 0", "pass", ("tests/test_react.py",)),
    Mutation("ReAct: nudge text says count, not count - 1", "modes/react.py",
             "count=count - 1", "count=count", ("tests/test_react.py",)),
    # the store's listing
    Mutation("list_runs: newest first by id, not by creation", "durable/base.py",
             '" ORDER BY created_at DESC, id DESC"', '" ORDER BY id DESC"', ("tests/test_store.py",)),
    # approval fails closed
    Mutation("approval: a truthy non-bool answer approves", "safety.py",
             'return Decision(False, f"approver returned {type(out).__name__}, not a Decision or bool")',
             'return Decision(bool(out), "approved")', ("tests/test_safety.py",)),
    Mutation("approval: Decision takes a non-bool approved", "safety.py",
             "if not isinstance(self.approved, bool):", "if False:", ("tests/test_safety.py",)),
    Mutation("approval: Decision.from_dict takes a truthy approved", "safety.py",
             'cls(d.get("approved") is True, ', 'cls(bool(d.get("approved")), ', ("tests/test_safety.py",)),
    # issue 27: five bugs the fast suite missed, then the same kind of gap around each
    Mutation("ReWOO: a step runs when only some of its references failed", "modes/rewoo.py",
             "if failed:", "if failed and len(failed) == len(deps):", ("tests/test_rewoo.py",)),
    Mutation("memory fence: recalled text reaches the ReAct prompt unfenced", "modes/folding.py",
             "{fence(recalled, 'memory')}", "{recalled}", ("tests/test_react_context_budget.py",)),
    Mutation("approval: with no approver only destructive tools are denied", GATE,
             'return Decision(False, NO_APPROVER), None',
             'return Decision(tool.side_effects != "destructive", NO_APPROVER), None',
             ("tests/test_safety.py",)),
    Mutation("otel: the run span's gen_ai.provider.name renamed gen_ai.system", "otel.py",
             '"gen_ai.provider.name": self.provider,', '"gen_ai.system": self.provider,', ("tests/test_otel.py",),
             nth=1),
    Mutation("cost budget: >= becomes >", "runtime/observers.py",
             "bool(cost >= self.budget)", "bool(cost > self.budget)", ("tests/test_pricing.py",)),
    # one gate for both drivers and every mode: its fast path is one line (ReAct and ReWOO's workers)
    Mutation("approval: the gate's fast path skips an idempotent tool that requires approval", GATE,
             "(tool.idempotent and not tool.requires_approval)", "tool.idempotent", ("tests/test_safety.py",)),
    Mutation("approval: the gate's fast path skips it for ReWOO's parallel workers", GATE,
             "(tool.idempotent and not tool.requires_approval)", "tool.idempotent", ("tests/test_rewoo.py",
                                                                                     "tests/test_safety.py")),
    Mutation("approval: ToT runs an idempotent tool that requires approval in a branch", "modes/tot.py",
             "(not tool.idempotent or tool.requires_approval) and not self.allow_side_effects",
             "not tool.idempotent and not self.allow_side_effects", ("tests/test_tot.py",)),
    Mutation("approval: mcp serve asks only for destructive tools", "mcp/server.py",
             "if tool.requires_approval:", 'if tool.side_effects == "destructive":', ("tests/test_mcp_serve.py",)),
    Mutation("memory fence: Session's recalled text unfenced", "runtime/session.py",
             'lambda text: fence(text, "memory")', "lambda text: text", ("tests/test_session.py",)),
    Mutation("memory fence: turns reach the summarizer unfenced", "memory/summary.py",
             'fence(turn, f"turn#{i}")', "turn", ("tests/test_memory_summary.py",)),
    Mutation("fence: a tool's error text reaches the on_tool_error critique prompt unfenced", "modes/react.py",
             "reflect_step.format(scratchpad=so_far, error=fenced)",
             "reflect_step.format(scratchpad=so_far, error=result.error.as_observation())",
             ("tests/test_reflexion.py",)),
    Mutation("fence: a tool's error text reaches the replanner unfenced", "modes/plan_execute.py",
             'return step.id, fence(failure, f"{step.tool}#{step.id}"), None, False',
             "return step.id, failure, None, False", ("tests/test_plan_execute.py",)),
    Mutation("fence: ReWOO and replanner evidence unfenced", "prompting/templates.py",
             "{fence(obs, f'{tool}#{sid}')}", "{obs}", ("tests/test_rewoo.py",)),
    Mutation("fence: ReAct observations unfenced", "modes/react.py",
             'fenced = fence(observation, f"{name}#{call_key}")', "fenced = observation", ("tests/test_react.py",)),
    Mutation("fence: ToT observations unfenced", "modes/tot.py",
             'observation=fence(result.observation, f"{name}#{node_id}"))', "observation=result.observation)",
             ("tests/test_tot.py",)),
    Mutation("fence: an unusable reply's text unfenced", "modes/react.py",
             "{fence(first_line(raw), 'model')}", "{first_line(raw)}", ("tests/test_react.py",)),
    Mutation("plan-execute: a failed step that is not the last one does not stop the plan",
             "modes/plan_execute.py", "if result.error is not None:", "if result.error is not None and step is plan[-1]:",
             ("tests/test_plan_execute.py",)),
    # budgets at their exact boundary
    Mutation("plan-execute: a plan of exactly max_steps refused", "modes/plan_execute.py",
             "len(plan) > ctx.limits.max_steps:", "len(plan) >= ctx.limits.max_steps:", ("tests/test_plan_execute.py",)),
    Mutation("plan-execute: max_replans >= becomes >", "modes/plan_execute.py",
             "if ctx.trace.replans >= ctx.limits.max_replans:", "if ctx.trace.replans > ctx.limits.max_replans:",
             ("tests/test_plan_execute.py",)),
    Mutation("ReAct: max_steps < becomes <=", "modes/react.py",
             "while trace.llm_calls - self.first_call < self.cap:", "while trace.llm_calls - self.first_call <= self.cap:",
             ("tests/test_react.py",)),
    Mutation("ReAct: max_nudges >= becomes >", "modes/react.py",
             "nudged >= limits.max_nudges:", "nudged > limits.max_nudges:", ("tests/test_repeats.py",)),
    Mutation("ReAct: repeat threshold >= becomes >", "modes/react.py",
             "if count >= ctx.limits.repeat_threshold:", "if count > ctx.limits.repeat_threshold:", ("tests/test_react.py",)),
    Mutation("ReAct: max_parse_errors >= becomes > (observe path)", "modes/react.py",
             "parse_errors >= limits.max_parse_errors", "parse_errors > limits.max_parse_errors",
             ("tests/test_react.py",), nth=1),
    Mutation("ReAct: max_parse_errors >= becomes > (an answer that misfits output_type)", "modes/react.py",
             "parse_errors >= limits.max_parse_errors", "parse_errors > limits.max_parse_errors",
             ("tests/test_outputs.py",), nth=2),
    Mutation("ReAct: a critique allowed past max_steps", "modes/react.py",
             "and ctx.trace.llm_calls - self.first_call < self.cap):", "and ctx.trace.llm_calls - self.first_call <= self.cap):",
             ("tests/test_reflexion.py",)),
    Mutation("Reflexion: max_reflections >= becomes >", "modes/reflexion.py",
             "if len(critiques) >= s.max_reflections:", "if len(critiques) > s.max_reflections:",
             ("tests/test_reflexion.py",)),
    Mutation("Reflexion: a critique without room for another attempt", "modes/reflexion.py",
             "if max_steps - trace.llm_calls < 2:", "if max_steps - trace.llm_calls < 1:", ("tests/test_reflexion.py",)),
    Mutation("ToT: max_steps >= becomes >", "modes/tot.py",
             "if self.ctx.trace.llm_calls >= self.ctx.limits.max_steps:",
             "if self.ctx.trace.llm_calls > self.ctx.limits.max_steps:", ("tests/test_tot.py",)),
    Mutation("ToT: max_nodes >= becomes >", "modes/tot.py",
             "elif self.nodes >= self.max_nodes:", "elif self.nodes > self.max_nodes:", ("tests/test_tot.py",)),
    Mutation("ReAct: a prompt of exactly context_tokens is folded", "modes/folding.py",
             "if estimate_tokens(prompt) <= budget:", "if estimate_tokens(prompt) < budget:",
             ("tests/test_react_context_budget.py",)),
    Mutation("memory: a section of exactly its budget is shrunk", "memory/tiered.py",
             "if used <= budget_tokens:", "if used < budget_tokens:", ("tests/test_memory_tiered.py",)),
    # issue 40: twelve behaviours no fast test guarded, each with two or three ways to break it
    Mutation("tool_finished: a failing tool's event says it passed", "events.py",
             "result.error is not None))", "result.error is None))", (PROMISES,)),
    Mutation("tool_finished: the event's dict drops error", "events.py",
             '"seconds": self.seconds, "error": self.error}', '"seconds": self.seconds}', (PROMISES,)),
    Mutation("child budget: a child's own token_budget wins over what the parent has left", "runtime/agents.py",
             "else min(spec.token_budget, left)", "else spec.token_budget", (PROMISES,)),
    Mutation("child budget: the child gets the parent's whole token_budget, not what is left", "runtime/agents.py",
             "left = max(1, budget - parent.trace.usage.total_tokens)", "left = max(1, budget)", (PROMISES,)),
    Mutation("child budget: the larger of the two token budgets", "runtime/agents.py",
             "else min(spec.token_budget, left)", "else max(spec.token_budget, left)", (PROMISES,)),
    Mutation("child approval: a child's own approver is asked before the parent's", "runtime/agents.py",
             'out["approver"] = parent.gate.approver', 'out["approver"] = spec.approver or parent.gate.approver',
             (PROMISES,)),
    Mutation("child approval: a child keeps its own approver", "runtime/agents.py",
             'out["approver"] = parent.gate.approver', 'out["approver"] = spec.approver', (PROMISES,)),
    Mutation("child approval: a child's own approver decides under a parent that has none", "runtime/agents.py",
             'out["approver"] = parent.gate.approver', 'out["approver"] = parent.gate.approver or spec.approver',
             (PROMISES,)),
    Mutation("tool search: one search loads K tools", "modes/toolsearch.py",
             "self.index.rank(query, min(self.k, PER_SEARCH),", "self.index.rank(query, self.k,", (PROMISES,)),
    Mutation("tool search: one search loads the per-search count even past a smaller K", "modes/toolsearch.py",
             "self.index.rank(query, min(self.k, PER_SEARCH),", "self.index.rank(query, PER_SEARCH,", (PROMISES,)),
    Mutation("kept output: a failing tool's error dropped beside the handle", "tools/handles.py",
             "observation=view(text, handle, cap))", "observation=view(text, handle, cap), error=None)",
             (PROMISES,)),
    Mutation("kept output: the journal drops a failed call's error kind (its replay passes)", "durable/journal.py",
             "else (err.kind, err.message)",
             "else (None, err.message)", (PROMISES,)),
    Mutation("folding: the newest results are stubbed first", "modes/folding.py",
             "for e in self.entries[:-1]:  # the newest step stays whole",
             "for e in reversed(self.entries[:-1]):  # the newest step stays whole", (PROMISES,)),
    Mutation("folding: stubbing skips the oldest step and may take the newest", "modes/folding.py",
             "for e in self.entries[:-1]:  # the newest step stays whole",
             "for e in self.entries[1:]:  # the newest step stays whole", (PROMISES,)),
    Mutation("AG-UI: an error-only step's TOOL_CALL_RESULT is empty", "ui/agui.py",
             'content = step.observation if step.observation is not None else (step.error or "")',
             'content = step.observation or ""', (PROMISES,)),
    Mutation("AG-UI: an error-only step's TOOL_CALL_RESULT says nothing of the error", "ui/agui.py",
             'else (step.error or "")', 'else ""', (PROMISES,)),
    Mutation("server: keep_runs counts every run, waiting ones included", "ui/server.py",
             "len(self.finished) > self.keep_runs", "len(self.runs) > self.keep_runs", ("tests/test_ui_asgi.py",)),
    Mutation("server: the run that started first is forgotten first, waiting or not", "ui/server.py",
             "run_id, size = self.finished.popitem(last=False)",
             "run_id = next(iter(self.runs)); size = self.finished.pop(run_id, 0)", (PROMISES,)),
    Mutation("server: an ended run holds the approval whose denial its loop never heard (f96d5c6)", "ui/server.py",
             "live.pending.clear()", "pass", ("tests/test_ui_asgi.py",)),
    Mutation("async cancel: ReWOO's started workers are not cancelled", "runtime/adriver.py",
             "task.cancel()", "pass", (PROMISES,)),
    Mutation("async cancel: only the first ReWOO worker is cancelled", "runtime/adriver.py",
             "for task in self._tasks:", "for task in list(self._tasks)[:1]:", (PROMISES,)),
    Mutation("exactly-once: a failed side effect is reused in the run", GATE,
             "if admitted.ledger is not None and result.error is None:", "if admitted.ledger is not None:",
             (PROMISES,)),
    Mutation("exactly-once: a replayed failed side effect is reused after resume", GATE,
             "if tool is not None and not tool.idempotent and result.error is None:",
             "if tool is not None and not tool.idempotent:", (PROMISES,)),
    Mutation("exactly-once: a journaled failure replays as a success", "durable/journal.py",
             'err = None if kind is None else ToolError(name, error or "", kind)', "err = None", (PROMISES,)),
    Mutation("approval: the decision is not journaled", GATE,
             "journal.record_decision(request, decision)", "pass", (PROMISES,)),
    Mutation("approval: a journaled decision is not looked up", GATE,
             "known = journal.recorded_decision(request.key)", "known = None", (PROMISES,)),
    Mutation("approval: a decision is journaled as still pending", "durable/journal.py",
             "self._approval(request, decision)", "self._approval(request, None)", (PROMISES,)),
    Mutation("local model: evaluated tokens are the last decode's (complete)", "models/llamacpp.py",
             "evaluated = self._eval_sizes[0] if self._eval_sizes else 0",
             "evaluated = self._eval_sizes[-1] if self._eval_sizes else 0", (PROMISES,), nth=1),
    Mutation("local model: evaluated tokens are the last decode's (stream)", "models/llamacpp.py",
             "evaluated = self._eval_sizes[0] if self._eval_sizes else 0",
             "evaluated = self._eval_sizes[-1] if self._eval_sizes else 0", (PROMISES,), nth=2),
    Mutation("local model: evaluated tokens are every decode's, the reply's included", "models/llamacpp.py",
             "evaluated = self._eval_sizes[0] if self._eval_sizes else 0", "evaluated = sum(self._eval_sizes)",
             (PROMISES,), nth=1),
    Mutation("local model: evaluated tokens are the tokens sent", "models/llamacpp.py",
             "evaluated = self._eval_sizes[0] if self._eval_sizes else 0", "evaluated = len(tokens)",
             (PROMISES,), nth=1),
    Mutation("local model: decode sizes not cleared between calls", "models/llamacpp.py",
             "self._eval_sizes.clear()", "pass", (PROMISES,)),
    # DBOS: what the engine does not know (tests/test_dbos.py)
    Mutation("dbos: a tool call's start is not recorded (a killed call runs again)", "durable/engine.py",
             'self._write("tool_start", {"key": key, "name": name, "args": json.loads(_dumps(args))})', "pass",
             (DBOS_TEST,)),
    Mutation("dbos: a call started and not finished is not in doubt", "durable/engine.py",
             'found = ("started", None)', "return None", (DBOS_TEST,)),
    Mutation("dbos: a model call's record holds its whole prompt", "durable/engine.py",
             'record["prompt_base"], record["prompt"] = last[0], request.prompt[len(last[1]):]',
             'record["prompt"] = request.prompt', (DBOS_TEST,)),
    Mutation("dbos: a lookup does not replay the records before it", "durable/engine.py",
             "while self._at <= index:", "while False:", (DBOS_TEST,)),
    Mutation("dbos: a settlement is not waited for", "durable/engine.py",
             "message = self._receive(settle_topic(key), 0.0)", "message = None", (DBOS_TEST,)),
    Mutation("dbos: an approval is not waited for", "durable/engine.py",
             "return decision_of(self._receive(approval_topic(request.key), timeout_s), timeout_s)",
             'return Decision(True, "approved")', (DBOS_TEST,)),
    # DBOS queues, workers and the CLI on DBOS (tests/test_dbos_queue.py, tests/test_dbos_cli.py)
    Mutation("dbos queue: run_many's traces not in input order", "durable/dbos.py",
             "return [run.result() for run in runs]", "return [run.result() for run in reversed(runs)]",
             (DBOS_QUEUE_TEST,)),
    Mutation("dbos queue: an unregistered queue is not refused", "durable/dbos.py",
             "        if found is None:\n", "        if False:\n", (DBOS_QUEUE_TEST,)),
    Mutation("dbos queue: a batch's runs get new ids (enqueued again, they run again)", "interfaces/dbos_cli.py",
             'run_id=task_run_id(i, task, args.batch_id or "batch"))', "run_id=None)", (DBOS_QUEUE_TEST,)),
    Mutation("dbos worker: the queue is not registered", "interfaces/dbos_cli.py",
             "DBOS.register_queue(args.queue,", 'DBOS.register_queue(args.queue + "-unserved",', (DBOS_QUEUE_TEST,)),
    Mutation("dbos worker: launched without its executor id (a relaunch recovers nothing)", "interfaces/dbos_cli.py",
             '"executor_id": executor_id, ', "", (DBOS_QUEUE_TEST,)),
    Mutation("dbos cli: runs --dbos reads the journal instead", "interfaces/runs.py",
             "        if args.dbos:\n", "        if False:\n", (DBOS_CLI_TEST,)),
    Mutation("dbos cli: an unfinished run's tool results left out of its trace", "durable/dbos.py",
             'elif op.kind == "tool" and payload["key"] in started:', 'elif False:', (DBOS_CLI_TEST,)),
    Mutation("dbos cli: a run that was settled and finished still listed in doubt", "durable/dbos.py",
             'str(wf.status) == "CANCELLED" and any(', 'any(', (DBOS_CLI_TEST,)),
    Mutation("dbos: a child agent's workflow gets none of its parent's limits", "durable/dbos.py",
             "limits = _child_limits(inner, parent)", "limits = {}", (DBOS_TEST,)),
    Mutation("dbos: a child agent's events do not reach its parent's sinks", "durable/dbos.py",
             "sinks = () if parent.events is None else parent.events.sinks", "sinks = ()", (DBOS_TEST,)),
    Mutation("dbos: a run stopped in doubt does not name dbos.settle", "durable/dbos.py",
             'settle=f"{__name__}.settle")', ")", (DBOS_TEST,)),
]


def apply(text: str, m: Mutation) -> str:
    """The file's text with the mutation planted; ValueError if the piece is not where expected."""
    starts = [found.start() for found in re.finditer(re.escape(m.original), text)]
    if m.nth is None and len(starts) != 1:
        raise ValueError(f"{m.path}: {m.original!r} occurs {len(starts)} times, expected once")
    if m.nth is not None and len(starts) < m.nth:
        raise ValueError(f"{m.path}: {m.original!r} occurs {len(starts)} times, wanted occurrence {m.nth}")
    at = starts[0 if m.nth is None else m.nth - 1]
    return text[:at] + m.replacement + text[at + len(m.original):]


def run_tests(tests: tuple[str, ...]) -> tuple[bool, str]:
    """(passed, the first failing test or the error), on the non-slow tests only."""
    with tempfile.TemporaryDirectory(prefix="lw-mutate-pyc-") as pyc:
        env = {**os.environ, "PYTHONPYCACHEPREFIX": pyc, "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
        )
    failed = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", done.stdout, re.MULTILINE)
    if done.returncode == 0:
        return True, ""
    if failed:
        return False, failed.group(1)
    return False, f"pytest exit {done.returncode}: {done.stdout.strip().splitlines()[-1:]}"


def src_is_clean() -> bool:
    return subprocess.run(["git", "diff", "--quiet", "--", "src"], cwd=ROOT).returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the mutations whose name contains this text")
    parser.add_argument("--test", help="run the mutations that this test file must catch")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if (args.only is None or args.only in m.name)
              and (args.test is None or args.test in m.tests)]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path}: {m.original!r} -> {m.replacement!r} [{' '.join(m.tests)}]")
        return 0
    if not src_is_clean():
        print("src/ has uncommitted changes: commit or stash them first, so the restore can be checked",
              file=sys.stderr)
        return 2
    for m in chosen:  # every piece must be where the list says before anything is touched
        apply((ROOT / PKG / m.path).read_text(encoding="utf-8"), m)
    baseline = sorted({t for m in chosen for t in m.tests})
    ok, why = run_tests(tuple(baseline))
    if not ok:
        print(f"the unmutated tests fail ({why}): fix that first", file=sys.stderr)
        return 2

    rows: list[tuple[str, str, str]] = []
    started = time.monotonic()
    try:
        for m in chosen:
            path = ROOT / PKG / m.path
            original = path.read_text(encoding="utf-8")
            try:
                path.write_text(apply(original, m), encoding="utf-8")
                passed, failing = run_tests(m.tests)
            finally:
                path.write_text(original, encoding="utf-8")
            rows.append((m.name, failing or "-", "SURVIVED" if passed else "caught"))
            print(f"{rows[-1][2]:<8} {m.name}", file=sys.stderr, flush=True)
    finally:
        clean = src_is_clean()
    width = max(len(r[0]) for r in rows) if rows else 10
    by = max((len(r[1]) for r in rows), default=9)
    print(f"| {'mutation':<{width}} | {'caught by':<{by}} | result   |")
    print(f"|{'-' * (width + 2)}|{'-' * (by + 2)}|----------|")
    for name, failing, result in rows:
        print(f"| {name:<{width}} | {failing:<{by}} | {result:<8} |")
    caught = sum(r[2] == "caught" for r in rows)
    print(f"\n{caught}/{len(rows)} caught in {time.monotonic() - started:.0f} s; "
          f"src restored: {'yes' if clean else 'NO (git diff src is not empty)'}")
    return 0 if clean and caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
