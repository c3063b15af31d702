"""Long runs inside a context budget: 200 ReAct steps whose prompts never pass the budget,
and an exact fact from step 3 brought back at step 200 by semantic recall."""

from __future__ import annotations

import json

import pytest

import loopwright as lw
from loopwright.memory import (
    BufferMemory,
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    SemanticMemory,
    SummaryMemory,
    TieredMemory,
)
from loopwright.trace import estimate_tokens

ACCOUNT = "80-4471-2390"
STEPS = 200
BUDGET = 700
TASK = (
    "Help the customer with her requests, taking notes; at the end, report the account ID she gave."
)

CITIES = ["Lyon", "Oslo", "Quito", "Perth", "Cairo", "Lima", "Riga", "Hanoi"]
NAMES = ["Ada", "Bram", "Chen", "Dara", "Emil", "Farah", "Goran", "Hiro"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def filler(n: int) -> tuple[str, str]:
    """A plausible, varied note for step n: weather, orders, meetings, phone numbers,
    parcels and rooms, so the account ID has numeric look-alikes around it."""
    city, name, day = CITIES[n % 8], NAMES[(n // 8) % 8], DAYS[n % 5]
    kinds = [
        ("check the forecast", f"weather in {city}: {10 + n % 17} degrees and cloudy"),
        ("log the order", f"order {1000 + n} for {name} ships on {day}"),
        ("move the meeting", f"meeting with {name} moved to {day} at {8 + n % 9}:00"),
        ("save a contact", f"phone of {name} in {city} is 555-{n:04d}"),
        ("track a parcel", f"parcel {n * 37 % 9973:04d}-{n % 97:02d} is in {city}"),
        ("book a room", f"room {100 + n % 60} booked for {name} on {day}"),
    ]
    return kinds[n % len(kinds)]


def step(thought: str, note: str) -> str:
    return f"Thought: {thought}\nAction: note\nAction Input: {json.dumps({'text': note})}"


def note_registry() -> lw.ToolRegistry:
    @lw.tool
    def note(text: str) -> str:
        """Write a note down; returns the note as filed."""
        return f"filed: {text}"

    return lw.ToolRegistry([note])


PLAIN = ("The customer just gave me her bank details", f"customer account ID is {ACCOUNT}")
# The same fact in other words: no word in common with "report the account ID she gave".
PARAPHRASED = ("She told me how to find her in our billing system", f"billing reference {ACCOUNT}")


class LongRunPolicy:
    """Scripted for 200 steps: the account ID at step 3, filler notes, and at step 200 a
    final answer that is the account ID only if the prompt it is shown contains it."""

    def __init__(self, planted: tuple[str, str] = PLAIN) -> None:
        self.planted = planted
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        n = len(self.prompts)
        if n == 3:
            return step(*self.planted)
        if n == STEPS - 1:
            return step("All requests are done; next I report the customer's account ID", "wrap up")
        if n == STEPS:
            answer = ACCOUNT if ACCOUNT in prompt else "not in my context"
            return f"Thought: I can report it now\nFinal Answer: {answer}"
        return step(*filler(n))


def tiered(embedder: Embedder) -> TieredMemory:
    return TieredMemory(
        BufferMemory(4),
        SummaryMemory(lambda prompt: "Earlier, many routine notes were filed."),
        SemanticMemory(embedder),
        recall_k=3,
    )


def run_long(
    embedder: Embedder, planted: tuple[str, str] = PLAIN
) -> tuple[lw.Trace, LongRunPolicy]:
    policy = LongRunPolicy(planted)
    trace = lw.run(
        TASK,
        policy,
        note_registry(),
        max_steps=STEPS,
        memory=tiered(embedder),
        context_tokens=BUDGET,
    )
    return trace, policy


def check_long_run(trace: lw.Trace, policy: LongRunPolicy) -> None:
    assert trace.stopped_reason == "final" and trace.llm_calls == STEPS == len(policy.prompts)
    sizes = [estimate_tokens(p) for p in policy.prompts]
    assert max(sizes) <= BUDGET, f"prompt {sizes.index(max(sizes)) + 1} is {max(sizes)} tokens"
    folded = [k for fold in trace.meta["folds"] for k in fold["folded_steps"]]
    assert 3 in folded  # the account ID left the scratchpad long ago...
    header, recent = policy.prompts[-1].split(f"Question: {TASK}")
    assert ACCOUNT in header.split("Memory of earlier steps:", 1)[1]  # ...came back via memory
    assert ACCOUNT not in recent  # not through the recent steps
    assert trace.final_answer == ACCOUNT


def test_a_200_step_run_stays_inside_a_small_budget_and_recalls_step_3() -> None:
    check_long_run(*run_long(HashingEmbedder()))


@pytest.mark.slow
def test_a_200_step_run_recalls_a_paraphrased_step_3_with_the_real_minilm_embedder() -> None:
    pytest.importorskip("sentence_transformers")
    check_long_run(*run_long(MiniLMEmbedder(num_threads=1), PARAPHRASED))
    # the control: word hashing finds no link between "billing reference" and "account ID"
    trace, _ = run_long(HashingEmbedder(), PARAPHRASED)
    assert trace.final_answer == "not in my context"


def test_the_budget_holds_when_observations_are_full_of_markup() -> None:
    @lw.tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        return "<div>&lt;&amp;</div>" * 20

    prompts: list[str] = []

    def policy(prompt: str) -> str:
        prompts.append(prompt)
        if len(prompts) == 40:
            return "Thought: done\nFinal Answer: ok"
        url = f"<a>&{len(prompts)}"
        return f"Thought: fetch\nAction: fetch\nAction Input: {json.dumps({'url': url})}"

    memory = TieredMemory(BufferMemory(6), None, SemanticMemory(HashingEmbedder()), recall_k=4)
    lw.run(
        "Fetch pages",
        policy,
        lw.ToolRegistry([fetch]),
        max_steps=40,
        memory=memory,
        context_tokens=900,
    )
    assert max(estimate_tokens(p) for p in prompts) <= 900
