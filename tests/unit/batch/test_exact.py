from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.batch.errors import BatchClosed, BatchNotFound, ItemNotFound
from app.batch.exact import ExactRules
from app.batch.ids import expand_item_ids, group_item_ids
from app.errors import InvalidInput
from tests.unit.batch.conftest import MemoryStore

RULES = ExactRules(group_size_items=64, max_items_per_add=100_000)


def new_id() -> str:
    return str(uuid.uuid4())


def open_batch(store: MemoryStore, items: int, user_key: str | None = None) -> tuple[int, list[str]]:
    batch = RULES.create(store, partition=3, partitions=8, user_key=user_key, now_ms=1)
    groups = RULES.add_items(store, batch.batch_id, items, now_ms=2, new_group_id=new_id)
    assert sum(g.upto for g in groups) == items
    assert all(g.upto <= RULES.group_size_items for g in groups)
    return batch.batch_id, list(expand_item_ids(batch.batch_id, groups))


def test_ids_are_unique_and_name_their_partition(store: MemoryStore) -> None:
    ids = [RULES.create(store, p, 8, None, 0).batch_id for p in (0, 3, 3, 7, 0)]
    assert len(set(ids)) == len(ids)
    assert [i % 8 for i in ids] == [0, 3, 3, 7, 0]


def test_ack_before_close_completes_at_close(store: MemoryStore) -> None:
    batch_id, items = open_batch(store, 1000)
    outcome = RULES.ack(store, group_item_ids(items), now_ms=3)
    assert outcome.items_cleared == 1000 and outcome.completions == ()
    assert not RULES.get(store, batch_id).is_complete
    closed, completion = RULES.close(store, batch_id, now_ms=4)
    assert closed.is_complete and completion is not None and completion.batch_id == batch_id
    # Until the broker confirmed the event, closing again sends it again (at least once) ...
    assert RULES.close(store, batch_id, now_ms=5)[1] is not None
    RULES.confirm_completion(store, batch_id)
    assert RULES.close(store, batch_id, now_ms=6)[1] is None  # ... and then never again


def test_close_before_ack_completes_on_last_ack(store: MemoryStore) -> None:
    batch_id, items = open_batch(store, 130, user_key="foo")
    closed, completion = RULES.close(store, batch_id, now_ms=3)
    assert not closed.is_complete and completion is None
    assert RULES.ack(store, group_item_ids(items[:1]), 4).completions == ()
    outcome = RULES.ack(store, group_item_ids(items), 5)  # the first item again, then all the rest
    assert outcome.items_cleared == 129
    assert [(c.batch_id, c.user_key) for c in outcome.completions] == [(batch_id, "foo")]
    # A redelivered last ack (nothing left to clear) sends the completion again while unconfirmed,
    again = RULES.ack(store, group_item_ids(items[-1:]), 6)
    assert again.items_cleared == 0 and [c.batch_id for c in again.completions] == [batch_id]
    RULES.confirm_completion(store, batch_id)
    assert RULES.ack(store, group_item_ids(items), 7).completions == ()  # never once confirmed


def test_closed_batch_refuses_items_and_unknowns_are_404(store: MemoryStore) -> None:
    batch_id, items = open_batch(store, 10)
    RULES.close(store, batch_id, 3)
    with pytest.raises(BatchClosed):
        RULES.add_items(store, batch_id, 5, 4, new_id)
    with pytest.raises(BatchNotFound):
        RULES.get(store, batch_id + 8)
    bad_index = items[0].rsplit(":", 1)[0] + ":10"
    with pytest.raises(ItemNotFound):
        RULES.ack(store, group_item_ids([items[1], bad_index]), 5)
    assert RULES.get(store, batch_id).pending_items == 10  # the valid id of the failed call was not applied
    with pytest.raises(ItemNotFound):
        RULES.ack(store, group_item_ids([f"{batch_id}:{uuid.uuid4()}:0"]), 5)
    with pytest.raises(InvalidInput):
        RULES.add_items(store, batch_id, 0, 4, new_id)


def test_empty_closed_batch_is_complete(store: MemoryStore) -> None:
    batch = RULES.create(store, 0, 8, None, 0)
    assert RULES.close(store, batch.batch_id, 1)[0].is_complete


def test_expire_removes_only_the_matching_state_and_age(store: MemoryStore) -> None:
    open_id, _ = open_batch(store, 100)
    closed_id, _ = open_batch(store, 70)
    RULES.close(store, closed_id, now_ms=50)
    removal = RULES.expire(store, closed=False, not_updated_since_ms=10)
    assert (removal.batches_removed, removal.items_removed) == (1, 100)
    with pytest.raises(BatchNotFound):
        RULES.get(store, open_id)
    assert not any(k.startswith(b"g/%d/" % open_id) for k in store.data)
    assert RULES.expire(store, closed=True, not_updated_since_ms=49).batches_removed == 0
    assert RULES.expire(store, closed=True, not_updated_since_ms=50).items_removed == 70


@settings(max_examples=60)
@given(st.integers(1, 300), st.lists(st.lists(st.integers(0, 299), max_size=50), max_size=8), st.data())
def test_pending_matches_a_python_set(items: int, rounds: list[list[int]], data: st.DataObject) -> None:
    store = MemoryStore()
    batch_id, ids = open_batch(store, items)
    close_at = data.draw(st.integers(0, len(rounds)))
    pending = set(range(items))
    completions = 0
    for n, picks in enumerate([*rounds, []]):
        if n == close_at and RULES.close(store, batch_id, n)[1] is not None:
            completions += 1
            RULES.confirm_completion(store, batch_id)  # as BatchService.publish does once sent
        chosen = [i for i in picks if i < items]
        done = RULES.ack(store, group_item_ids([ids[i] for i in chosen]), n).completions
        completions += len(done)
        if done:
            RULES.confirm_completion(store, batch_id)
        pending -= set(chosen)
        batch = RULES.get(store, batch_id)
        assert batch.pending_items == len(pending)
        assert batch.is_complete == (n >= close_at and not pending)
    assert completions == (1 if not pending else 0)
