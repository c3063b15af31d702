import pytest

from loopwright.memory import BufferMemory


def test_buffer_keeps_last_max_turns_and_evicts_oldest() -> None:
    buffer = BufferMemory(max_turns=3)
    for i in range(5):
        buffer.add(f"turn {i}")
    assert buffer.turns == ["turn 2", "turn 3", "turn 4"]
    assert len(buffer) == 3


def test_add_returns_the_evicted_turn_only_past_capacity() -> None:
    buffer = BufferMemory(2)
    assert buffer.add("a") is None
    assert buffer.add("b") is None
    assert buffer.add("c") == "a"
    assert buffer.add("d") == "b"


def test_on_evict_is_handed_each_evicted_turn_in_order() -> None:
    evicted: list[str] = []
    buffer = BufferMemory(1, on_evict=evicted.append)
    for turn in ["x", "y", "z"]:
        buffer.add(turn)
    assert evicted == ["x", "y"]
    assert buffer.turns == ["z"]


def test_turns_is_a_copy_that_cannot_change_the_buffer() -> None:
    buffer = BufferMemory(2)
    buffer.add("a")
    buffer.turns.append("sneaked in")
    assert buffer.turns == ["a"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_buffer_rejects_a_capacity_that_is_not_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="max_turns"):
        BufferMemory(bad)  # type: ignore[arg-type]
