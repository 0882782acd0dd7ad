"""What the ack agent does with one record of the ack topic."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from app.batch.errors import PartitionNotReady
from app.batch.ids import group_item_ids
from app.batch.service import BatchService
from app.errors import HubstreamError, InvalidInput

__all__ = ["handle_ack_record"]

log = logging.getLogger(__name__)


async def handle_ack_record(
    service: BatchService, acks_topic: Any, dlq_topic: Any, partition: int, offset: int, key: Any, value: Any
) -> int:
    """Apply the acks of one record; returns the number of items newly cleared.

    Acks for batches of another partition are forwarded there once; a bad record (not JSON, bad
    ids, unknown batch or item) goes to the dead-letter topic with the reason in its headers.
    """
    where = f"{acks_topic.get_topic_name()}[{partition}] offset={offset}"
    try:
        body = orjson.loads(value) if isinstance(value, bytes | str) else value
        ids = body.get("batchItemIds") if isinstance(body, dict) else None
        if not isinstance(ids, list):
            raise InvalidInput('value must be {"batchItemIds": [...]}')
        cleared = 0
        for owner, acks in service.split_by_partition(group_item_ids(ids)).items():
            if owner != partition:
                ids_there = [f"{a.batch_id}:{a.group_id}:{i}" for a in acks for i in a.indexes]
                await acks_topic.send(
                    key=key, value=orjson.dumps({"batchItemIds": ids_there}), partition=owner
                )
                log.info("%s: forwarded %d acks to partition %d", where, len(ids_there), owner)
                continue
            outcome = service.ack(partition, acks)
            cleared += outcome.items_cleared
            await service.publish(outcome.completions)
        return cleared
    except PartitionNotReady:
        raise  # not this record's fault: let the worker retry it after the rebalance
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, HubstreamError | orjson.JSONDecodeError):
            log.warning("%s: ack record dead-lettered: %s", where, reason)
        else:  # a bug, not bad data: keep the agent alive, keep the record, say so loudly
            log.exception("%s: ack record dead-lettered after an unexpected error", where)
        raw = value if isinstance(value, bytes) else orjson.dumps(value)
        await dlq_topic.send(
            key=key, value=raw, headers={"reason": reason.encode()[:4000], "source": where.encode()}
        )
        return 0
