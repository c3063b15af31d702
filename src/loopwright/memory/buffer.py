"""Tier 1: the buffer, the last few turns kept verbatim (the agent's working memory)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator


class BufferMemory:
    """A FIFO of the most recent `max_turns` turns.

    Adding past capacity evicts the oldest turn: `add` returns it and hands it to
    `on_evict`, so a caller (TieredMemory) can fold it into a summary instead of losing it.
    """

    def __init__(self, max_turns: int, on_evict: Callable[[str], object] | None = None) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        self.max_turns = max_turns
        self.on_evict = on_evict
        self._turns: deque[str] = deque()

    @property
    def turns(self) -> list[str]:
        """The kept turns, oldest first (a copy)."""
        return list(self._turns)

    def add(self, turn: str) -> str | None:
        """Append a turn; return the evicted oldest turn, or None if nothing was evicted."""
        self._turns.append(turn)
        if len(self._turns) <= self.max_turns:
            return None
        evicted = self._turns.popleft()
        if self.on_evict is not None:
            self.on_evict(evicted)
        return evicted

    def clear(self) -> None:
        self._turns.clear()

    def __len__(self) -> int:
        return len(self._turns)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._turns))

    def __repr__(self) -> str:
        return f"BufferMemory(max_turns={self.max_turns}, turns={len(self._turns)})"
