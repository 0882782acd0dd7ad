"""Producing item acks to the ack topic (`batch-acks`): one record per batch, keyed by batch id,
value {"batchItemIds": [...]}, sent straight to the partition that owns the batch.

A record keyed by batch id but landing on another partition (e.g. a producer with its own
partitioner) still works: the ack agent forwards it once to the owning partition.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Producer

from app.batch.ids import group_item_ids, partition_of_exact
from app.crashpoints import crash_point
from app.kafka.producing import produce_blocking
from app.kafka_security import client_config

__all__ = ["MAX_IDS_PER_RECORD", "AckProducer", "AckRecord", "ack_records", "send_acks"]

MAX_IDS_PER_RECORD = 10_000

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AckRecord:
    key: bytes
    value: bytes
    partition: int


def ack_records(
    item_ids: Iterable[str], partitions: int, max_ids: int = MAX_IDS_PER_RECORD
) -> list[AckRecord]:
    """Ack records for `item_ids` (validated; MalformedItemId names a bad one), at most `max_ids` each."""
    ids = list(item_ids)
    by_batch: dict[int, list[str]] = defaultdict(list)
    for acks in group_item_ids(ids):
        prefix = f"{acks.batch_id}:{acks.group_id}:"
        by_batch[acks.batch_id].extend(prefix + str(i) for i in acks.indexes)
    records = []
    for batch_id, batch_ids in by_batch.items():
        for start in range(0, len(batch_ids), max_ids):
            value = orjson.dumps({"batchItemIds": batch_ids[start : start + max_ids]})
            records.append(AckRecord(str(batch_id).encode(), value, partition_of_exact(batch_id, partitions)))
    return records


class AckProducer:
    """For code outside a Faust worker (jobs, scripts): a confluent-kafka producer of ack records."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, config: dict[str, Any] | None = None
    ) -> None:

        self.topic = topic
        self.partitions = partitions
        self.failed = 0  # records the broker refused for good since the last flush
        self.last_error: str | None = None
        self._producer = Producer(
            client_config(bootstrap, **{"linger.ms": 5, "enable.idempotence": True, **(config or {})})
        )

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed += 1
            self.last_error = str(err)

    def send(self, item_ids: Iterable[str]) -> int:
        """Queue the acks; returns the number of records. Call `flush()` to wait for delivery."""
        records = ack_records(item_ids, self.partitions)
        for record in records:
            crash_point("batch.acks.produce")
            produce_blocking(
                self._producer,
                self.topic,
                record.value,
                record.key,
                partition=record.partition,
                on_delivery=self._on_delivery,
            )
            self._producer.poll(0)
        return len(records)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for delivery; returns the number of records not delivered since the last flush:
        still queued after `timeout_s`, or refused by the broker (0 on success)."""
        left: int = self._producer.flush(timeout_s)
        failed, self.failed = self.failed, 0
        if failed:
            log.warning("%d ack records to %s failed: %s", failed, self.topic, self.last_error)
        return left + failed


async def send_acks(topic: Any, item_ids: Iterable[str], partitions: int) -> int:
    """For Faust agents: send ack records through a Faust topic (e.g. `app.topic("batch-acks")`)."""
    records = ack_records(item_ids, partitions)
    for record in records:
        crash_point("batch.acks.produce")
        await topic.send(key=record.key, value=record.value, partition=record.partition)
    return len(records)
