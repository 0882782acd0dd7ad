"""Subscription definitions kept in a compacted Kafka topic keyed by name (like composite topics).

The last record per name wins (by version); a tombstone deletes. Workers poll `refresh()`.
Workers also keep one *shard mark* per running shard there (key `<name>\x1f<shard>`: running or
stopped, epoch, when), refreshed every SHARD_MARK_INTERVAL_S, so operations can confirm that a
stopped subscription's shards really stopped (`wait_stopped`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.writing import produce_confirmed
from app.subscription.errors import UnknownSubscription
from app.subscription.model import Subscription

__all__ = ["SHARD_MARK_INTERVAL_S", "SubscriptionRegistry"]

SHARD_SEP = "\x1f"
SHARD_MARK_INTERVAL_S = 10.0


class SubscriptionRegistry:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.admin = KafkaAdmin(bootstrap)
        self._subs: dict[str, Subscription] = {}
        self._marks: dict[str, dict[int, dict[str, Any]]] = {}
        self._position = 0
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()

    def refresh(self, timeout_s: float = 10.0) -> dict[str, Subscription]:
        with self._lock:
            if self._consumer is None:
                self.admin.create([TopicSpec(self.topic, 1, {"cleanup.policy": "compact"})])
                self._consumer = Consumer(
                    {
                        "bootstrap.servers": self.bootstrap,
                        "group.id": "hubstream-subscription-registry",
                        "enable.auto.commit": False,
                        "enable.partition.eof": True,
                    }
                )
                self._consumer.assign([TopicPartition(self.topic, 0, 0)])
            _, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout_s)
            deadline = time.monotonic() + timeout_s
            while self._position < high:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(
                        f"{self.topic}[0] offset={self._position}: registry read timed out"
                    )
                msg = self._consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        # ListOffsets may under-report on Tansu; EOF is the true end.
                        high = max(high, msg.offset())
                        if self._position >= high:
                            break
                        continue
                    raise ServiceUnavailable(f"{self.topic}[0]: {msg.error()}")
                self._position = msg.offset() + 1
                high = max(high, self._position)
                name = msg.key().decode()
                if SHARD_SEP in name:
                    sub_name, shard = name.split(SHARD_SEP, 1)
                    marks = self._marks.setdefault(sub_name, {})
                    if msg.value() is None:
                        marks.pop(int(shard), None)
                    else:
                        marks[int(shard)] = orjson.loads(msg.value())
                    continue
                if msg.value() is None:
                    self._subs.pop(name, None)
                    continue
                parsed = Subscription.from_json(orjson.loads(msg.value()))
                known = self._subs.get(name)
                if known is None or parsed.version >= known.version:
                    self._subs[name] = parsed
            return dict(self._subs)

    def shard_marks(self, name: str) -> dict[int, dict[str, Any]]:
        """The latest mark per shard of `name` (as of the last refresh)."""
        return dict(self._marks.get(name, {}))

    def mark_shard(self, name: str, shard: int, running: bool, epoch: int) -> None:
        mark = {
            "running": running,
            "epoch": epoch,
            "at_ms": int(time.time() * 1000),
            "worker": f"{socket.gethostname()}:{os.getpid()}",
        }
        self._write(f"{name}{SHARD_SEP}{shard}", orjson.dumps(mark))

    def get(self, name: str) -> Subscription:
        sub = self.refresh().get(name)
        if sub is None:
            raise UnknownSubscription(f"no subscription named {name!r}")
        return sub

    def _write(self, name: str, value: bytes | None) -> None:
        produce_confirmed(
            self.bootstrap, self.topic, name.encode(), value, point="subscription.registry.write"
        )

    def put(self, sub: Subscription) -> Subscription:
        self._write(sub.name, orjson.dumps(sub.to_json()))
        self.refresh()
        return sub

    def delete(self, name: str) -> None:
        self._write(name, None)
        self.refresh()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
