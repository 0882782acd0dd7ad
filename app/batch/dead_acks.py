"""Dead-lettered ack records (`<acks topic>-dlq`): listed with their reasons, and replayed into the
ack topic once what kept them from applying is mended (a batch not created yet when its acks came,
a worker that was down): each record's ids are sent again to their batches' partitions.

What has been replayed is the committed offset of the consumer group `<acks topic>-dlq-replay`:
a replay sends the records from there to the end, waits until the broker confirmed every ack,
then commits past them. A crash between the two replays them again, which changes nothing (an ack
is idempotent). Ids that still cannot apply are dead-lettered again, with their reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson
from confluent_kafka import Message, TopicPartition

from app.batch.acks import AckProducer
from app.crashpoints import crash_point
from app.errors import ServiceUnavailable
from app.kafka.admin import committed_offsets
from app.kafka.broker import broker_for
from app.kafka.consuming import offset_client
from app.kafka.reading import read_from
from app.settings import Settings

__all__ = ["DeadAck", "Replayed", "dead_acks", "dead_acks_topic", "replay_dead_acks"]


@dataclass(frozen=True, slots=True)
class DeadAck:
    offset: int
    item_ids: tuple[str, ...]  # empty when the record carries no ack ids (not JSON, another shape)
    reason: str
    source: str  # where the ack record was read: `topic[partition] offset=N`
    replayed: bool


@dataclass(frozen=True, slots=True)
class Replayed:
    records: int  # dead letters replayed
    item_ids: int  # ids sent again
    skipped: int  # dead letters without ack ids (nothing to send)


def dead_acks_topic(settings: Settings) -> str:
    return f"{settings.batch_acks_topic}-dlq"


def _replay_group(settings: Settings) -> str:
    return f"{dead_acks_topic(settings)}-replay"


def _replayed_upto(settings: Settings) -> int:
    return committed_offsets(settings.bootstrap, _replay_group(settings), [(dead_acks_topic(settings), 0)])[0]


def _item_ids(value: bytes | None) -> tuple[str, ...]:
    try:
        body = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return ()
    ids = body.get("batchItemIds") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return ()
    return tuple(ids)


def _header(msg: Message, name: str) -> str:
    for key, value in msg.headers() or ():
        if key == name:
            return (value or b"").decode("utf-8", "replace")
    return ""


def _records(settings: Settings, start: int) -> Iterable[Message]:
    return read_from(broker_for(settings), {(dead_acks_topic(settings), 0): start})


def dead_acks(settings: Settings) -> list[DeadAck]:
    """Every dead-lettered ack record, oldest first, with whether a replay already sent it."""
    upto = _replayed_upto(settings)
    return [
        DeadAck(
            msg.offset(),
            _item_ids(msg.value()),
            _header(msg, "reason"),
            _header(msg, "source"),
            msg.offset() < upto,
        )
        for msg in _records(settings, 0)
    ]


def replay_dead_acks(settings: Settings) -> Replayed:
    """Send the ids of every dead letter not replayed yet to the ack topic again, then mark them
    replayed; ServiceUnavailable (nothing marked) when the broker did not confirm every ack."""
    producer = AckProducer(settings.bootstrap, settings.batch_acks_topic, settings.table_partitions)
    records = ids = skipped = 0
    last = None
    for msg in _records(settings, _replayed_upto(settings)):
        item_ids = _item_ids(msg.value())
        if item_ids:
            producer.send(item_ids)
            ids += len(item_ids)
        else:
            skipped += 1
        records += 1
        last = msg.offset()
    if last is None:
        return Replayed(0, 0, 0)
    lost = producer.flush(30)
    if lost:
        raise ServiceUnavailable(f"{lost} ack records of the replay not confirmed; nothing marked replayed")
    crash_point("batch.dead_acks.replayed")  # sent, not marked: a second replay sends them again
    client = offset_client(settings.bootstrap, _replay_group(settings))
    try:
        client.commit(offsets=[TopicPartition(dead_acks_topic(settings), 0, last + 1)], asynchronous=False)
    finally:
        client.close()
    return Replayed(records, ids, skipped)
