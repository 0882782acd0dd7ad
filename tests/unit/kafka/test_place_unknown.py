"""A record the broker took without saying where: librdkafka's idempotent producer reports a
retried batch that the broker answers as a duplicate (after a broker restart) as delivered with
no offset. `AsyncProducer.send` raises PlaceUnknown for it instead of returning a null offset,
which callers recorded in group states as a null position (and then every shard start failed)."""

from __future__ import annotations

from typing import Any

import pytest

from app.kafka.producing import AsyncProducer, PlaceUnknown, ProduceFailed


class _Msg:
    def __init__(self, offset: int | None) -> None:
        self._offset = offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int | None:
        return self._offset


class _Producer:
    """Stands in for the client behind AsyncProducer; closes the real one it replaced."""

    def __init__(self, offset: int | None, real: Any) -> None:
        self.offset, self.real = offset, real

    def close(self) -> None:
        self.real.close()

    def produce(self, topic: str, value: bytes, key: bytes, partition: int, cb: Any, **_: Any) -> None:
        cb(None, _Msg(self.offset))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


@pytest.mark.parametrize("offset", [None, -1])
async def test_a_delivery_without_an_offset_is_not_a_place(offset: int | None) -> None:
    producer = AsyncProducer("127.0.0.1:1")
    producer._producer = _Producer(offset, producer._producer)  # type: ignore[assignment]
    try:
        with pytest.raises(PlaceUnknown, match="without an offset") as raised:
            await producer.send("t", 0, b"k", b"v")
        assert isinstance(raised.value, ProduceFailed) and raised.value.retriable
    finally:
        await producer.close()


async def test_a_delivery_with_an_offset_says_where() -> None:
    producer = AsyncProducer("127.0.0.1:1")
    producer._producer = _Producer(7, producer._producer)  # type: ignore[assignment]
    try:
        delivered = await producer.send("t", 0, b"k", b"v")
    finally:
        await producer.close()
    assert (delivered.topic, delivered.partition, delivered.offset) == ("t", 0, 7)
