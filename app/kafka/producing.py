"""An asyncio producer to a named topic and partition: `await send(...)` returns where the broker
confirmed the record, or raises ProduceFailed / RecordRefused; `produce_all` queues many records
reported to one delivery callback of the caller's. One poll thread serves the delivery callbacks;
a full local queue is waited out, not raised.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from app.errors import ServiceUnavailable
from app.kafka_security import client_config

__all__ = [
    "AsyncProducer",
    "Delivered",
    "PlaceUnknown",
    "ProduceFailed",
    "RecordRefused",
    "produce_blocking",
    "produce_failed",
    "settle",
]


T = TypeVar("T")
OnDelivery = Callable[[KafkaError | None, Message], None]


class ProduceFailed(ServiceUnavailable):
    """The broker did not confirm a produced message."""


class RecordRefused(ProduceFailed):
    """The broker (or the producer) refuses this record itself, too large or invalid: trying
    again cannot help."""

    retriable = False


class PlaceUnknown(ProduceFailed):
    """The broker took the record but did not say at which offset: librdkafka's idempotent
    producer reports a retried batch the broker answers as a duplicate (after a broker restart)
    as delivered with no offset. A caller that records where its copy is must not record a null:
    it writes the copy again, and the first one is read as any copy written before a crash."""


_REFUSING = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.RECORD_LIST_TOO_LARGE}
)


def produce_failed(where: str, err: KafkaError) -> ProduceFailed:
    kind = RecordRefused if err.code() in _REFUSING else ProduceFailed
    return kind(f"{where}: {err}")


def _refused(topic: str, partition: int | None, exc: KafkaException) -> ProduceFailed:
    """The producer refused a record before sending it (e.g. over message.max.bytes, no such
    partition)."""
    where = topic if partition is None else f"{topic}[{partition}]"
    if exc.args and isinstance(exc.args[0], KafkaError):
        return produce_failed(where, exc.args[0])
    return ProduceFailed(f"{where}: {exc}")


def produce_blocking(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None = None,
    partition: int | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    on_delivery: OnDelivery | None = None,
) -> None:
    """Hand one record to a confluent-kafka producer from a thread that may block: while its local
    queue is full, serve delivery callbacks and try again. Raises ProduceFailed (RecordRefused for
    a record that can never be sent) when the producer refuses it before sending."""
    options: dict[str, Any] = {}
    if partition is not None:
        options["partition"] = partition
    if headers:
        options["headers"] = headers
    if on_delivery is not None:
        options["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, value, key, **options)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:
            raise _refused(topic, partition, exc) from exc


@dataclass(frozen=True, slots=True)
class Delivered:
    topic: str
    partition: int
    offset: int


class AsyncProducer:
    def __init__(self, bootstrap: str, *, name: str = "producer", **config: Any) -> None:
        conf = client_config(
            bootstrap,
            **{
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.max.bytes": 1_000_000_000,  # copies of records the broker already holds
                **config,
            },
        )
        self._producer = Producer(conf)
        self._closed = False
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
            offset = msg.offset() if err is None else None
            if err is not None:
                result: Delivered | Exception = produce_failed(f"{msg.topic()}[{msg.partition()}]", err)
            elif offset is None or offset < 0:
                result = PlaceUnknown(f"{msg.topic()}[{msg.partition()}]: delivered without an offset")
            else:
                result = Delivered(msg.topic(), msg.partition(), offset)
            loop.call_soon_threadsafe(settle, future, result)

        await self._queued(topic, partition, key, value, list(headers) if headers else None, on_delivery)
        return await future

    async def produce_all(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes | None, bytes, list[tuple[str, bytes]] | None]],
        on_delivery: OnDelivery,
    ) -> None:
        """Queue (key, value, headers) records in order, each reported to `on_delivery` on the poll
        thread; returns once all are queued (not confirmed). Raises as `send` does for a refused record."""
        for key, value, headers in records:
            if not self._queue(topic, partition, key, value, headers, on_delivery):
                await self._queued(topic, partition, key, value, headers, on_delivery)

    async def flush(self, timeout_s: float = 90.0) -> None:
        """Returns once every record handed over is confirmed or failed; raises when some are
        neither after timeout_s."""
        left = await asyncio.to_thread(self._producer.flush, timeout_s)
        if left:
            raise ServiceUnavailable(f"{left} records neither confirmed nor failed after {timeout_s:.0f} s")

    async def _queued(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        on_delivery: OnDelivery,
    ) -> None:
        """Hand one record to the producer, waiting while its local queue is full."""
        while True:
            if self._queue(topic, partition, key, value, headers, on_delivery):
                return
            await asyncio.sleep(0.02)  # wait for deliveries to drain the queue

    def _queue(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
        on_delivery: OnDelivery,
    ) -> bool:
        """Hand one record to the producer; False when its local queue is full."""
        try:  # positional: keyword parsing costs more, once per record of a bulk
            if headers is None:
                self._producer.produce(topic, value, key, partition, on_delivery)
            else:
                self._producer.produce(topic, value, key, partition, on_delivery, headers=headers)
            return True
        except BufferError:
            return False
        except KafkaException as exc:
            raise _refused(topic, partition, exc) from exc

    async def close(self) -> None:
        if self._closed:
            return
        await asyncio.to_thread(self._producer.flush, 30)
        self._stop.set()
        await asyncio.to_thread(self._poller.join, 5)
        if not self._poller.is_alive():  # no poll in flight: the client and its threads can end now
            self._closed = True
            await asyncio.to_thread(self._producer.close)


def settle(future: asyncio.Future[T], result: T | Exception) -> None:
    if future.done():
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)
