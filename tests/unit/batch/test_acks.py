from __future__ import annotations

import uuid

import orjson
import pytest

from app.batch.acks import ack_records, send_acks
from app.batch.errors import MalformedItemId
from app.batch.ids import ItemGroup, expand_item_ids
from app.crashpoints import InjectedFault, armed


def test_one_record_per_batch_chunked_and_sent_to_the_owning_partition() -> None:
    ids_a = list(expand_item_ids(9, [ItemGroup(str(uuid.uuid4()), 25)]))
    ids_b = list(expand_item_ids(6, [ItemGroup(str(uuid.uuid4()), 3)]))
    records = ack_records(ids_a + ids_b, partitions=4, max_ids=10)
    assert [(r.key, r.partition) for r in records] == [(b"9", 1)] * 3 + [(b"6", 2)]
    sent = [i for r in records for i in orjson.loads(r.value)["batchItemIds"]]
    assert sorted(sent) == sorted(ids_a + ids_b)


def test_bad_id_is_refused_before_anything_is_built() -> None:
    with pytest.raises(MalformedItemId, match="oops"):
        ack_records(["oops"], partitions=4)


class RecordingTopic:
    """A Faust topic's `send`, recording what it was given."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, int]] = []

    async def send(self, *, key: bytes, value: bytes, partition: int) -> None:
        self.sent.append((key, partition))


async def test_send_acks_cut_at_its_second_record_sends_them_all_when_called_again() -> None:
    """`batch.acks.produce` before each record: cut at the second, the first is out; the caller's
    retry sends every record (acks are idempotent: an item acked twice counts once)."""
    ids = list(expand_item_ids(9, [ItemGroup(str(uuid.uuid4()), 3)])) + list(
        expand_item_ids(6, [ItemGroup(str(uuid.uuid4()), 2)])
    )
    topic = RecordingTopic()
    with armed("batch.acks.produce", nth=2), pytest.raises(InjectedFault):
        await send_acks(topic, ids, partitions=4)
    assert topic.sent == [(b"9", 1)]
    assert await send_acks(topic, ids, partitions=4) == 2
    assert topic.sent == [(b"9", 1), (b"9", 1), (b"6", 2)]
