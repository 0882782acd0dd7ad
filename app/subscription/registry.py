"""Subscription definitions kept in a compacted Kafka topic keyed by name (like composite topics).

The last record per name wins (by version); a tombstone deletes. Workers poll `refresh()`.
Workers also keep one *shard mark* per running shard there (key `<name>\x1f<shard>`: running or
stopped, epoch, when), refreshed every SHARD_MARK_INTERVAL_S, so operations can confirm that a
stopped subscription's shards really stopped (`wait_stopped`).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import orjson

from app.kafka.broker import BrokerPort, broker_for
from app.kafka.compacted import CompactedLog
from app.settings import Settings
from app.subscription.errors import UnknownSubscription
from app.subscription.model import Subscription

__all__ = ["SHARD_MARK_INTERVAL_S", "SubscriptionRegistry"]

SHARD_SEP = "\x1f"
SHARD_MARK_INTERVAL_S = 10.0


class SubscriptionRegistry:
    def __init__(self, broker: BrokerPort, topic: str, *, replication_factor: int) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.topic = topic
        self._log = CompactedLog(
            broker,
            topic,
            reader_group="hubstream-subscription-registry",
            point="subscription.registry.write",
            replication_factor=replication_factor,
        )
        self._subs: dict[str, Subscription] = {}
        self._marks: dict[str, dict[int, dict[str, Any]]] = {}

    @classmethod
    def of(cls, settings: Settings) -> SubscriptionRegistry:
        """The registry of these settings' broker and registry topic."""
        return cls(
            broker_for(settings),
            settings.subscription_registry_topic,
            replication_factor=settings.kafka_replication_factor,
        )

    def _apply(self, name: str, value: bytes | None) -> None:
        if SHARD_SEP in name:
            sub_name, shard = name.split(SHARD_SEP, 1)
            marks = self._marks.setdefault(sub_name, {})
            if value is None:
                marks.pop(int(shard), None)
            else:
                marks[int(shard)] = orjson.loads(value)
            return
        if value is None:
            self._subs.pop(name, None)
            return
        parsed = Subscription.from_json(orjson.loads(value))
        known = self._subs.get(name)
        if known is None or parsed.version >= known.version:
            self._subs[name] = parsed

    def refresh(self, timeout_s: float = 10.0) -> dict[str, Subscription]:
        with self._log.lock:
            self._log.read_new(self._apply, timeout_s)
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
        self._log.write(name, value)

    def put(self, sub: Subscription) -> Subscription:
        self._write(sub.name, orjson.dumps(sub.to_json()))
        self.refresh()
        return sub

    def delete(self, name: str) -> None:
        self._write(name, None)
        self.refresh()

    def close(self) -> None:
        self._log.close()
