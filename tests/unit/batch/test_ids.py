from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.batch.errors import MalformedItemId
from app.batch.ids import ItemGroup, expand_item_ids, group_item_ids, partition_of_exact


def test_expand_then_group_round_trips() -> None:
    groups = [ItemGroup(str(uuid.uuid4()), 3), ItemGroup(str(uuid.uuid4()), 2)]
    ids = list(expand_item_ids(17, groups))
    assert ids[0] == f"17:{groups[0].id}:0" and len(ids) == 5
    parsed = {(g.batch_id, g.group_id): g.indexes for g in group_item_ids(ids)}
    assert parsed == {(17, groups[0].id): (0, 1, 2), (17, groups[1].id): (0, 1)}


def test_upper_case_uuid_is_the_same_group() -> None:
    gid = str(uuid.uuid4())
    parsed = group_item_ids([f"5:{gid}:0", f"5:{gid.upper()}:1"])
    assert len(parsed) == 1 and parsed[0].indexes == (0, 1)


@pytest.mark.parametrize(
    "bad", ["", "1:2", "x:%s:0", "1:not-a-uuid:0", "1:%s:-1", "1:%s:a", "1:%s:0:9", "-1:%s:0", 7, None]
)
def test_malformed_item_id_is_named(bad: object) -> None:
    value = bad % str(uuid.uuid4()) if isinstance(bad, str) and "%s" in bad else bad
    with pytest.raises(MalformedItemId) as err:
        group_item_ids([f"1:{uuid.uuid4()}:0", value])
    assert repr(value) in str(err.value)


@given(st.integers(0, 2**40), st.integers(1, 64))
def test_exact_partition_is_the_id_modulo_partitions(seq: int, partitions: int) -> None:
    partition = seq % partitions
    assert partition_of_exact(seq * partitions + partition, partitions) == partition
