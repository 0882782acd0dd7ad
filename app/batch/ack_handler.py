"""What the ack agent does with one record of the ack topic.

Faust acknowledges an event when the agent raises, so nothing may escape from here: a record is
either applied, forwarded, re-queued or dead-lettered, each confirmed by the broker before this
returns, and only then may its offset be committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson

from app.batch.errors import BatchNotFound, ItemNotFound, PartitionNotReady
from app.batch.ids import group_item_ids, item_ids_of
from app.batch.service import BatchService
from app.crashpoints import crash_point
from app.errors import HubstreamError, InvalidInput

__all__ = ["AckRecord", "apply_ack_record", "handle_ack_record", "send_confirmed"]

log = logging.getLogger(__name__)

# How long a record waits for its table partition to be recovered here before it is re-queued.
READY_WAIT_S = 10.0
# A record naming an unknown batch or item group is re-queued (it may be ahead of a restore, or
# this worker may have lost the partition without knowing yet) until it was first seen this long
# ago; then it is dead-lettered. FIRST_SEEN_HEADER carries that moment across re-queues.
UNKNOWN_GRACE_S = 15.0
RETRY_UNKNOWN_S = 0.5
FIRST_SEEN_HEADER = "hs-first-seen-ms"


def _first_seen_ms(headers: Any) -> int | None:
    items = headers.items() if isinstance(headers, dict) else (headers or ())
    for name, value in items:
        if name == FIRST_SEEN_HEADER:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


async def send_confirmed(topic: Any, **record: Any) -> None:
    """Send through a Faust topic and wait until the broker confirmed the record."""
    crash_point("batch.ack_record.send")
    pending = await topic.send(**record)
    await pending


@dataclass(frozen=True, slots=True)
class AckRecord:
    """One record of the ack topic, as the agent read it."""

    partition: int
    offset: int
    key: Any
    value: Any
    headers: Any = None


async def handle_ack_record(service: BatchService, acks_topic: Any, dlq_topic: Any, record: AckRecord) -> int:
    """Apply the acks of one record; returns the number of items newly cleared.

    Acks for batches of another partition are forwarded there once; a bad record (not JSON, bad
    ids, unknown batch or item) goes to the dead-letter topic with the reason in its headers.
    """
    partition, key, value = record.partition, record.key, record.value
    where = f"{acks_topic.get_topic_name()}[{partition}] offset={record.offset}"
    try:
        body = orjson.loads(value) if isinstance(value, bytes | str) else value
        ids = body.get("batchItemIds") if isinstance(body, dict) else None
        if not isinstance(ids, list):
            raise InvalidInput('value must be {"batchItemIds": [...]}')
        cleared = 0
        for owner, acks in service.split_by_partition(group_item_ids(ids)).items():
            if owner != partition:
                ids_there = item_ids_of(acks)
                await send_confirmed(
                    acks_topic, key=key, value=orjson.dumps({"batchItemIds": ids_there}), partition=owner
                )
                log.info("%s: forwarded %d acks to partition %d", where, len(ids_there), owner)
                continue
            sorted_acks = service.sort_acks(partition, acks)
            if sorted_acks.refused:  # never applicable: dead-lettered at once, the rest applied
                await _dead_letter_ids(dlq_topic, key, sorted_acks.refused, where)
            if sorted_acks.valid:
                outcome = service.ack(partition, sorted_acks.valid)
                cleared += outcome.items_cleared
                await service.publish(outcome.completions)
            if sorted_acks.unknown:
                unknown = orjson.dumps({"batchItemIds": item_ids_of(sorted_acks.unknown)})
                why = BatchNotFound(f"batches not created in partition {partition}")
                await _requeue_unknown(acks_topic, dlq_topic, key, unknown, record, where, why)
        return cleared
    except (BatchNotFound, ItemNotFound) as exc:
        await _requeue_unknown(acks_topic, dlq_topic, key, value, record, where, exc)
        return 0
    except PartitionNotReady:
        # Not this record's fault. While this worker recovers its partitions, wait for them;
        # otherwise the partition is not (or no longer) assigned here: re-queue the record to it
        # (acks are idempotent) at once, so that a rebalance is never held up waiting for us.
        if service.recovering() and await service.wait_ready(partition, READY_WAIT_S):
            return await handle_ack_record(service, acks_topic, dlq_topic, record)
        await send_confirmed(acks_topic, key=key, value=value, partition=partition)
        log.warning("%s: batch table partition %d not served here; record re-queued", where, partition)
        return 0
    except Exception as exc:
        return await _dead_letter(dlq_topic, key, value, where, exc)


async def _dead_letter_ids(dlq_topic: Any, key: Any, refused: Any, where: str) -> None:
    """One dead letter for the ids that can never apply, each id's reason in `reasons`."""
    ids = item_ids_of(ack for ack, _ in refused)
    reasons = {f"{a.batch_id}:{a.group_id}": why for a, why in refused}
    log.warning("%s: %d acked items dead-lettered: %s", where, len(ids), "; ".join(reasons.values())[:500])
    headers = {
        "reason": f"{len(ids)} items can never be acked: {'; '.join(reasons.values())}".encode()[:4000],
        "reasons": orjson.dumps(reasons)[:16000],
        "source": where.encode(),
    }
    await send_confirmed(dlq_topic, key=key, value=orjson.dumps({"batchItemIds": ids}), headers=headers)


async def _requeue_unknown(
    acks_topic: Any, dlq_topic: Any, key: Any, value: Any, record: AckRecord, where: str, why: Exception
) -> None:
    """Ids of batches this partition never created (a worker still holding a partition it lost
    may not know them yet): re-queued until first seen UNKNOWN_GRACE_S ago, then dead-lettered.
    Acks of batches that are gone never come here (`ExactRules.sort`)."""
    now_ms = int(time.time() * 1000)
    first_seen_ms = _first_seen_ms(record.headers) or now_ms
    if now_ms - first_seen_ms >= UNKNOWN_GRACE_S * 1000:
        await _dead_letter(dlq_topic, key, value, where, why)
        return
    await asyncio.sleep(RETRY_UNKNOWN_S)
    await send_confirmed(
        acks_topic,
        key=key,
        value=value,
        partition=record.partition,
        headers={FIRST_SEEN_HEADER: str(first_seen_ms).encode()},
    )
    log.info("%s: %s; record re-queued", where, why)


async def _dead_letter(dlq_topic: Any, key: Any, value: Any, where: str, exc: Exception) -> int:
    reason = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, HubstreamError | orjson.JSONDecodeError):
        log.warning("%s: ack record dead-lettered: %s", where, reason)
    else:  # a bug, not bad data: keep the agent alive, keep the record, say so loudly
        log.error("%s: ack record dead-lettered after an unexpected error", where, exc_info=exc)
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    headers = {"reason": reason.encode()[:4000], "source": where.encode()}
    await send_confirmed(dlq_topic, key=key, value=raw, headers=headers)
    return 0


async def apply_ack_record(service: BatchService, acks_topic: Any, dlq_topic: Any, record: AckRecord) -> int:
    """`handle_ack_record`, tried again (backoff up to 30 s) until it went through: an error out of
    the agent would let Faust acknowledge the record, and with it the rest of its batch."""
    delay_s = 0.2
    while True:
        try:
            return await handle_ack_record(service, acks_topic, dlq_topic, record)
        except Exception:
            log.exception(
                "%s[%d] offset=%d: ack record not handled; trying again in %.1f s",
                acks_topic.get_topic_name(),
                record.partition,
                record.offset,
                delay_s,
            )
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 30.0)
