"""Comparing a resumed trace with an uninterrupted one."""

from __future__ import annotations

from typing import Any

import loopwright as lw

VOLATILE_META = {"tool_s", "model_s", "replayed"}


def comparable(trace: lw.Trace) -> dict[str, Any]:
    """The trace as a dict without what legitimately differs between a run and its
    resumption: timings, the start time, the run id, and the "replayed" marker."""
    d = trace.to_dict()
    for key in ("started_at", "duration_s", "run_id"):
        d.pop(key)
    for step in d["steps"]:
        step.pop("duration_s")
        step["meta"] = {k: v for k, v in step["meta"].items() if k not in VOLATILE_META}
    return d
