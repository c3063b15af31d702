"""One model call held to the run's wall clock: the policy runs on a daemon thread that is
abandoned at the deadline (moved out of _core.py, which keeps the choke points)."""

from __future__ import annotations

import threading
from typing import Any

from loopwright.policy import Completion, ModelRequest, Policy, call_policy


class _PolicyTimeout(Exception):
    pass


def _call_within(policy: Policy, request: ModelRequest, seconds: float) -> Completion:
    """Call the policy on a daemon thread and wait at most `seconds` for it.

    A policy that overruns is abandoned (Python cannot kill a thread); the run stops
    with "timeout" rather than waiting on it.
    """
    box: list[Any] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(call_policy(policy, request))
        except BaseException as exc:  # handed to the caller's thread below
            box.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, name="loopwright-policy", daemon=True).start()
    if not done.wait(seconds):
        raise _PolicyTimeout
    out = box[0]
    if isinstance(out, BaseException):
        raise out
    return out  # type: ignore[no-any-return]
