"""GroupLanes: per-key order, keys side by side, commits up to the first unfinished offset."""

from __future__ import annotations

import asyncio

import pytest

from app.ordered.lanes import GroupLanes


class Gate:
    """A handler whose items ("key:n") wait for their key's gate when one is closed."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.done: list[str] = []
        self.closed: dict[str, asyncio.Event] = {}
        self.fail: set[str] = set()

    def hold(self, key: str) -> None:
        self.closed[key] = asyncio.Event()

    def release(self, key: str) -> None:
        self.closed.pop(key).set()

    async def __call__(self, item: str) -> None:
        self.started.append(item)
        key = item.split(":")[0]
        if key in self.closed:
            await self.closed[key].wait()
        if item in self.fail:
            raise RuntimeError(f"{item} not confirmed")
        self.done.append(item)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_slow_key_holds_only_itself_and_the_commit_stops_at_its_record() -> None:
    gate = Gate()
    gate.hold("slow")
    lanes: GroupLanes[int, str, str] = GroupLanes(gate, max_open=100)
    for offset, item in enumerate(["slow:0", "a:0", "slow:1", "b:0", "a:1"]):
        lanes.take(0, offset, item.split(":")[0], item)
    await settle()
    assert sorted(gate.done) == ["a:0", "a:1", "b:0"], "other keys ran past the slow one"
    assert gate.done.index("a:0") < gate.done.index("a:1"), "a key's items in read order"
    assert "slow:1" not in gate.started, "a key's next item waits for its running one"
    assert lanes.committable() == {0: 0}, "nothing past the unfinished record"
    assert lanes.open == 2
    gate.release("slow")
    await lanes.drain()
    assert gate.done[-2:] == ["slow:0", "slow:1"]
    assert lanes.committable() == {0: 5}
    assert lanes.open == 0 and not lanes.busy("slow")


async def test_partitions_commit_independently() -> None:
    gate = Gate()
    gate.hold("slow")
    lanes: GroupLanes[int, str, str] = GroupLanes(gate, max_open=100)
    lanes.take(0, 10, "slow", "slow:0")
    lanes.take(1, 20, "a", "a:0")
    lanes.take(1, 21, "b", "b:0")
    await settle()
    assert lanes.committable() == {0: 10, 1: 22}
    gate.release("slow")
    await lanes.drain()
    assert lanes.committable() == {0: 11, 1: 22}


async def test_an_item_read_and_not_yet_submitted_holds_its_partition() -> None:
    """RQ copies waiting for their time are read in order and submitted when due."""
    gate = Gate()
    lanes: GroupLanes[int, str, str] = GroupLanes(gate, max_open=100)
    lanes.read(0, 0)  # waits for its backoff
    lanes.read(0, 1)
    lanes.submit(0, 1, "b", "b:0")  # due first
    await lanes.drain()
    assert lanes.committable() == {0: 0}
    assert lanes.open == 0, "waiting copies do not count against the bound"
    lanes.submit(0, 0, "a", "a:0")
    await lanes.drain()
    assert lanes.committable() == {0: 2}


async def test_a_failure_stops_the_lanes_and_is_raised() -> None:
    gate = Gate()
    gate.fail.add("a:1")
    lanes: GroupLanes[int, str, str] = GroupLanes(gate, max_open=100)
    for offset, item in enumerate(["a:0", "a:1", "a:2"]):
        lanes.take(0, offset, "a", item)
    with pytest.raises(RuntimeError, match="a:1 not confirmed"):
        await lanes.drain()
    assert gate.done == ["a:0"] and "a:2" not in gate.started
    assert lanes.committable() == {0: 1}, "never past the failed record"
    with pytest.raises(RuntimeError):
        lanes.raise_failure()


async def test_close_lets_running_items_end_and_starts_nothing_waiting() -> None:
    gate = Gate()
    gate.hold("a")
    lanes: GroupLanes[int, str, str] = GroupLanes(gate, max_open=100)
    lanes.take(0, 0, "a", "a:0")
    lanes.take(0, 1, "a", "a:1")
    await settle()
    closing = asyncio.create_task(lanes.close())
    await settle()
    assert not closing.done(), "close waits for the running item"
    gate.release("a")
    await closing
    assert gate.done == ["a:0"] and lanes.committable() == {0: 1}


async def test_the_bound_on_open_items() -> None:
    gate = Gate()
    gate.hold("a")
    lanes: GroupLanes[int, str, str] = GroupLanes(gate, max_open=2)
    lanes.take(0, 0, "a", "a:0")
    assert not lanes.full
    lanes.take(0, 1, "b", "b:0")
    await settle()
    assert not lanes.full, "b finished"
    lanes.take(0, 2, "a", "a:1")
    assert lanes.full
    waiting = asyncio.create_task(lanes.wait_change(5))
    await settle()
    gate.release("a")
    await waiting
    await lanes.drain()
    assert not lanes.full and lanes.committable() == {0: 3}
    with pytest.raises(ValueError):
        GroupLanes(gate, max_open=0)


async def test_reset_is_refused_while_items_run() -> None:
    gate = Gate()
    gate.hold("a")
    lanes: GroupLanes[int, str, str] = GroupLanes(gate, max_open=10)
    lanes.take(0, 0, "a", "a:0")
    with pytest.raises(RuntimeError):
        lanes.reset()
    gate.release("a")
    await lanes.drain()
    lanes.reset()
    assert lanes.committable() == {}
