"""Untrusted text placed in a prompt: tool output inside an <untrusted> fence that nothing
in it can close, and model text echoed back neutralised so it cannot close, open or fake a
fence or start an observation the loop did not write (docs/security.md)."""

from __future__ import annotations

import re
from typing import Final

from loopwright.parsing.steps import FORMAT_HELP_BRACKETS, FORMAT_HELP_JSON, FORMAT_HELP_PLAN

__all__ = ["escape_untrusted", "fence", "first_line", "neutralise"]


def escape_untrusted(text: str) -> str:
    """Make text safe to place inside an <untrusted> fence: angle brackets become
    entities, so nothing in the text can close the fence or open a new one."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_FORMAT_HELP: Final = (FORMAT_HELP_JSON, FORMAT_HELP_BRACKETS, FORMAT_HELP_PLAN)
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines splits on
_OBSERVATION_LINE = re.compile(  # "Observation" starting a line, after blanks or invisible characters
    rf"(?:\A|(?<=[{_LINE_BREAKS}]))([\s\u200b-\u200f\u2060\ufeff]*)(o)(?=bservation)", re.IGNORECASE
)


def neutralise(text: str) -> str:
    """Make model or tool text safe to place in a prompt outside a fence (a thought, an
    action as the model wrote it, an answer or a plan fed back): escaped as inside a
    fence, and a line that starts with "Observation" gets its first letter as an
    entity (`&#79;bservation`), so the text cannot close a fence, open one, pose as a
    tag, or start an observation the loop did not write.

    Text without `&`, `<`, `>` or such a line is returned unchanged (the append-only
    scratchpad renders as before); `html.unescape` gives the original back, and the
    parse boundary decodes the entities in arguments a model copies from its echo. The
    parse boundary's own format help (`Action: <tool>` ...), quoted in the parse errors
    a model is shown, is left as written: it is the loop's text, one line, no fence tag."""
    lowered = text.lower()
    if "&" not in text and "<" not in text and ">" not in text and "bservation" not in lowered:
        return text  # the common case, with no copy made (a hot path: several times a step)
    escaped = escape_untrusted(text)
    if "bservation" in lowered:  # escaping neither makes nor breaks the word
        escaped = _OBSERVATION_LINE.sub(_entity_first, escaped)
    if "&lt;" in escaped:
        for help_text in _FORMAT_HELP:
            escaped = escaped.replace(escape_untrusted(help_text), help_text)
    return escaped


def _entity_first(found: re.Match[str]) -> str:
    return f"{found.group(1)}&#{ord(found.group(2))};"


def fence(text: str, source: str) -> str:
    """Mark tool output as untrusted data with its provenance (tool and step). The source
    may hold a tool name as the model wrote it: its quotes become entities too."""
    if '"' in source or "&" in source or "<" in source or ">" in source:
        source = _attribute(source)
    return f'<untrusted source="{source}">{escape_untrusted(text)}</untrusted>'


def _attribute(source: str) -> str:
    return escape_untrusted(source).replace('"', "&quot;")


def first_line(text: str, limit: int = 500) -> str:
    """Text stripped and cut to `limit` characters (with an ellipsis): how an error quotes
    a reply or a verdict."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"
