"""An asyncio producer to a named topic and partition: `await send(...)` returns where the broker
confirmed the record, or raises ProduceFailed / RecordRefused. One poll thread serves the
delivery callbacks; a full local queue is waited out, not raised.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from app.errors import ServiceUnavailable

__all__ = ["AsyncProducer", "Delivered", "ProduceFailed", "RecordRefused", "produce_failed", "settle"]


class ProduceFailed(ServiceUnavailable):
    """The broker did not confirm a produced message."""


class RecordRefused(ProduceFailed):
    """The broker (or the producer) refuses this record itself, too large or invalid: trying
    again cannot help."""

    retriable = False


_REFUSING = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.RECORD_LIST_TOO_LARGE}
)


def produce_failed(where: str, err: KafkaError) -> ProduceFailed:
    kind = RecordRefused if err.code() in _REFUSING else ProduceFailed
    return kind(f"{where}: {err}")


@dataclass(frozen=True, slots=True)
class Delivered:
    topic: str
    partition: int
    offset: int


class AsyncProducer:
    def __init__(self, bootstrap: str, *, name: str = "producer", **config: Any) -> None:
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.max.bytes": 1_000_000_000,  # copies of records the broker already holds
        }
        conf.update(config)
        self._producer = Producer(conf)
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name=f"produce-{name}", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    async def send(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> Delivered:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Delivered] = loop.create_future()

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                result: Delivered | Exception = produce_failed(f"{msg.topic()}[{msg.partition()}]", err)
            else:
                result = Delivered(msg.topic(), msg.partition(), msg.offset())
            loop.call_soon_threadsafe(settle, future, result)

        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=list(headers) if headers else None,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:  # the local queue is full: wait for deliveries to drain it
                await asyncio.sleep(0.02)
            except KafkaException as exc:  # refused before sending (e.g. over message.max.bytes)
                where = f"{topic}[{partition}]"
                if exc.args and isinstance(exc.args[0], KafkaError):
                    raise produce_failed(where, exc.args[0]) from exc
                raise ProduceFailed(f"{where}: {exc}") from exc
        return await future

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.flush, 30)
        self._stop.set()
        await asyncio.to_thread(self._poller.join, 5)


def settle(future: asyncio.Future[Delivered], result: Delivered | Exception) -> None:
    if future.done():
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)
