"""Subscription definitions kept in a compacted Kafka topic keyed by name (like composite topics).

The last record per name wins (by version); a tombstone deletes. Workers poll `refresh()`.
Whether a shard still runs is the owner log's to say (`app.subscription.stopping`); records keyed
`<name>\x1f<shard>` (the shard marks of earlier versions) are ignored.
"""

from __future__ import annotations

import orjson

from app.kafka.broker import BrokerPort, broker_for
from app.kafka.compacted import CompactedLog
from app.settings import Settings
from app.subscription.errors import UnknownSubscription
from app.subscription.model import Subscription

__all__ = ["SubscriptionRegistry"]

SHARD_SEP = "\x1f"


class SubscriptionRegistry:
    def __init__(self, broker: BrokerPort, topic: str, *, replication_factor: int) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.topic = topic
        self.replication_factor = replication_factor
        self._log = CompactedLog(
            broker,
            topic,
            reader_group="hubstream-subscription-registry",
            point="subscription.registry.write",
            replication_factor=replication_factor,
        )
        self._subs: dict[str, Subscription] = {}

    @classmethod
    def of(cls, settings: Settings) -> SubscriptionRegistry:
        """The registry of these settings' broker and registry topic."""
        return cls(
            broker_for(settings),
            settings.subscription_registry_topic,
            replication_factor=settings.kafka_replication_factor,
        )

    def _apply(self, name: str, value: bytes | None) -> None:
        if SHARD_SEP in name:  # a shard mark of an earlier version
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
