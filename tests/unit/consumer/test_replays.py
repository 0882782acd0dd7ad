"""A replayed dead letter (a retry-topic copy marked hs-replay) is handed to the handler once: when
it fails again, for any reason, it goes back to DLQ as replay-failed and never to a retry."""

from __future__ import annotations

import pytest

from app.consumer.engine import LibraryEngine, Record
from app.consumer.model import ConsumerSettings, Message, OnDlq, PermanentError, RetriableError, RetryPolicy
from app.ordered.engine import Outcome
from app.ordered.memory import MemoryQueues, MemoryStateLog
from app.ordered.records import InternalMeta, decode_internal
from app.ordered.rules import MessageState, on_unsidelined
from app.ordered.work import Work


def failure_reason(headers: dict[str, bytes]) -> str:
    failure = decode_internal(list(headers.items())).failure
    assert failure is not None
    return failure.reason


@pytest.mark.parametrize("error", [RetriableError("later"), PermanentError("never"), ValueError("bug")])
async def test_a_failing_replay_goes_back_to_dlq_once(error: Exception) -> None:
    calls: list[int] = []

    async def handle(message: Message) -> None:
        calls.append(message.offset)
        if message.offset == 0 and len(calls) > 1:
            raise error
        if message.offset == 0:
            raise PermanentError("first time")

    settings = ConsumerSettings(
        name="c", topic="t", bootstrap="unused:9", retry=RetryPolicy(max_attempts=5), on_dlq=OnDlq.BLOCK_GROUP
    )
    states, queues = MemoryStateLog(), MemoryQueues()
    engine = LibraryEngine(settings, handle, states, queues)
    main = Work(Record("t", 0, 0, b"k", b"v"), 0, "k")
    assert await engine.run(main) is Outcome.DEAD_LETTERED
    # The replay tool's effect: the DLQ copy written to the retry topic (offset 0), the state told so.
    dead = states.get(0, "k")
    assert dead is not None
    state = on_unsidelined(dead, MessageState.at((0, 0), (0, 0)), [MessageState.at((0, 0), (0, 0))])
    await states.put(0, "k", state)
    replay = Work(
        Record("c-retry", 0, 0, b"k", b"v"), 0, "k", InternalMeta((0, 0), 0, "t-0-0", 0, 0, replay=True)
    )
    assert await engine.run(replay) is Outcome.DEAD_LETTERED
    assert calls == [0, 0]
    assert not queues.retry.get(0)
    (_, first), (_, again) = queues.dlq[0]
    assert [failure_reason(h) for h in (first, again)] == [
        "failed",
        "replay-failed",
    ]
