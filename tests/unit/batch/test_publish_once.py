"""A completion is sent once at a time per worker: a get polling the batch while the ack that
completed it is still waiting for the broker does not send it a second time (seen: two completion
events for one batch whenever a client polled during that wait). Once the send is over, a batch
still due (its confirmation not recorded) is sent again: at least once."""

from __future__ import annotations

import asyncio
from typing import Any

from app.batch.model import Completion
from app.batch.service import BatchService
from app.settings import Settings


class Topic:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.confirm: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sending = asyncio.Event()

    async def send(self, **record: Any) -> asyncio.Future[None]:
        self.sent.append(record)
        self.sending.set()
        return self.confirm


async def test_a_completion_being_sent_is_not_sent_again_meanwhile() -> None:
    service = BatchService(None, None, Settings())  # type: ignore[arg-type]  # no table: publish never reads one
    topic = service.completions_topic = Topic()
    completion = Completion("exact", 7, "k", 0)
    by_ack = asyncio.create_task(service.publish([completion]))
    await topic.sending.wait()
    await service.publish([completion])  # a get, while the ack's send waits for the broker
    assert len(topic.sent) == 1
    topic.confirm.set_result(None)
    await by_ack
    await service.publish([completion])  # not recorded as confirmed here (partition not served)
    assert len(topic.sent) == 2
