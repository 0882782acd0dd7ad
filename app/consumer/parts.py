"""What the parts of a running copy (`KeyedConsumer`, app.consumer.kafka, and the classes it
inherits: its poll thread, owned partitions, intake, lane workers, periodic work, composite
following, heartbeats and answers about keys) share: the names of its records and lanes, and the
one hand-off from its threads to its event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import Message as KafkaMessage

if TYPE_CHECKING:
    from app.ordered.work import Work

__all__ = ["TP", "Commit", "Item", "Lane", "OnLoop"]

TP = tuple[str, int]
Commit = tuple[int, str]  # offset, metadata (the finished offsets above it)
Lane = tuple[int, str]  # (lane partition, ordering key)
# A record in its lane: (the record, its topic partition, its lane, its storage index). The record
# is a Work, or the fetched message itself (a main record keyed by its record key): its Work is
# built only when the engine needs one (its key has state, or the handler failed).
Item = tuple["Work | KafkaMessage", TP, Lane, int]


class OnLoop:
    """A copy's threads (the poll thread, the readers of members and requests) reach its state
    only through calls handed to its event loop."""

    _loop: asyncio.AbstractEventLoop | None = None

    def _call_in_loop(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(fn, *args)
