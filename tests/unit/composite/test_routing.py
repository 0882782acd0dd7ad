"""Shard-consistent routing: the seed's Router formula, the stable hash and shard assignment."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from app.composite import group_hash, route, shard_of_partition, shard_partitions
from app.composite.model import StorageTopic, next_k

group_ids = st.text(min_size=1, max_size=64)
hashes = st.integers(min_value=0, max_value=2**64 - 1)


@given(hashes, st.integers(min_value=1, max_value=600), st.integers(min_value=1, max_value=12))
def test_route_is_the_seed_formula_and_stays_in_range(h: int, partitions: int, k: int) -> None:
    p = route(h, partitions, k)
    assert p == k * h % partitions + (h // partitions) % k
    if partitions % k == 0:  # K divides P whenever K comes from the K rule
        assert 0 <= p < partitions


@given(group_ids)
def test_group_hash_is_a_non_negative_64_bit_integer(group_id: str) -> None:
    h = group_hash(group_id)
    assert 0 <= h < 2**64
    assert h == group_hash(group_id)


def test_group_hash_is_identical_in_another_process() -> None:
    ids = [f"recipient-{i}" for i in range(200)] + ["ø", "漢字", "a" * 256]
    code = "import sys; from app.composite import group_hash; print(*[group_hash(x) for x in sys.argv[1:]])"
    out = subprocess.run(
        [sys.executable, "-c", code, *ids],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout.split()
    assert [int(x) for x in out] == [group_hash(x) for x in ids]


def _chain(first: int, *later: int) -> list[StorageTopic]:
    chain = [StorageTopic("t.0", first, 1)]
    for index, partitions in enumerate(later, 1):
        chain.append(StorageTopic(f"t.{index}", partitions, next_k(chain[-1], partitions)))
    return chain


@given(hashes, st.sampled_from([1, 2]))
def test_shard_is_the_same_in_every_storage_topic_when_k_scales(h: int, shard_count: int) -> None:
    """The issue's example: 2 -> 10 partitions gives K = 5, and a group keeps its shard."""
    chain = _chain(2, 10, 20)
    assert [t.k for t in chain] == [1, 5, 10]
    shards = {shard_of_partition(t.route(h), shard_count, t.partitions) for t in chain}
    assert len(shards) == 1


@given(hashes, st.sampled_from([(4, (8, 24)), (6, (12, 36)), (3, (6, 12, 24))]), st.data())
def test_shard_consistency_over_chains_of_multiples(
    h: int, chain_spec: tuple[int, tuple[int, ...]], data: st.DataObject
) -> None:
    first, later = chain_spec
    shard_count = data.draw(st.sampled_from([s for s in range(1, first + 1) if first % s == 0]))
    chain = _chain(first, *later)
    assert all(t.k > 1 for t in chain[1:])
    assert len({shard_of_partition(t.route(h), shard_count, t.partitions) for t in chain}) == 1


def test_with_k_equal_one_a_group_can_change_shard() -> None:
    """4 -> 6 partitions: 6 is no multiple of 4, so K = 1 and shard consistency is lost."""
    chain = _chain(4, 6)
    assert chain[1].k == 1
    moved = [
        gid
        for gid in (f"g{i}" for i in range(1000))
        if shard_of_partition(chain[0].route(group_hash(gid)), 2, 4)
        != shard_of_partition(chain[1].route(group_hash(gid)), 2, 6)
    ]
    assert moved, "with K = 1 some groups must land in another shard"


@given(st.integers(min_value=1, max_value=96), st.data())
def test_shard_ranges_partition_the_topic(partitions: int, data: st.DataObject) -> None:
    shard_count = data.draw(st.integers(min_value=1, max_value=partitions))
    owned = [p for sid in range(shard_count) for p in shard_partitions(sid, shard_count, partitions)]
    assert owned == list(range(partitions))
    for sid in range(shard_count):
        for p in shard_partitions(sid, shard_count, partitions):
            assert shard_of_partition(p, shard_count, partitions) == sid


@given(group_ids, st.sampled_from([1, 2, 3, 4, 6, 8, 12, 24]))
def test_route_spreads_within_partition_count(group_id: str, partitions: int) -> None:
    assert 0 <= route(group_hash(group_id), partitions, 1) < partitions
