"""Give Faust's table recovery the true end of each changelog partition.

Faust asks aiokafka for highwaters with ListOffsets. The embedded Tansu broker answers
with the base offset of the last record batch + 1, so a worker restarting on its own
datadir finds its persisted offset "ahead" of the highwater and stops with
ConsistencyError. We replace the answer with `true_end_offsets` (fetch-based; on Apache
Kafka it equals ListOffsets). Installed once per process by `create_app`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from app.kafka.admin import true_end_offsets

__all__ = ["install_true_highwaters"]

_installed: dict[str, bool] = {}
RECOVERY_END_TIMEOUT_S = 30.0  # a busy broker; recovery cannot go on without the true ends


def install_true_highwaters(bootstrap: str) -> None:
    if _installed.get("done"):
        return

    thread_cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    listed_highwaters = thread_cls._highwaters

    async def _highwaters(self: Any, partitions: list[Any]) -> Mapping[Any, int]:
        listed = dict(await listed_highwaters(self, partitions))
        if not partitions:
            return listed
        ends = await asyncio.to_thread(
            true_end_offsets,
            bootstrap,
            [(tp.topic, tp.partition) for tp in partitions],
            RECOVERY_END_TIMEOUT_S,
        )
        return {tp: max(listed.get(tp) or 0, end) for tp, end in zip(partitions, ends, strict=True)}

    thread_cls._highwaters = _highwaters
    _installed["done"] = True
