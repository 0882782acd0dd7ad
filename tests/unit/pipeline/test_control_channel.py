"""A control record the broker refuses fails that send only: the channel replaces its producer, so
the next offset flush goes through (an idempotent producer that hit a fatal error refuses every
later record; before, every later flush failed until the pipeline restarted)."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import ServiceUnavailable
from app.pipeline.state import ControlChannel


class FakeProducer:
    """Confirms records, or refuses all of them (as after a fatal error) when `broken`."""

    def __init__(self, broken: bool) -> None:
        self.broken = broken
        self.sent: list[bytes] = []
        self._callbacks: list[Any] = []

    def produce(self, topic: str, value: bytes, key: bytes, partition: int, on_delivery: Any) -> None:
        self.sent.append(value)
        self._callbacks.append(on_delivery)

    def flush(self, timeout_s: float) -> int:
        for callback in self._callbacks:
            callback("KafkaError{code=_FATAL}" if self.broken else None, None)
        self._callbacks.clear()
        return 0


def test_a_refused_send_does_not_poison_the_next_ones() -> None:
    made: list[FakeProducer] = []

    def producer() -> FakeProducer:
        made.append(FakeProducer(broken=not made))  # the first one is broken for good
        return made[-1]

    channel = ControlChannel("unused:9092", "control", producer=producer)
    with pytest.raises(ServiceUnavailable, match="not confirmed"):
        channel.send_blocking([{"kind": "set", "key": "w/a", "value": 1}])
    channel.send_blocking([{"kind": "set", "key": "w/a", "value": 1}])
    channel.send_blocking([{"kind": "set", "key": "w/a", "value": 2}])
    assert len(made) == 2 and len(made[1].sent) == 2
