"""The owner log of subscription shards (`app.ordered.ports.OwnerLog`) on Kafka: a one-partition
compacted topic beside the subscription registry, `<registry topic>.owners`. Keys are
`<lane>\\x1fclaim` and `<lane>\\x1frelease`, so compaction keeps each lane's latest claim and
latest release; a claim's offset is its epoch."""

from __future__ import annotations

import orjson

from app.kafka.broker import BrokerPort
from app.kafka.compacted import CompactedLog
from app.ordered.lease import OwnerRecord
from app.settings import Settings

__all__ = ["KafkaOwnerLog", "lane_of"]

SEP = "\x1f"


def lane_of(subscription: str, shard: int) -> str:
    return f"{subscription}/shard-{shard}"


class KafkaOwnerLog:
    def __init__(self, broker: BrokerPort, registry_topic: str, *, replication_factor: int) -> None:
        self.topic = f"{registry_topic}.owners"
        self._log = CompactedLog(
            broker,
            self.topic,
            reader_group="hubstream-subscription-owners",
            point="subscription.owner.claim",
            replication_factor=replication_factor,
        )

    @classmethod
    def of(cls, settings: Settings, broker: BrokerPort) -> KafkaOwnerLog:
        return cls(
            broker, settings.subscription_registry_topic, replication_factor=settings.kafka_replication_factor
        )

    def claim(self, lane: str, owner: str, nonce: str) -> None:
        value = orjson.dumps({"owner": owner, "nonce": nonce})
        self._log.write(f"{lane}{SEP}claim", value, point="subscription.owner.claim")

    def release(self, lane: str, epoch: int) -> None:
        value = orjson.dumps({"epoch": epoch})
        self._log.write(f"{lane}{SEP}release", value, point="subscription.owner.release")

    def read_new(self) -> list[OwnerRecord]:
        out: list[OwnerRecord] = []

        def apply(offset: int, key: str, value: bytes | None) -> None:
            lane, _, kind = key.rpartition(SEP)
            if value is None or kind not in ("claim", "release"):
                return
            try:
                fields = orjson.loads(value)
                if kind == "claim":
                    out.append(
                        OwnerRecord(
                            "claim", lane, offset, owner=str(fields["owner"]), nonce=str(fields["nonce"])
                        )
                    )
                else:
                    out.append(OwnerRecord("release", lane, offset, epoch=int(fields["epoch"])))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                return  # not a record of ours: it claims nothing

        with self._log.lock:
            self._log.read_new_at(apply)
        return out

    def close(self) -> None:
        self._log.close()
