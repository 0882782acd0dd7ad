"""Split offsets, file identities and batch item ids (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.batch.ids import ItemGroup, expand_item_ids
from spark_ingest.plan import ItemAssignment, file_identity, item_id_at, item_ids_from, split_offsets

groups = st.lists(st.tuples(st.uuids().map(str), st.integers(1, 70)), min_size=1, max_size=8)


@given(groups, st.data())
def test_item_ids_match_the_batch_api_expansion(
    group_list: list[tuple[str, int]], data: st.DataObject
) -> None:
    assignment = ItemAssignment("42", tuple(group_list))
    expected = list(expand_item_ids(42, [ItemGroup(g, upto) for g, upto in group_list]))
    start = data.draw(st.integers(0, assignment.items - 1))
    ids = item_ids_from(assignment, start)
    assert [next(ids) for _ in range(assignment.items - start)] == expected[start:]
    assert item_id_at(assignment, start) == expected[start]
    with pytest.raises(IndexError):
        next(ids)


def test_item_ordinal_out_of_range() -> None:
    assignment = ItemAssignment("7", (("g", 2),))
    with pytest.raises(IndexError):
        item_id_at(assignment, 2)
    with pytest.raises(IndexError):
        item_id_at(assignment, -1)


@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["file:/a", "file:/b", "file:/c"]), st.integers(0, 10**6)),
        st.integers(0, 1000),
        min_size=1,
    )
)
def test_split_offsets_are_prefix_sums_in_file_order(counts: dict[tuple[str, int], int]) -> None:
    per_file = split_offsets(counts, per_file=True)
    overall = split_offsets(counts, per_file=False)
    for key in counts:
        earlier_same_file = [k for k in counts if k[0] == key[0] and k[1] < key[1]]
        assert per_file[key] == sum(counts[k] for k in earlier_same_file)
        assert overall[key] == sum(counts[k] for k in counts if k < key)


def test_file_identity_is_relative_to_the_input_root() -> None:
    assert file_identity("file:/data/in/day=1/part-0.parquet", "/data/in") == "day=1/part-0.parquet"
    assert file_identity("file:///data/in/part-0.parquet", "/data/in/") == "part-0.parquet"
    assert file_identity("file:/data/in.parquet", "/data/in.parquet") == "in.parquet"
    assert file_identity("hdfs://nn/x/part-1.csv", "/elsewhere") == "part-1.csv"
