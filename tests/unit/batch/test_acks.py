from __future__ import annotations

import uuid

import orjson
import pytest

from app.batch.acks import ack_records
from app.batch.errors import MalformedItemId
from app.batch.ids import ItemGroup, expand_item_ids


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
