"""Fast construction for the frozen dataclasses built on every step.

A frozen dataclass's generated __init__ writes each field through object.__setattr__, to
get past its own __setattr__ (which raises). For the parse boundary's and the tool
wire's records made at every step (Action, ToolResult) that was a measurable part of the
loop's own cost. Those classes are declared with init=False and an __init__ that writes
each slot through its descriptor instead: the same object, just as immutable afterwards.
(Step and Usage are plain frozen dataclasses: one path, and their cost is per model call.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any


def slot_writers(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """The slot setter of each field of a frozen slots dataclass, in field order."""
    return tuple(cls.__dict__[f.name].__set__ for f in fields(cls))
