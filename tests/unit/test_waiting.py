"""`app.waiting`: the value that ended the wait, or None once the time is up."""

from __future__ import annotations

import itertools

from app.waiting import async_poll_until, poll_until


def test_the_first_truthy_value_ends_the_wait() -> None:
    calls = itertools.count(1)
    assert poll_until(lambda: [n] if (n := next(calls)) >= 3 else [], 5, every_s=0.001) == [3]


def test_nothing_truthy_in_time_is_none() -> None:
    seen: list[int] = []
    assert poll_until(lambda: seen.append(1), 0.02, every_s=0.005) is None
    assert len(seen) >= 2  # polled more than once, and at least once past the deadline


async def test_an_async_predicate_is_awaited() -> None:
    calls = itertools.count(1)

    async def ready() -> int:
        return n if (n := next(calls)) >= 2 else 0

    assert await async_poll_until(ready, 5, every_s=0.001) == 2
    assert await async_poll_until(lambda: 0, 0.01, every_s=0.002) is None
