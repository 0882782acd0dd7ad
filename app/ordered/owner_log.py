"""The owner log of subscription shards (`app.ordered.ports.OwnerLog`) on Kafka: a one-partition
compacted topic beside the subscription registry, `<registry topic>.owners`. Keys are
`<lane>\\x1fclaim` and `<lane>\\x1frelease`, so compaction keeps each lane's latest claim and
latest release; a claim's offset is its epoch."""

from __future__ import annotations

import orjson

from app.kafka.broker import BrokerPort
from app.kafka.compacted import CompactedLog
from app.ordered.lease import OwnerRecord

__all__ = ["KafkaOwnerLog"]

SEP = "\x1f"


class KafkaOwnerLog:
    """`claim_point`, `release_point`: the crash points of a claim and of a release (each host
    names its own)."""

    def __init__(
        self, broker: BrokerPort, topic: str, *, replication_factor: int, claim_point: str, release_point: str
    ) -> None:
        self.topic = topic
        self._claim_point, self._release_point = claim_point, release_point
        self._log = CompactedLog(
            broker,
            topic,
            reader_group=f"hubstream-owners-{topic}",
            point=self._claim_point,
            replication_factor=replication_factor,
        )

    def claim(self, lane: str, owner: str, nonce: str, lease_s: float) -> None:
        value = orjson.dumps({"owner": owner, "nonce": nonce, "lease_s": lease_s})
        self._log.write(f"{lane}{SEP}claim", value, point=self._claim_point)

    def release(self, lane: str, epoch: int) -> None:
        value = orjson.dumps({"epoch": epoch})
        self._log.write(f"{lane}{SEP}release", value, point=self._release_point)

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
                            "claim",
                            lane,
                            offset,
                            owner=str(fields["owner"]),
                            nonce=str(fields["nonce"]),
                            lease_s=_duration(fields.get("lease_s", 0.0)),
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


def _duration(value: object) -> float:
    """A claim's declared lease: a finite number of seconds, or 0 (not said)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
        return 0.0  # NaN and infinities fail the range check too
    return float(value)
