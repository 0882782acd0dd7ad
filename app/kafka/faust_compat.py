"""Give Faust's table recovery the true start and end of each changelog partition.

Faust asks aiokafka for both with ListOffsets, and the embedded Tansu broker answers neither
right. Its end is the base offset of the last record batch + 1, so a worker restarting on its own
datadir finds its persisted offset "ahead" of the highwater and stops with ConsistencyError. Its
start is the batch *written* first, which producers on separate connections can make a later one
(app.kafka.sequence): recovery would begin past changelog records the log holds, and the table
would miss them. We replace both answers with `true_end_offsets` and `true_start_offsets` (read
from a fetch; on Apache Kafka they equal ListOffsets). Installed once per process by `create_app`.

And seek an agent's partition back without racing Faust's consumer thread
(`seek_on_consumer_thread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from app.kafka.admin import true_end_offsets, true_start_offsets

__all__ = ["install_true_offsets", "seek_on_consumer_thread"]

_installed: dict[str, bool] = {}
RECOVERY_OFFSETS_TIMEOUT_S = 30.0  # a busy broker; recovery cannot go on without the true offsets


def install_true_offsets(bootstrap: str) -> None:
    if _installed.get("done"):
        return

    thread_cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    listed_highwaters = thread_cls._highwaters

    def places(partitions: Any) -> list[tuple[str, int]]:
        return [(tp.topic, tp.partition) for tp in partitions]

    async def _highwaters(self: Any, partitions: list[Any]) -> Mapping[Any, int]:
        listed = dict(await listed_highwaters(self, partitions))
        if not partitions:
            return listed
        ends = await asyncio.to_thread(
            true_end_offsets, bootstrap, places(partitions), RECOVERY_OFFSETS_TIMEOUT_S
        )
        return {tp: max(listed.get(tp) or 0, end) for tp, end in zip(partitions, ends, strict=True)}

    async def earliest_offsets(self: Any, *partitions: Any) -> Mapping[Any, int]:
        if not partitions:
            return {}
        starts = await asyncio.to_thread(
            true_start_offsets, bootstrap, places(partitions), RECOVERY_OFFSETS_TIMEOUT_S
        )
        return dict(zip(partitions, starts, strict=True))

    thread_cls._highwaters = _highwaters
    thread_cls.earliest_offsets = earliest_offsets
    _installed["done"] = True


async def seek_on_consumer_thread(consumer: Any, tp: Any, offset: int) -> bool:
    """Seek an assigned partition back, on the thread that runs the Kafka consumer.

    Faust's `Consumer.seek` calls aiokafka's `seek` from the caller's thread while the consumer
    thread may be handing out fetched records; the two raced in aiokafka's fetcher (KeyError in
    `fetched_records`) and the worker crashed. `seek_wait` runs the seek on the consumer's thread
    and waits for the new position. False when the partition is not assigned here."""
    if tp not in consumer.assignment():
        return False
    await consumer.seek_wait({tp: offset})
    return True
