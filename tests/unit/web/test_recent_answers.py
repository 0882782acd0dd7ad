"""RecentAnswers: a costly read answered at most once per moment, however often it is asked."""

from __future__ import annotations

import asyncio

import pytest

from app.web.recent_answers import RecentAnswers
from tests.support.clock import Clock


class Costly:
    def __init__(self) -> None:
        self.calls = 0
        self.running = 0
        self.most_at_once = 0
        self.release = asyncio.Event()

    async def answer(self, key: str) -> str:
        self.calls += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await self.release.wait()
        self.running -= 1
        return f"{key}#{self.calls}"


@pytest.mark.asyncio
async def test_many_askers_at_once_share_one_computation_then_the_answer_is_kept_for_its_moment() -> None:
    clock, costly = Clock(), Costly()
    answers: RecentAnswers[str, str] = RecentAnswers(2.0, clock=clock.time)
    askers = [asyncio.create_task(answers.get("s", lambda: costly.answer("s"))) for _ in range(50)]
    await asyncio.sleep(0)
    costly.release.set()
    assert set(await asyncio.gather(*askers)) == {"s#1"}
    assert await answers.get("s", lambda: costly.answer("s")) == "s#1"
    clock.advance(2.0)
    assert await answers.get("s", lambda: costly.answer("s")) == "s#2"
    assert costly.calls == 2


@pytest.mark.asyncio
async def test_one_computation_at_a_time_over_all_keys_and_a_bounded_number_kept() -> None:
    costly = Costly()
    answers: RecentAnswers[str, str] = RecentAnswers(60.0, max_keys=3, clock=Clock().time)
    keys = [f"k{i}" for i in range(10)]
    askers = [asyncio.create_task(answers.get(k, lambda k=k: costly.answer(k))) for k in keys]  # type: ignore[misc]
    await asyncio.sleep(0)
    costly.release.set()
    await asyncio.gather(*askers)
    assert costly.most_at_once == 1 and costly.calls == 10
    assert len(answers._kept) == 3  # the three newest


@pytest.mark.asyncio
async def test_a_failure_is_not_kept() -> None:
    answers: RecentAnswers[str, str] = RecentAnswers(60.0, clock=Clock().time)
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("broker away")
        return "fine"

    with pytest.raises(ConnectionError):
        await answers.get("s", flaky)
    assert await answers.get("s", flaky) == "fine"
