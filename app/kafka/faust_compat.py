"""Give Faust's table recovery other start and end offsets of each changelog partition.

Faust asks aiokafka for both with ListOffsets, and the embedded Tansu broker answers neither
right. Its end is the base offset of the last record batch + 1, so a worker restarting on its own
datadir finds its persisted offset "ahead" of the highwater and stops with ConsistencyError. Its
start is the batch *written* first, which producers on separate connections can make a later one
(app.kafka.sequence): recovery would begin past changelog records the log holds, and the table
would miss them. The embedded broker's adapter (app.kafka.embedded) replaces both answers with its
true offsets through `install_recovery_offsets`, once per process (`create_app` asks the broker
port, app.kafka.broker); on Apache Kafka nothing is replaced.

And seek an agent's partition back without racing Faust's consumer thread
(`seek_on_consumer_thread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

__all__ = ["OffsetsOf", "install_recovery_offsets", "seek_on_consumer_thread"]

OffsetsOf = Callable[[list[tuple[str, int]], float], list[int]]  # (partitions, timeout_s)

_installed: dict[str, bool] = {}
RECOVERY_OFFSETS_TIMEOUT_S = 30.0  # a busy broker; recovery cannot go on without the true offsets


def install_recovery_offsets(end_offsets: OffsetsOf, start_offsets: OffsetsOf) -> None:
    """Faust's highwaters become `end_offsets` (where above the listed ones) and its earliest
    offsets `start_offsets`; the first call of a process installs them, later ones do nothing."""
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
        ends = await asyncio.to_thread(end_offsets, places(partitions), RECOVERY_OFFSETS_TIMEOUT_S)
        return {tp: max(listed.get(tp) or 0, end) for tp, end in zip(partitions, ends, strict=True)}

    async def earliest_offsets(self: Any, *partitions: Any) -> Mapping[Any, int]:
        if not partitions:
            return {}
        starts = await asyncio.to_thread(start_offsets, places(partitions), RECOVERY_OFFSETS_TIMEOUT_S)
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
