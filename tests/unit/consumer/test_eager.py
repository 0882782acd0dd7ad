"""`app.consumer.eager`: a coroutine run to its first suspension by hand, then awaited to its end,
behaves as if it had been awaited from its start (values, exceptions, cancellation, timeouts)."""

from __future__ import annotations

import asyncio

import pytest

from app.consumer.eager import resume, start


async def test_a_call_that_does_not_suspend_ends_in_start() -> None:
    seen: list[int] = []

    async def handler(n: int) -> int:
        seen.append(n)
        return n

    assert start(handler(1)) is None
    assert seen == [1]


async def test_a_failure_before_any_suspension_is_raised_by_start() -> None:
    async def handler() -> None:
        raise ValueError("bad record")

    with pytest.raises(ValueError, match="bad record"):
        start(handler())


async def test_a_suspended_call_is_awaited_to_its_end_with_its_value_and_failures() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def handler(fail: bool) -> int:
        steps.append("before")
        got = await gate
        await asyncio.sleep(0)
        steps.append("after")
        if fail:
            raise RuntimeError("after suspending")
        return got + 1

    suspended = start(handler(False))
    assert suspended is not None and steps == ["before"]
    task = asyncio.ensure_future(resume(suspended))
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result(41)
    assert await task == 42
    assert steps == ["before", "after"]

    failing = start(handler(True))
    assert failing is not None
    with pytest.raises(RuntimeError, match="after suspending"):
        await resume(failing)


async def test_cancelling_the_awaiting_task_cancels_the_call() -> None:
    cleaned: list[str] = []

    async def handler() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cleaned.append("cancelled")
            raise

    async def worker() -> None:
        suspended = start(handler())
        assert suspended is not None
        await resume(suspended)

    task = asyncio.create_task(worker())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["cancelled"]


async def test_a_timeout_inside_the_call_sees_the_task_that_started_it() -> None:
    """Started inside a task (as the copy's workers do), `asyncio.timeout` works from the call's
    first line and cancels only the call."""

    async def handler() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "not reached"

    async def worker() -> str:
        suspended = start(handler())
        assert suspended is not None
        return str(await resume(suspended))

    assert await asyncio.wait_for(asyncio.create_task(worker()), 5) == "timed out"


async def test_an_awaitable_that_is_not_a_coroutine() -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    suspended = start(future)
    assert suspended is not None
    future.set_result(7)
    assert await resume(suspended) == 7
