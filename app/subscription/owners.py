"""Where subscription shards keep their owner log (`app.ordered.owner_log`): a compacted topic
beside the registry, `<registry topic>.owners`; a shard's lane is `<subscription>/shard-<n>`."""

from __future__ import annotations

from collections.abc import Callable

from app.kafka.broker import BrokerPort
from app.ordered.owner_log import KafkaOwnerLog
from app.settings import Settings

__all__ = ["lane_of", "lanes_of", "owner_log_of", "shard_owner_log"]


def lane_of(subscription: str, shard: int) -> str:
    return f"{subscription}/shard-{shard}"


def lanes_of(subscription: str) -> Callable[[str], bool]:
    """Whether a lane is one of `subscription`'s shards (of any shard count it had)."""

    def belongs(lane: str) -> bool:
        name, sep, shard = lane.rpartition("/shard-")
        return bool(sep) and name == subscription and shard.isdigit()

    return belongs


def shard_owner_log(broker: BrokerPort, registry_topic: str, *, replication_factor: int) -> KafkaOwnerLog:
    return KafkaOwnerLog(
        broker,
        f"{registry_topic}.owners",
        replication_factor=replication_factor,
        claim_point="subscription.owner.claim",
        release_point="subscription.owner.release",
    )


def owner_log_of(settings: Settings, broker: BrokerPort) -> KafkaOwnerLog:
    """The owner log of these settings' subscription registry."""
    return shard_owner_log(
        broker, settings.subscription_registry_topic, replication_factor=settings.kafka_replication_factor
    )
