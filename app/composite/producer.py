"""Producers for composite topics: route each message to the storage topic at the produce
pointer and the partition the shard-consistent router picks. Sync and async flavours share
one routing path (`RoutedTarget`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import orjson
from confluent_kafka import KafkaError, Message, Producer

from app.composite.errors import InvalidPayload
from app.composite.model import CompositeTopic, check_group_id
from app.composite.store import MetadataStore
from app.kafka.producing import (
    AsyncProducer,
    Delivered,
    ProduceFailed,
    RecordRefused,
    produce_blocking,
    produce_failed,
)
from app.kafka_security import client_config
from app.settings import Settings

__all__ = [
    "SWITCH_FLUSH_S",
    "AsyncCompositeProducer",
    "CompositeProducer",
    "Definitions",
    "Delivered",
    "ProduceFailed",
    "RecordRefused",
    "RoutedTarget",
    "encode_payload",
    "produce_failed",
]

Payload = bytes | str | Mapping[str, Any] | list[Any] | int | float | bool | None
Headers = Mapping[str, str | bytes]


def encode_payload(payload: Payload, max_bytes: int | None) -> bytes:
    """The payload as bytes; InvalidPayload beyond `max_bytes` (None: no limit of our own)."""
    if isinstance(payload, bytes):
        data = payload
    elif isinstance(payload, str):
        data = payload.encode("utf-8")
    else:
        try:
            data = orjson.dumps(payload)
        except TypeError as exc:
            raise InvalidPayload(f"payload is not JSON-serialisable: {exc}") from exc
    if max_bytes is not None and len(data) > max_bytes:
        raise InvalidPayload(f"payload of {len(data)} bytes exceeds MAX_PAYLOAD_BYTES={max_bytes}")
    return data


LIBRDKAFKA_MAX_MESSAGE_BYTES = 1_000_000_000
# Longest wait at a produce-pointer switch for the records sent before it: past librdkafka's
# delivery timeout (300 s by default) every one of them is confirmed or failed.
SWITCH_FLUSH_S = 330.0  # the largest message.max.bytes librdkafka accepts


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    config = client_config(
        settings.bootstrap,
        **{
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "compression.type": "none",
            "message.max.bytes": max(settings.max_payload_bytes + 65536, 1_000_000),
            **overrides,
        },
    )
    return config


class Definitions(Protocol):
    """Where a producer reads a composite topic's definition (`MetadataStore`)."""

    def get(self, name: str) -> CompositeTopic: ...


class RoutedTarget:
    """Holds a composite topic's definition, refreshed at an interval, and routes group ids.

    Routes are cached per group id for the current definition (recipients repeat, hashing
    and validation then cost one dict lookup); any change of the definition clears the cache.

    A producer never writes the storage topic a switch moved to while records it handed over for
    the one before are unconfirmed: a refresh that finds the produce pointer moved holds the new
    definition back (`switch_pending`) until the caller confirmed what it sent (`switch`). So one
    producer's records of a group in the older storage topic are all stored before its first one
    in the newer, however long the client retries them.
    """

    MAX_CACHED_ROUTES = 200_000

    def __init__(
        self,
        store: Definitions,
        name: str,
        refresh_s: float,
        max_group_id_bytes: int,
        *,
        before_switch: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.refresh_s = refresh_s
        self.max_group_id_bytes = max_group_id_bytes
        self.topic: CompositeTopic = store.get(name)
        self._before_switch = before_switch
        self._pending: CompositeTopic | None = None
        self._routes: dict[str, tuple[str, int, bytes]] = {}
        self._next_refresh = time.monotonic() + refresh_s

    def switch_pending(self) -> bool:
        """Re-reads the definition when due. True when the produce pointer moved: the caller
        confirms every record it handed over, then calls `switch`."""
        if self._pending is not None:
            return True
        if time.monotonic() < self._next_refresh:
            return False
        latest = self.store.get(self.name)
        self._next_refresh = time.monotonic() + self.refresh_s
        if latest.produce_pointer != self.topic.produce_pointer:
            self._pending = latest
            return True
        self._use(latest)
        return False

    def switch(self) -> None:
        """Route by the definition `switch_pending` found (what was sent before is confirmed)."""
        if self._pending is not None:
            self._use(self._pending)
            self._pending = None

    def _use(self, latest: CompositeTopic) -> None:
        if latest != self.topic:
            self.topic = latest
            self._routes.clear()

    def route(self, group_id: str) -> tuple[str, int, bytes]:
        """`target` for a synchronous producer: a moved pointer is followed once `before_switch`
        (the producer's flush, which raises when records failed) returned."""
        if self.switch_pending():
            if self._before_switch is not None:
                self._before_switch()
            self.switch()
        return self.target(group_id)

    def target(self, group_id: str) -> tuple[str, int, bytes]:
        """(storage topic, partition, encoded key) for a group id, by the definition in use."""
        route = self._routes.get(group_id)
        if route is None:
            check_group_id(group_id, self.max_group_id_bytes)
            topic, partition = self.topic.target(group_id)
            route = (topic, partition, group_id.encode("utf-8"))
            if len(self._routes) >= self.MAX_CACHED_ROUTES:
                self._routes.clear()
            self._routes[group_id] = route
        return route


def _headers(headers: Headers | None) -> list[tuple[str, bytes]] | None:
    if not headers:
        return None
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in headers.items()]


class CompositeProducer:
    """Synchronous producer bound to one composite topic; call `flush()` to confirm delivery."""

    def __init__(
        self, settings: Settings, name: str, store: MetadataStore | None = None, **config: Any
    ) -> None:
        self.settings = settings
        self._store = store or MetadataStore.of(settings)
        self._router = RoutedTarget(
            self._store,
            name,
            settings.metadata_refresh_s,
            settings.max_group_id_bytes,
            before_switch=lambda: self.flush(SWITCH_FLUSH_S),
        )
        self._errors: list[str] = []
        self._max_payload_bytes = settings.max_payload_bytes
        # Delivery reports for failures only: a per-message Python callback would cost
        # more than the rest of produce(); flush() raises if any report arrived.
        self._producer = Producer(
            producer_config(
                settings, **{"delivery.report.only.error": True, "on_delivery": self._on_delivery, **config}
            )
        )
        self.produced = 0

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def produce(self, group_id: str, payload: Payload, headers: Headers | None = None) -> tuple[str, int]:
        topic, partition, key = self._router.route(group_id)
        value = encode_payload(payload, self._max_payload_bytes)
        produce_blocking(
            self._producer, topic, value, key, partition, headers=_headers(headers) if headers else None
        )
        self._producer.poll(0)
        self.produced += 1
        return topic, partition

    def flush(self, timeout_s: float = 60.0) -> None:
        remaining = self._producer.flush(timeout_s)
        if remaining:
            raise ProduceFailed(f"{remaining} messages not confirmed within {timeout_s:.0f} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise ProduceFailed(f"{len(errors)} messages failed; first: {errors[0]}")

    def close(self) -> None:
        self.flush()
        self._store.close()

    def __enter__(self) -> CompositeProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncCompositeProducer:
    """asyncio producer: `await produce(...)` returns once the broker confirmed the message.

    `copies=True` is for copies of records the broker already holds (a subscription's RQ and DLQ):
    MAX_PAYLOAD_BYTES limits new input only, so a copy is never refused for its size by this
    client (the broker's own limit still applies); a shard must be able to sideline any record.
    """

    def __init__(
        self,
        settings: Settings,
        name: str,
        store: MetadataStore | None = None,
        *,
        copies: bool = False,
        **config: Any,
    ) -> None:
        self.settings = settings
        self._max_payload_bytes = None if copies else settings.max_payload_bytes
        if copies:
            config.setdefault("message.max.bytes", LIBRDKAFKA_MAX_MESSAGE_BYTES)
        self._store = store or MetadataStore.of(settings)
        self._router = RoutedTarget(
            self._store, name, settings.metadata_refresh_s, settings.max_group_id_bytes
        )
        self._producer = AsyncProducer(settings.bootstrap, name=name, **producer_config(settings, **config))

    async def produce(self, group_id: str, payload: Payload, headers: Headers | None = None) -> Delivered:
        if self._router.switch_pending():
            await self._producer.flush(SWITCH_FLUSH_S)
            self._router.switch()
        topic, partition, key = self._router.target(group_id)
        value = encode_payload(payload, self._max_payload_bytes)
        return await self._producer.send(topic, partition, key, value, _headers(headers))

    async def close(self) -> None:
        await self._producer.close()
        self._store.close()
