"""ExactRules.sort: which acks apply, which can never apply (their batch existed and is gone, or
it has no such item) and which name a batch this partition never created."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from app.batch.exact import ExactRules
from app.batch.ids import GroupAcks
from tests.unit.batch.conftest import MemoryStore

RULES = ExactRules(group_size_items=4, max_items_per_add=100)
PARTITIONS = 4


def made(store: MemoryStore, partition: int, items: int) -> tuple[int, str]:
    batch = RULES.create(store, partition, PARTITIONS, None, 0)
    [group] = RULES.add_items(store, batch.batch_id, items, 0, lambda: str(uuid.uuid4()))
    return batch.batch_id, group.id


def test_acks_are_sorted_by_what_can_apply(store: MemoryStore) -> None:
    live, live_group = made(store, 1, 3)
    gone, gone_group = made(store, 1, 1)
    RULES.delete(store, RULES.get(store, gone))
    future = 9 * PARTITIONS + 1  # a sequence the partition never handed out
    acks = [
        GroupAcks(live, live_group, (0, 2)),
        GroupAcks(gone, gone_group, (0,)),
        GroupAcks(live, str(uuid.uuid4()), (0,)),
        GroupAcks(live, live_group, (1, 3, 7)),  # the group has 3 items
        GroupAcks(future, gone_group, (0,)),
    ]
    writes = store.writes
    out = RULES.sort(store, 1, PARTITIONS, acks)
    assert store.writes == writes, "sorting writes nothing"
    assert out.valid == (GroupAcks(live, live_group, (0, 2)), GroupAcks(live, live_group, (1,)))
    assert [(a, "no longer exists" in why) for a, why in out.refused] == [
        (GroupAcks(gone, gone_group, (0,)), True),
        (acks[2], False),
        (GroupAcks(live, live_group, (3, 7)), False),
    ]
    assert out.unknown == (GroupAcks(future, gone_group, (0,)),)
    RULES.ack(store, out.valid, 1)  # what sorts as valid applies


@given(
    st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 5)), max_size=12),
)
def test_every_id_lands_in_exactly_one_place(
    batches: list[tuple[int, bool]], acked: list[tuple[int, int]]
) -> None:
    """Each acked index comes out once: applied, refused or unknown; a valid ack never raises."""
    store = MemoryStore()
    made_ids = []
    for items, deleted in batches:
        batch_id, group = made(store, 2, max(1, min(items, 4)))
        if deleted:
            RULES.delete(store, RULES.get(store, batch_id))
        made_ids.append((batch_id, group))
    acks = []
    for which, index in acked:
        batch_id, group = made_ids[which] if which < len(made_ids) else (which * 100 * PARTITIONS + 2, "x")
        acks.append(GroupAcks(batch_id, group, (index,)))
    out = RULES.sort(store, 2, PARTITIONS, acks)
    placed = [*out.valid, *(a for a, _ in out.refused), *out.unknown]
    assert sorted((a.batch_id, a.group_id, i) for a in placed for i in a.indexes) == sorted(
        (a.batch_id, a.group_id, i) for a in acks for i in a.indexes
    )
    RULES.ack(store, out.valid, 1)
    known = {b for b, _ in made_ids}
    assert all(a.batch_id not in known for a in out.unknown)
