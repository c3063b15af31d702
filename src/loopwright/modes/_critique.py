"""The critique call Reflexion and ReAct's `on_tool_error="reflect"` share: one model
call whose reply is recorded as a `reflection` step and placed in later prompts."""

from __future__ import annotations

from typing import Any, Final

from loopwright.modes.machine import Machine, PolicyFailed, RunView, Stop
from loopwright.policy import ModelRequest
from loopwright.trace import Step

CRITIQUE_TOKENS: Final = 80
"""max_tokens of a critique call when the run sets none (its stop strings cannot include a
blank line: small models often start the reply with one)."""
CRITIQUE_CHARS: Final = 600
"""A critique goes into every later prompt: longer ones are cut (the model's run-on text)."""


def clean_critique(text: str) -> str:
    """The critique as placed in a prompt: its first paragraph, on one line, clipped."""
    first = text.strip().split("\n\n", 1)[0]
    flat = " ".join(first.split())
    if len(flat) > CRITIQUE_CHARS:
        flat = flat[: CRITIQUE_CHARS - 1] + "…"
    return flat or "(no critique written)"


def reflect(view: RunView, prompt: str, max_tokens: int | None, meta: dict[str, Any]) -> Machine[str | None]:
    """Ask for a critique (use with `yield from`): one model call, one `reflection` step.

    Returns the cleaned critique, or None when the run was stopped here (the policy
    failed, or the token budget or the wall clock ran out after the call).
    """
    k = view.next_index
    try:
        call = yield ModelRequest(prompt, view.prompts.stop_reflection, "reflect",
                                  max_tokens=max_tokens or CRITIQUE_TOKENS)
    except PolicyFailed as failed:
        yield Step(k, "error", error=failed.message, prompt=prompt, duration_s=failed.seconds)
        yield Stop(failed.reason)
        return None
    critique = clean_critique(call.text)
    yield Step(k, "reflection", raw=call.text, thought=critique, prompt=prompt, usage=call.usage,
               duration_s=call.seconds, meta=meta)
    stop = call.stop
    if stop:
        yield Stop(stop)
        return None
    return critique
