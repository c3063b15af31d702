"""modes/folding.py: how a budgeted ReAct scratchpad folds, step by step: the prompt it
leaves, what it files in memory, what it asks memory for and the record of each fold.
(tests/test_react_context_budget.py runs whole budgeted runs.)"""

from __future__ import annotations

from typing import Any

from loopwright.memory import BufferMemory, TieredMemory
from loopwright.modes.folding import MEMORY_OVERHEAD, Folding, step_block
from loopwright.modes.machine import Record
from loopwright.runtime.driver import user_call
from loopwright.trace import estimate_tokens

HEAD = "h" * 300  # 100 tokens: the instructions and tools
QUESTION = "q" * 30  # 10 tokens
ROOM = 900  # for four pages, the first one long: stubbing it alone is enough


class Notes:
    """A memory that records what it is given and asked, and recalls a fixed text."""

    def __init__(self, recalled: str = "") -> None:
        self.added: list[tuple[str, dict[str, Any]]] = []
        self.asked: list[tuple[str, int]] = []
        self.recalled = recalled

    def add(self, turn: str, meta: dict[str, Any]) -> None:
        self.added.append((turn, meta))

    def context(self, query: str, budget_tokens: int) -> str:
        self.asked.append((query, budget_tokens))
        return self.recalled


class BatchNotes(Notes):
    """A memory that files a batch at once (one summarizer call, one embedding batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def add_many(self, turns: list[str], metas: list[dict[str, Any]]) -> None:
        self.batches.append(list(turns))
        self.added += zip(turns, metas, strict=True)


def fit(folding: Folding, prompt: str) -> tuple[str, list[dict[str, Any]]]:
    """`folding.fit(prompt)` with its requests served as the drivers serve them."""
    machine = folding.fit(prompt)
    answer: Any = None
    try:
        while True:
            request = machine.send(answer)
            if isinstance(request, Record):  # a result kept whole: filed as the run's context files it
                for handle, text in (request.outputs or {}).items():
                    folding.outputs.setdefault(handle, text)  # type: ignore[attr-defined]  # the test's dict
                answer = None
                continue
            try:
                answer = user_call(None, request)()  # type: ignore[arg-type]  # memory needs no run
            except Exception as error:  # the drivers answer with what the memory raised
                answer = error
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def budget_for(room: int, head: str = HEAD, question: str = QUESTION) -> int:
    """The budget that leaves `room` tokens for the steps and recalled memory."""
    return estimate_tokens(head) + estimate_tokens(question) + MEMORY_OVERHEAD + room


def sized(room: int, sizes: list[int], memory: Any, outputs: dict[str, str] | None = None,
          kept: bool = False) -> tuple[Folding, str]:
    """A scratchpad of steps of `sizes` tokens that no result stub or dropped thought can
    shrink (one-character thoughts, observations shorter than a stub): only a summary
    folds them. With `kept`, step k's result is kept whole under out-k."""
    outputs = {} if outputs is None else outputs
    folding = Folding("json", "task", HEAD, QUESTION, budget_for(room), memory, outputs)
    for k, size in enumerate(sizes, 1):
        key = handle = None
        if kept:
            key, handle = str(k), f"out-{k}"
            outputs[handle] = "r" * (1000 + k)
        folding.add(k, k, "x", "act", "obs", "obs", "s" * (3 * size), key, handle, 0)
    return folding, HEAD + QUESTION + "".join(e.text for e in folding.entries)


def test_a_step_block_in_each_dialect_with_and_without_the_cue_for_the_next_thought() -> None:
    assert step_block("brackets", 3, "look", "search[x]", "found") == " look\nAction 3: search[x]\nObservation 3: found"
    assert step_block("brackets", 3, "look", "search[x]", "found", True) == (
        " look\nAction 3: search[x]\nObservation 3: found\nThought 4:")
    action = 'Action: search\nAction Input: {"q": "x"}'
    assert step_block("json", 3, "look", action, "found") == f" look\n{action}\nObservation: found"
    assert step_block("json", 3, "look", action, "found", True) == f" look\n{action}\nObservation: found\nThought:"
    assert step_block("json", 1, "<b>bold</b>", action, "o").startswith(" &lt;b&gt;bold&lt;/b&gt;\n")  # neutralised


def _pages(dialect: str, room: int, memory: Any, words: tuple[int, ...] = (30, 30, 30)) -> tuple[Folding, str, dict[str, str]]:
    """Fetched pages of so many words, each result longer than its stub, in a scratchpad of `room`."""
    outputs: dict[str, str] = {}
    folding = Folding(dialect, "task", HEAD, QUESTION, budget_for(room), memory, outputs)
    prompt = HEAD + QUESTION
    for k, n in enumerate(words, 1):
        action = f"fetch[{k}]" if dialect == "brackets" else f'Action: fetch\nAction Input: {{"page": {k}}}'
        plain = f"page {k}: " + "figures " * n
        observation = f"<untrusted>{plain}</untrusted>"
        block = step_block(dialect, k, f"read page {k}", action, observation, True)
        folding.add(k, k, f"read page {k}", action, observation, plain, block, str(k), None, 0)
        prompt += block
    return folding, prompt, outputs


def test_old_results_become_stubs_then_old_thoughts_go_and_the_newest_step_stays_whole() -> None:
    memory = Notes()
    folding, prompt, outputs = _pages("brackets", 200, memory)
    text, folds = fit(folding, prompt)
    page = "figures " * 30
    assert text == HEAD + QUESTION + (
        " …\nAction 1: fetch[1]\n"
        'Observation 1: [result folded away (248 chars): read_output(handle="out-1") reads it back]\n'
        "Thought 2: …\nAction 2: fetch[2]\n"
        'Observation 2: [result folded away (248 chars): read_output(handle="out-2") reads it back]\n'
        f"Thought 3: read page 3\nAction 3: fetch[3]\nObservation 3: <untrusted>page 3: {page}</untrusted>\n"
        "Thought 4:"
    )
    assert outputs == {"out-1": f"page 1: {page}", "out-2": f"page 2: {page}"}  # whole under their handles
    stubbed = estimate_tokens(text.replace(" …\n", " read page 1\n", 1).replace("2: …", "2: read page 2"))
    assert folds == [
        {"kind": "stub_results", "folded_steps": [1, 2], "prompt_tokens_before": estimate_tokens(prompt),
         "prompt_tokens_after": stubbed},
        {"kind": "drop_thoughts", "folded_steps": [1, 2], "prompt_tokens_before": stubbed,
         "prompt_tokens_after": estimate_tokens(text)},
    ]
    assert memory.added == [  # the stubbed results, readable in memory, pointing at their handles
        (f"Step {k}. Thought: read page {k}\nfetch[{k}]\nObservation: page {k}: {page}\n",
         {"step": k, "output": f"out-{k}"}) for k in (1, 2)
    ]
    assert memory.asked == []  # no summary was needed


def test_a_fold_stubs_only_as_many_results_as_it_must() -> None:
    memory = BatchNotes()
    folding, prompt, outputs = _pages("json", ROOM, memory, (400, 30, 30, 30))
    text, folds = fit(folding, prompt)
    assert [f["kind"] for f in folds] == ["stub_results"] and folds[0]["folded_steps"] == [1]
    assert text.count("result folded away") == 1 and "page 2: figures" in text and list(outputs) == ["out-1"]
    assert ' read page 1\nAction: fetch\nAction Input: {"page": 1}\nObservation: [result folded away' in text
    assert memory.batches == [[f"Step 1. Thought: read page 1\nAction: fetch\nAction Input: {{\"page\": 1}}\n"
                               f"Observation: page 1: {'figures ' * 400}\n"]]
    assert estimate_tokens(text) <= budget_for(ROOM) - ROOM // 2  # down to half the room below the budget


def test_a_prompt_within_the_budget_is_left_as_it_is() -> None:
    folding, prompt, _ = _pages("json", 1000, Notes())
    assert fit(folding, prompt) == (prompt, [])


def test_a_page_read_from_a_kept_result_folds_to_a_stub_at_its_offset() -> None:
    """A read_output page points back at the result it was read from, at its offset, and
    gives the page's size; a result shown as a view gives its whole kept size."""
    whole = "w" * 5000
    outputs = {"out-1": whole}
    memory = Notes()
    folding = Folding("json", "task", HEAD, QUESTION, budget_for(200), memory, outputs)
    view = f"<untrusted>{'w' * 300} [out-1: 5000 chars, read_output reads on] {'w' * 100}</untrusted>"
    page = "w" * 400
    steps = [("1", "out-1", 0, view, "a view"), ("2", "out-1", 1200, f"<untrusted>{page}</untrusted>", page),
             ("3", None, 0, "<untrusted>short</untrusted>", "short")]
    prompt = HEAD + QUESTION
    for k, (key, handle, offset, observation, plain) in enumerate(steps, 1):
        block = step_block("json", k, "t" * 200, "Action: a", observation, True)
        folding.add(k, k, "t" * 200, "Action: a", observation, plain, block, key, handle, offset)
        prompt += block
    text, _ = fit(folding, prompt)
    assert 'Observation: [result folded away (5000 chars): read_output(handle="out-1") reads it back]' in text
    assert ('Observation: [result folded away (400 chars): read_output(handle="out-1", offset=1200) reads it back]'
            in text)
    assert outputs == {"out-1": whole}  # nothing filed again: both point at the kept result
    assert [meta for _, meta in memory.added] == [{"step": 1, "output": "out-1"}, {"step": 2, "output": "out-1"}]


def test_a_summary_keeps_the_newest_steps_within_a_quarter_of_the_room() -> None:
    memory = Notes("the early pages had figures")
    folding, prompt = sized(400, [150, 150, 80, 40, 60], memory)  # 40 + 60 is exactly a quarter
    text, folds = fit(folding, prompt)
    section = 'Memory of earlier steps:\n<untrusted source="memory">the early pages had figures</untrusted>\n\n'
    assert text == HEAD + section + QUESTION + "s" * 120 + "s" * 180
    assert [e.k for e in folding.entries] == [4, 5]
    assert [turn for turn, _ in memory.added] == [f"Step {k}. Thought: x\nact\nObservation: obs\n" for k in (1, 2, 3)]
    assert [meta for _, meta in memory.added] == [{"step": 1}, {"step": 2}, {"step": 3}]  # no result kept
    # memory gets the room the summary leaves: the budget less head, question and kept steps, the
    # 4-token margin and the eighth of the room kept to grow in
    assert memory.asked == [("task\nx", budget_for(400) - 100 - 10 - 100 - 4 - 400 // 8)]
    assert folds == [{"kind": "summarise", "folded_steps": [1, 2, 3], "prompt_tokens_before": 590,
                      "prompt_tokens_after": estimate_tokens(text), "memory_tokens": estimate_tokens(section)}]


def test_the_newest_step_stays_in_the_prompt_when_it_fits_in_half_the_room() -> None:
    memory = Notes()
    folding, prompt = sized(400, [300, 200], memory)  # the newest is exactly half the room
    text, folds = fit(folding, prompt)
    assert text == HEAD + QUESTION + "s" * 600 and [e.k for e in folding.entries] == [2]
    assert folds[-1]["kind"] == "summarise" and folds[-1]["folded_steps"] == [1]
    assert memory.asked == [("task\nx", budget_for(400) - 100 - 10 - 200 - 4 - 50)]  # the latest thought with the task


def test_a_newest_step_past_half_the_room_folds_too_and_memory_is_asked_with_the_task() -> None:
    memory = Notes()
    folding, prompt = sized(400, [300, 201], memory)
    text, folds = fit(folding, prompt)
    assert text == HEAD + QUESTION and folding.entries == []  # memory recalled nothing
    assert folds[-1]["folded_steps"] == [1, 2] and folds[-1]["memory_tokens"] == 0
    assert memory.asked == [("task\n", budget_for(400) - 100 - 10 - 4 - 50)]


def test_a_summary_names_the_newest_kept_results_whose_steps_it_folded() -> None:
    memory = Notes()
    folding, prompt = sized(400, [40] * 12, memory, kept=True)  # 480 tokens: the last two stay
    text, _ = fit(folding, prompt)
    assert [e.k for e in folding.entries] == [11, 12]
    line = ("Results kept whole, read_output(handle, offset, length) reads them: "
            + ", ".join(f"out-{k} ({1000 + k} chars)" for k in range(3, 11)) + "\n\n")  # the newest 8 folded
    assert text == HEAD + line + QUESTION + "s" * 240
    assert [meta for _, meta in memory.added] == [{"step": k, "output": f"out-{k}"} for k in range(1, 11)]
    assert memory.asked == [("task\nx", budget_for(400) - 100 - 10 - 80 - estimate_tokens(line) - 4 - 50)]


def test_memory_recalls_none_of_the_steps_the_prompt_still_holds() -> None:
    """Stubbed steps are filed in memory when stubbed; those a summary leaves in the prompt
    are not recalled into it a second time."""
    memory = TieredMemory(BufferMemory(40))
    folding = Folding("json", "task", HEAD, QUESTION, budget_for(400), memory, {})
    prompt = HEAD + QUESTION
    for k in range(1, 30):
        plain = f"result {k}: " + "numbers " * 25 if k < 29 else "done"
        block = step_block("json", k, "t", f"Action: fetch {k}", plain, True)
        folding.add(k, k, "t", f"Action: fetch {k}", plain, plain, block, str(k), None, 0)
        prompt += block
    text, folds = fit(folding, prompt)
    assert [f["kind"] for f in folds] == ["stub_results", "summarise"]
    held = [e.k for e in folding.entries]
    folded = folds[-1]["folded_steps"]
    assert held and folded and any(e.stubbed for e in folding.entries)
    section = text[len(HEAD):text.index(QUESTION)]
    assert f"Step {folded[-1]}. Thought" in section  # the newest folded steps, recalled (what fits)
    assert not any(f"Step {k}. Thought" in section for k in held)  # not those the prompt holds
    assert len(memory.buffer) == len(folds[0]["folded_steps"])  # filed once, when stubbed: not again when folded


def _thinking(room: int, over: int) -> tuple[Folding, str, int]:
    """Three steps: an old one with a long thought, a filler, the newest; sized so that with
    the old thought dropped the prompt is `over` tokens past what a summary leaves (the
    budget less an eighth of the room). The threshold too."""
    budget = budget_for(room)
    folding = Folding("json", "task", HEAD, QUESTION, budget, Notes(), {})
    thought = "T" * 600
    dropped = estimate_tokens(step_block("json", 1, "…", "act", "obs", True))
    threshold = budget - room // 8
    filler = threshold - 100 - 10 - dropped - 50 + over
    folding.add(1, 1, thought, "act", "obs", "obs", step_block("json", 1, thought, "act", "obs", True), None, None, 0)
    folding.add(2, 2, "x", "act", "obs", "obs", "s" * (3 * filler), None, None, 0)
    folding.add(3, 3, "x", "act", "obs", "obs", "s" * 150, None, None, 0)
    return folding, HEAD + QUESTION + "".join(e.text for e in folding.entries), threshold


def test_a_summary_comes_only_when_the_prompt_is_still_past_an_eighth_of_the_room_below_the_budget() -> None:
    for over in (0, 1):
        folding, prompt, threshold = _thinking(404, over)  # an eighth of 404 is 50.5: rounded down
        text, folds = fit(folding, prompt)
        assert folds[0]["kind"] == "drop_thoughts" and folds[0]["prompt_tokens_after"] == threshold + over
        assert [f["kind"] for f in folds] == (["drop_thoughts"] if over == 0 else ["drop_thoughts", "summarise"])


def test_a_result_no_longer_than_its_stub_keeps_its_observation_when_its_thought_goes() -> None:
    outputs = {"out-1": "r" * 3000}
    folding = Folding("json", "task", HEAD, QUESTION, budget_for(300), Notes(), outputs)
    short = "<untrusted>r… [out-1]</untrusted>"  # a view under a tiny cap: shorter than a stub
    thought = "T" * 600
    prompt = HEAD + QUESTION
    for k, (obs, key, handle) in enumerate([(short, "1", "out-1"), ("done", None, None)], 1):
        block = step_block("json", k, thought, "act", obs, True)
        folding.add(k, k, thought, "act", obs, obs, block, key, handle, 0)
        prompt += block
    text, folds = fit(folding, prompt)
    assert [f["kind"] for f in folds] == ["drop_thoughts"]
    assert text.startswith(HEAD + QUESTION + f" …\nact\nObservation: {short}\nThought:")


def _stub_text(handle: str, chars: int) -> str:
    return f'[result folded away ({chars} chars): read_output(handle="{handle}") reads it back]'


def test_only_tool_results_longer_than_their_stub_and_thoughts_longer_than_a_character_fold() -> None:
    """Oldest first, each kind of step passed over without stopping the fold: an observation
    that is no tool result (a parse error) is never stubbed, a result no longer than its stub
    stays, a one-character thought stays; the newest step stays whole."""
    outputs: dict[str, str] = {}
    memory = Notes()
    room = 750
    folding = Folding("json", "task", HEAD, QUESTION, budget_for(room), memory, outputs)
    error, long3, long4 = "E" * 600, "c" * 600, "d" * 900
    steps = [("x", None, error), ("ok", "2", "fine"), ("T" * 300, "3", long3), ("T" * 300, "4", long4)]
    prompt = HEAD + QUESTION
    for k, (thought, key, observation) in enumerate(steps, 1):
        block = step_block("json", k, thought, "act", observation, True)
        folding.add(k, k, thought, "act", observation, observation, block, key, None, 0)
        prompt += block
    text, folds = fit(folding, prompt)
    assert [(f["kind"], f["folded_steps"]) for f in folds] == [("stub_results", [3]), ("drop_thoughts", [2, 3])]
    assert text == HEAD + QUESTION + "".join([
        f" x\nact\nObservation: {error}\nThought:",
        " …\nact\nObservation: fine\nThought:",
        f" …\nact\nObservation: {_stub_text('out-3', 600)}\nThought:",
        f" {'T' * 300}\nact\nObservation: {long4}\nThought:",
    ])
    assert outputs == {"out-3": long3} and memory.added == [
        (f"Step 3. Thought: {'T' * 300}\nact\nObservation: {long3}\n", {"step": 3, "output": "out-3"})]


def _as_long_as_its_stub() -> str:
    """A result exactly as long as the stub it would fold to."""
    return next("r" * n for n in range(60, 200) if len(_stub_text("out-1", n)) == n)


def test_a_result_is_stubbed_only_when_the_stub_is_shorter() -> None:
    for result in (_as_long_as_its_stub(), _as_long_as_its_stub() + "r"):
        folding = Folding("json", "task", HEAD, QUESTION, budget_for(200), Notes(), {})
        prompt = HEAD + QUESTION
        for k, (key, observation) in enumerate([("1", result), (None, "n" * 1500)], 1):
            block = step_block("json", k, "x", "act", observation, True)
            folding.add(k, k, "x", "act", observation, observation, block, key, None, 0)
            prompt += block
        _, folds = fit(folding, prompt)  # (and a summary: the newest step is past half the room)
        stubbed = len(_stub_text("out-1", len(result))) < len(result)
        assert ("stub_results" in [f["kind"] for f in folds]) is stubbed, len(result)
        assert folding.outputs == ({"out-1": result} if stubbed else {})


def _results(room: int, over: int) -> tuple[Folding, str]:
    """A huge old result, a second one, and the newest step, sized so that with the first
    result stubbed the prompt is `over` tokens past half the room below the budget."""
    folding = Folding("json", "task", HEAD, QUESTION, budget_for(room), Notes(), {})
    first, second = "a" * 3000, "b" * 900
    stubbed = estimate_tokens(step_block("json", 1, "t", "act", _stub_text("out-1", 3000), True))
    whole = estimate_tokens(step_block("json", 2, "t", "act", second, True))
    newest = budget_for(room) - room // 2 + over - 100 - 10 - stubbed - whole
    prompt = HEAD + QUESTION
    for k, (key, observation) in enumerate([("1", first), ("2", second)], 1):
        block = step_block("json", k, "t", "act", observation, True)
        folding.add(k, k, "t", "act", observation, observation, block, key, None, 0)
        prompt += block
    folding.add(3, 3, "t", "act", "obs", "obs", "s" * (3 * newest), None, None, 0)
    return folding, prompt + "s" * (3 * newest)


def test_results_are_stubbed_down_to_exactly_half_the_room_below_the_budget_and_no_further() -> None:
    room = 1201  # odd: half of it is 600, rounded down
    for over, stubbed in ((0, [1]), (1, [1, 2])):
        folding, prompt = _results(room, over)
        text, folds = fit(folding, prompt)
        assert [(f["kind"], f["folded_steps"]) for f in folds] == [("stub_results", stubbed)], over
        if over == 0:
            assert folds[0]["prompt_tokens_after"] == budget_for(room) - room // 2 == estimate_tokens(text)
