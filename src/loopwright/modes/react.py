"""ReAct: one model call per step, interleaving thought, action and observation.

The scratchpad is append-only: the prompt for step k+1 is the prompt for step k plus
step k's block, so a KV-cached model evaluates only the new tokens. Every model call
yields exactly one Step, so `llm_calls == len(steps)`.
"""

from __future__ import annotations

import json
from typing import Any

from loopwright.errors import ParseError
from loopwright.guards import RepeatDetector
from loopwright.modes._critique import reflect
from loopwright.modes.folding import MEMORY_OVERHEAD, Folding, step_block
from loopwright.modes.machine import (
    CallTool,
    CheckClock,
    Machine,
    ModelCall,
    PolicyFailed,
    Record,
    RunView,
    Settings,
    StepGen,
    Stop,
    recorded,
)
from loopwright.modes.toolsearch import (
    SEARCH_TOOL,
    ToolSelection,
    begin,
    chosen,
    load_called,
    query_of,
    searched,
)
from loopwright.parsing.steps import Action, FinalAnswer, parse_react_step
from loopwright.parsing.toolcalls import parse_tool_calls
from loopwright.policy import ModelRequest
from loopwright.prompting.examples import worked_examples
from loopwright.prompting.nearest_run import check_run_examples_setting, with_run_example
from loopwright.prompting.templates import describe_tools, fill
from loopwright.tools.handles import READ_OUTPUT, READ_OUTPUT_SCHEMA
from loopwright.tools.registry import ToolRegistry
from loopwright.trace import Step, estimate_tokens
from loopwright.untrusted import fence, first_line, neutralise


class _Scratchpad:
    """The growing prompt, in one of the text dialects, plus its chat-message twin.

    Without memory it is append-only. With `context_tokens` (and `memory`, or the default
    one), `fit()` folds older steps whenever the prompt would pass the budget: results to
    stubs, then thoughts dropped, then a summary (modes/folding.py).
    """

    def __init__(
        self, view: RunView, dialect: str, memory: Any = None, context_tokens: int | None = None, notes: str = ""
    ) -> None:
        self.dialect = dialect
        prompts = view.prompts
        template = prompts.react_brackets if dialect == "brackets" else prompts.react_json
        shape = "brackets" if dialect == "brackets" else "json"
        task = view.task if view.output is None else f"{view.task}\n{view.output.instruction()}"
        # The template filled once per registry and prompt set, split where the task goes
        # (a template naming {task} other than once is filled for every run)
        parts = view.registry.memo(
            ("react_prompt", shape, template, prompts.example_tokens, prompts.tool_examples),
            lambda registry: _filled(registry, template, shape, prompts.example_tokens, prompts.tool_examples),
        )
        if len(parts) == 2:
            self.text = parts[0] + task + parts[1]
        else:
            tools, fields = _tool_fields(view.registry, shape, prompts.example_tokens, prompts.tool_examples)
            self.text = fill(template, f"react_{shape}", tools=tools, task=task, **fields)
        self.text = with_run_example(self.text, view.task, view.registry, prompts, shape)  # the nearest whole run
        if notes:  # text placed just before the question (Reflexion's critiques so far)
            at = self.text.rfind(f"Question: {view.task}")
            self.text = self.text[:at] + notes + self.text[at:]
        self.stop = prompts.stop_brackets if dialect == "brackets" else prompts.stop_json
        self.number = 0  # steps appended (k, a trace index, also counts critiques and earlier attempts)
        self.transcript = f"Question: {view.task}\n"
        self.task = view.task
        self.messages: list[dict[str, Any]] = []
        if dialect == "native":
            header = self.text.rsplit("Question:", 1)[0].rstrip()
            self.messages = [
                {"role": "system", "content": header},
                {"role": "user", "content": view.task},
            ]
        if memory is None and context_tokens is not None:
            from loopwright.memory import default_memory  # numpy: only with a budget

            # BM25 recall of the folded steps, given the room first: the scratchpad itself
            # keeps the newest steps; two recent turns in what is left
            memory = default_memory(recent_turns=2, recall_first=True)
        self.budget = context_tokens
        self.folding: Folding | None = None
        if memory is not None or context_tokens is not None:
            if context_tokens is None:
                raise ValueError("memory needs context_tokens: the prompt budget it folds steps into")
            if dialect == "native":
                raise ValueError("a context budget with memory needs a text dialect ('json' or 'brackets')")
            at = self.text.rfind(f"Question: {view.task}")
            head, question = self.text[:at], self.text[at:]
            fixed = estimate_tokens(head) + estimate_tokens(question) + MEMORY_OVERHEAD
            if fixed >= context_tokens:
                raise ValueError(
                    f"context_tokens={context_tokens} leaves no room: the instructions, tools "
                    f"and question alone take about {fixed} tokens"
                )
            self.folding = Folding(dialect, view.task, head, question, context_tokens, memory, view.trace.outputs)

    def append(self, k: int, thought: str, action: str, observation: str, plain: str | None = None,
               key: str | None = None, handle: str | None = None, offset: int = 0) -> None:
        """Add step k (1-based): the model's part, then the observation (as placed in the
        prompt; `plain` is the same without its fence, for the transcript and memory).
        `key`: the tool call's, when the observation is its result (a fold may stub it);
        `handle`: where the result is kept whole, if it is (for a page read with
        read_output: the handle it was read from, at `offset`)."""
        self.number += 1  # the bracket dialect's step number: this scratchpad's own count
        n = self.number
        block = step_block(self.dialect, n, thought, action, observation, True)
        readable = f"Thought: {thought}\n{action}\nObservation: {observation if plain is None else plain}\n"
        # Grow both strings in place, without copying the whole prompt each step: with
        # the attribute cleared, the local is the only reference, and CPython extends a
        # string it alone holds. (Steps keep `prompt_chars`, not a copy of the prompt,
        # for the same reason: every step's prompt is a prefix of the final one.)
        text, self.text = self.text, ""
        text += block
        self.text = text
        transcript, self.transcript = self.transcript, ""
        transcript += readable
        self.transcript = transcript
        if self.folding is not None:
            self.folding.add(k, n, thought, action, observation, observation if plain is None else plain, block,
                             key, handle, offset)

    def fit(self) -> Machine[list[dict[str, Any]]]:
        """Fold older steps until the prompt fits the budget; a record of each fold made."""
        if self.folding is None:
            return []
        self.text, folds = yield from self.folding.fit(self.text)
        return folds


def _tool_fields(registry: ToolRegistry, dialect: str, budget: int, from_tools: bool) -> tuple[str, dict[str, str]]:
    """The prompt's tool list and worked examples."""
    return registry.memo(
        ("react_fields", dialect, budget, from_tools),
        lambda registry: _build_fields(registry, dialect, budget, from_tools),
    )


def _build_fields(registry: ToolRegistry, dialect: str, budget: int, from_tools: bool) -> tuple[str, dict[str, str]]:
    examples = worked_examples(list(registry), dialect, budget=budget, from_tools=from_tools)  # runs: nearest_run
    return describe_tools(registry.schemas()), {"examples": examples}


_TASK_MARK = "\x00task\x00"  # cannot occur in a filled template: fill() output is text


def _filled(registry: ToolRegistry, template: str, dialect: str, budget: int, from_tools: bool) -> tuple[str, ...]:
    """The template filled with everything but the task, as the text before and after
    it; one part when the template names {task} other than once (or a field holds the mark)."""
    tools, fields = _tool_fields(registry, dialect, budget, from_tools)
    parts = tuple(fill(template, f"react_{dialect}", tools=tools, task=_TASK_MARK, **fields).split(_TASK_MARK))
    return parts if len(parts) == 2 else ("",)


_to_json = json.JSONEncoder(ensure_ascii=False, default=str).encode  # built once: hot path


def _render_action(dialect: str, action: Action) -> str:
    """The action as placed in the prompt: the model's name and arguments, neutralised as
    the one text they make there (so a line start is one in the prompt)."""
    if dialect == "brackets":
        arg = action.args.get("input") if set(action.args) == {"input"} else None
        return neutralise(f"{action.name}[{arg if isinstance(arg, str) else _to_json(action.args)}]")
    # the model's own JSON as it wrote it, when it wrote one clean object
    args = action.args_text if action.args_text is not None else _to_json(action.args)
    return neutralise(f"Action: {action.name}\nAction Input: {args}")


def check(spec: Settings) -> None:
    """What ReAct checks before anything is journaled beyond its settings (ReActSettings
    checks those): the whole-run examples of its prompts."""
    if spec.prompts is not None:
        check_run_examples_setting(spec.prompts)


def machine(view: RunView, spec: Settings) -> StepGen:
    """The ReAct machine for a run (its scratchpad made now: bad memory options fail here).

    on_tool_error="reflect": after a tool's ERROR observation, one more model call writes
    a critique (a `reflection` step, counted against max_steps) that the next step sees.
    tool_search: the prompt and grammar carry the K tools most relevant to the task and
    `search_tools`, whose calls load more (see modes/toolsearch.py)."""
    selection = begin(view, spec, searchable=True)
    dialect, on_tool_error = spec.setting("dialect"), spec.setting("on_tool_error")
    if selection is None:
        pad = _Scratchpad(view, dialect, spec.memory, spec.context_tokens)
        return _react(view, pad, spec.max_tokens, on_tool_error=on_tool_error)
    return _searching(view, selection, dialect, spec, on_tool_error)


def _searching(view: RunView, selection: ToolSelection, dialect: str, spec: Settings, on_tool_error: str) -> StepGen:
    """ReAct with tool search: the prompt is made once the K tools are chosen."""
    yield from chosen(view, selection)
    pad = _Scratchpad(view, dialect, spec.memory, spec.context_tokens)
    yield from _react(view, pad, spec.max_tokens, on_tool_error=on_tool_error, selection=selection)


def _react(
    view: RunView,
    pad: _Scratchpad,
    max_tokens: int | None,
    *,
    max_steps: int | None = None,
    keep_prompts: bool = False,
    on_tool_error: str = "observe",
    selection: ToolSelection | None = None,
) -> StepGen:
    """The ReAct loop on `view`. max_steps: model calls this loop may make (default the
    run's); keep_prompts: each step keeps a copy of its prompt (Reflexion runs several
    scratchpads in one trace, so a prompt is not a prefix of `trace.scratchpad`);
    selection: the run's tool search: it answers `search_tools` calls here (when searchable),
    and a call of a registered tool it has not loaded loads that tool."""
    return _Loop(view, pad, max_tokens, view.limits.max_steps if max_steps is None else max_steps,
                 keep_prompts or pad.budget is not None, on_tool_error, selection).run()


class _Loop:
    """The ReAct loop's state: across steps, the tools offered, the repeat detector, the
    latest call of each tool and the parse-error streak; within one, its index, the model's
    answer and the prompt it was sent (a length of the append-only scratchpad, or a copy
    when prompts are rewritten), which `step` puts on every Step it makes. `steps()` makes
    one step at a time; the helpers it calls return True when the run has ended."""

    def __init__(self, view: RunView, pad: _Scratchpad, max_tokens: int | None, cap: int, copy_prompts: bool,
                 on_tool_error: str, selection: ToolSelection | None) -> None:
        self.view, self.pad, self.max_tokens, self.cap = view, pad, max_tokens, cap
        self.first_call = view.trace.llm_calls
        self.copy_prompts = copy_prompts
        self.on_tool_error = on_tool_error
        self.selection = selection
        self.dialect = pad.dialect
        self.native = self.dialect == "native"
        self.plain = view.prompt_only and not self.native  # a plain policy only gets the prompt
        self.limits, self.output = view.limits, view.output  # the run's, fixed while it runs
        self.outputs = view.trace.outputs  # the results kept whole so far (a live read-only mapping)
        self.timed = view.limits.timeout_s is not None  # else the clock cannot run out
        self.repeats = RepeatDetector()
        self.known: dict[str, dict[str, Any]] = {}  # the latest executed call of each tool
        self.parse_errors: int = 0
        self.tools: tuple[dict[str, Any], ...] = ()
        self.offer_tools()
        self.k = 0
        self.call: ModelCall | None = None
        self.prompt: int | None = None
        self.copy: str | None = None

    def step(self, kind: str, duration_s: float | None = None, *, thought: str = "", tool: str | None = None,
             args: dict[str, Any] | None = None, observation: str | None = None, error: str | None = None,
             meta: dict[str, Any] | None = None) -> Step:
        """This step's Step: what it says, and the model's reply, its duration (the model
        call's unless given), usage and prompt."""
        call = self.call
        assert call is not None  # set by run() before any step is made
        return Step(self.k, kind, raw=call.text, thought=thought, tool=tool, args=args, observation=observation,
                    error=error, duration_s=call.seconds if duration_s is None else duration_s, usage=call.usage,
                    prompt_chars=self.prompt, prompt=self.copy, meta={} if meta is None else meta)

    def offer_tools(self) -> None:
        """Offer the run's tools as they are now (tool search changes them)."""
        self.tools = () if self.plain else tuple(self.view.schemas)

    def run(self) -> StepGen:
        """The loop, and its transcript and final prompt in the trace however it ends."""
        return recorded(self.steps(), self.written)

    def written(self) -> Record:
        """What the trace keeps of the loop: its transcript and final prompt."""
        return Record(transcript=self.pad.transcript, scratchpad=self.pad.text)

    def steps(self) -> StepGen:
        """One step a turn (the model asked, its reply parsed and acted on) until the run
        ends or the step cap is reached."""
        view, pad, trace = self.view, self.pad, self.view.trace
        while trace.llm_calls - self.first_call < self.cap:  # one call a step (and a reflection)
            if self.timed and (yield CheckClock()):  # the clock ran out during the last tool call
                yield Stop("timeout")
                return
            k = view.next_index
            if pad.budget is not None:
                for fold in (yield from pad.fit()):
                    fold["before_step"] = k
                    yield Record(meta={"folds": [*trace.meta.get("folds", ()), fold]})
                    if "stop" in fold:  # a summarizer call reached a limit
                        yield Stop(fold["stop"])
                        return
            tools = self.tools
            if (self.outputs and not self.plain and (not tools or tools[-1] is not READ_OUTPUT_SCHEMA)
                    and READ_OUTPUT not in view.registry):  # results are kept: the model may read them
                self.tools = (*tools, READ_OUTPUT_SCHEMA)  # (again when the run's tools were replaced since)
            # Append-only: the prompt is trace.scratchpad[:prompt], kept as a length. With
            # a context budget the prompt is rewritten at folds, so the step keeps a copy.
            prompt = None if self.copy_prompts else len(pad.text)
            copy = pad.text if self.copy_prompts else None
            try:
                call = yield self.request()
            except PolicyFailed as failed:
                yield Step(k, "error", error=failed.message, prompt_chars=prompt, prompt=copy,
                           duration_s=failed.seconds)
                yield Stop(failed.reason)
                return
            self.k, self.call, self.prompt, self.copy = k, call, prompt, copy
            try:
                if self.native and call.completion is not None:
                    parsed: Action | FinalAnswer = _parse_native(call.completion)
                else:
                    parsed = parse_react_step(call.text, dialect="brackets" if self.dialect == "brackets" else "json")
            except ParseError as exc:
                ended = yield from self.unusable(call, str(exc))
            else:
                ended = yield from (self.answer(call, parsed) if isinstance(parsed, FinalAnswer)
                                    else self.act(call, parsed))
            if ended:
                return
        yield Stop("max_steps")

    def request(self) -> ModelRequest:
        pad, output = self.pad, self.output
        return ModelRequest(
            pad.text, pad.stop, "react", tools=self.tools, messages=tuple(pad.messages) if self.native else (),
            max_tokens=self.max_tokens, dialect=self.dialect,
            known_calls=tuple(self.known.items()) if self.known else (),
            output_schema=None if output is None else output.schema,
        )

    def unusable(self, call: ModelCall, message: str) -> Machine[bool]:
        """A reply that does not parse: the model reads why, unless the run stops."""
        view, limits, raw = self.view, self.limits, call.text
        self.parse_errors += 1
        template = view.prompts.parse_error_brackets if self.dialect == "brackets" else view.prompts.parse_error_json
        observation = template.format(error=message)
        yield self.step("parse_error", error=message, observation=observation)
        stop = call.stop
        if stop:
            yield Stop(stop)
            return True
        if limits.on_parse_error == "stop" or self.parse_errors >= limits.max_parse_errors:
            yield Stop("error")
            return True
        self.pad.append(self.k, "", f"(unusable reply) {fence(first_line(raw), 'model')}", neutralise(observation),
                        observation)
        _native_text(self.pad, raw, observation)
        return False

    def answer(self, call: ModelCall, parsed: FinalAnswer) -> Machine[bool]:
        """A final answer: the run ends with it, unless it does not fit the output type."""
        limits, output, typed = self.limits, self.output, None
        if output is not None:
            try:
                typed = output.parse(parsed.answer)
            except ValueError as exc:  # the answer does not fit: the model reads why
                self.parse_errors += 1
                message = f"the final answer does not fit the output type: {exc}"
                observation = f"{message}. {output.instruction()}"
                yield self.step("parse_error", thought=parsed.thought, error=message, observation=observation)
                stop = call.stop
                if stop or self.parse_errors >= limits.max_parse_errors:
                    yield Stop(stop or "error")
                    return True
                answer = neutralise(parsed.answer)
                said = f"finish[{answer}]" if self.dialect == "brackets" else f"Final Answer: {answer}"
                self.pad.append(self.k, parsed.thought, said, neutralise(observation), observation)
                _native_text(self.pad, call.text, observation)
                return False
        retries = call.retries
        yield self.step("final", thought=parsed.thought, observation=None, meta={"retries": retries} if retries else {})
        self.pad.transcript += f"Thought: {parsed.thought}\nFinal Answer: {parsed.answer}\n"
        yield Stop("final", parsed.answer, typed)
        return True

    def act(self, call: ModelCall, parsed: Action) -> Machine[bool]:
        """A tool call: not executed when a limit was reached or it repeats, answered here
        when it is `search_tools`, else run through the driver's gate."""
        view, selection = self.view, self.selection
        self.parse_errors = 0
        name = parsed.name
        loaded = (yield from load_called(selection, name)) if selection is not None else []
        if loaded:  # a registered tool the search had not loaded: callable from now on
            self.offer_tools()
        args = view.registry.bind(name, parsed.args)  # unchanged for an unknown tool
        repaired = {"repaired": list(parsed.repaired)} if parsed.repaired else {}  # on every step of this call
        stop = call.stop
        if stop:
            yield self.step("action", thought=parsed.thought, tool=name, args=args,
                            error=f"not executed: {stop.replace('_', ' ')} reached",
                            meta={**repaired, "tools_loaded": loaded} if loaded else repaired)
            yield Stop(stop)
            return True
        on_repeat = self.limits.on_repeat
        count = self.repeats.see(name, args) if on_repeat != "off" else 1
        if count >= self.limits.repeat_threshold:
            return (yield from self.nudge(parsed, args, count, repaired))
        if selection is not None and selection.searchable and name == SEARCH_TOOL:  # pure: no tool runs
            loaded, observation = yield from searched(view, selection, query_of(args))
            self.offer_tools()
            self.repeats.executed(observation)
            yield self.step("action", thought=parsed.thought, tool=name, args=args, observation=observation,
                            meta={"tools_loaded": loaded, **repaired})
            self.pad.append(self.k, parsed.thought, _render_action(self.dialect, parsed),
                            fence(observation, f"{name}#{self.k}"), observation)
            _native_call(self.pad, parsed, name, args, observation)
            return False
        return (yield from self.call_tool(call, parsed, args, loaded, repaired))

    def nudge(self, parsed: Action, args: dict[str, Any], count: int, repaired: dict[str, Any]) -> Machine[bool]:
        """An identical call repeated: not run; the model is told, or the run stops."""
        view, limits, name = self.view, self.limits, parsed.name
        nudged = count - limits.repeat_threshold  # nudges already given for this call
        if limits.on_repeat == "stop" or nudged >= limits.max_nudges:
            after = f", after {nudged} nudges" if limits.on_repeat == "nudge" else ""
            yield self.step("nudge", thought=parsed.thought, tool=name, args=args,
                            error=f"repeated call: {name} proposed {count} times in a row{after}", meta=repaired)
            yield Stop("repeated_call")
            return True
        observation = view.prompts.repeat_nudge.format(
            tool=neutralise(name), count=count - 1, previous=fence(self.repeats.last_observation or "", name)
        )
        yield self.step("nudge", thought=parsed.thought, tool=name, args=args, observation=observation,
                        meta={"repeats": count, **repaired})
        self.pad.append(self.k, parsed.thought, _render_action(self.dialect, parsed), observation)
        _native_call(self.pad, parsed, name, args, observation)
        return False

    def call_tool(self, call: ModelCall, parsed: Action, args: dict[str, Any], loaded: list[str],
                  repaired: dict[str, Any]) -> Machine[bool]:
        """Run the call through the driver, record its step, and put its result (and a
        critique of a failure, with on_tool_error="reflect") in the scratchpad."""
        view, name, k = self.view, parsed.name, self.k
        call_key = str(k)
        executed = yield CallTool(name, args, call_key, parsed.repaired)
        result = executed.result
        observation = result.observation
        self.repeats.executed(observation)
        if not self.plain and type(args) is dict:  # what a model's grammar may exclude (a plain policy has none)
            self.known.pop(name, None)
            self.known[name] = args
        meta = {"tool_s": result.duration_s, "model_s": call.seconds}
        if call.retries:
            meta["retries"] = call.retries  # the backend retried transient HTTP errors
        if executed.meta:
            meta.update(executed.meta)
        if loaded:
            meta["tools_loaded"] = loaded
        meta.update(repaired)
        yield self.step(executed.kind, call.seconds + result.duration_s, thought=parsed.thought, tool=name, args=args,
                        observation=observation, error=None if result.error is None else result.error.message,
                        meta=meta)
        fenced = fence(observation, f"{name}#{call_key}")
        if (self.on_tool_error == "reflect" and result.error is not None and executed.kind == "action"
                and view.trace.llm_calls - self.first_call < self.cap):
            critique = yield from self.reflect_on(parsed, fenced)
            if critique is None:  # the critique call failed or a guard fired: the run is stopped
                return True
            fenced += f"\nReflection: {neutralise(critique)}"
            observation += f"\nReflection: {critique}"
        key: str | None = call_key
        kept, offset = executed.meta.get("output") if executed.meta else None, 0
        if name == READ_OUTPUT and READ_OUTPUT not in view.registry:  # the built-in: no handle of its own
            if result.error is None:
                kept, offset = result.args["handle"], result.args.get("offset", 0)  # a page: its stub points back
            else:
                key = None
        self.pad.append(k, parsed.thought, _render_action(self.dialect, parsed), fenced, observation, key, kept, offset)
        if self.native:
            _native_call(self.pad, parsed, name, args, observation)
        return False

    def reflect_on(self, parsed: Action, fenced: str) -> Machine[str | None]:
        """A critique of the failed call (one more model call), or None when the run stopped."""
        pad, dialect = self.pad, self.dialect
        so_far = pad.text + step_block(dialect, pad.number + 1, parsed.thought, _render_action(dialect, parsed), fenced)
        prompt_text = self.view.prompts.reflect_step.format(scratchpad=so_far, error=fenced)  # tool text: fenced
        return (yield from reflect(self.view, prompt_text, self.max_tokens, {"after_step": self.k, "tool": parsed.name}))


def _parse_native(completion: Any) -> Action | FinalAnswer:
    if completion.tool_calls:
        actions = parse_tool_calls(completion.tool_calls)
        if actions:
            first = actions[0]
            return Action(completion.text.strip() or first.thought, first.name, first.args, call_id=first.call_id,
                          repaired=first.repaired)
    text = completion.text.strip()
    if not text:
        raise ParseError("the reply had neither a tool call nor any text; call a tool or answer")
    return FinalAnswer("", text)


def _native_call(pad: _Scratchpad, action: Action, name: str, args: dict[str, Any], observation: str) -> None:
    if pad.dialect != "native":
        return
    call_id = action.call_id or f"call_{len(pad.messages)}"
    pad.messages.append(
        {
            "role": "assistant",
            "content": neutralise(action.thought) or None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": neutralise(name), "arguments": neutralise(json.dumps(args, default=str))},
                }
            ],
        }
    )
    pad.messages.append({"role": "tool", "tool_call_id": call_id, "content": fence(observation, name)})


def _native_text(pad: _Scratchpad, raw: str, observation: str) -> None:
    if pad.dialect == "native":
        pad.messages.append({"role": "assistant", "content": neutralise(raw)})
        pad.messages.append({"role": "user", "content": neutralise(observation)})
