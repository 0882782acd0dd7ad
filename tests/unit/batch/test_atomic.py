"""Torn writes: a worker killed after any changelog record of an operation, the partition restored
from that prefix by another worker, the operation retried (a redelivered ack record, a client
retrying after a lost answer). Every crash position is tried; the batch must still add up."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from app.batch.atomic import INTENT_KEY, atomically, decode_intent, encode_intent
from app.batch.estimated import EstimatedRules
from app.batch.exact import ExactRules
from app.batch.ids import expand_item_ids, group_item_ids
from app.batch.model import BatchStore
from tests.unit.batch.conftest import MemoryStore

RULES = ExactRules(group_size_items=64, max_items_per_add=10_000)
ESTIMATED = EstimatedRules()


class ChangelogStore(MemoryStore):
    """A partition whose every write is also a changelog record, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        super().put(key, value)
        self.log.append((key, bytes(value)))

    def delete(self, key: bytes) -> None:
        super().delete(key)
        self.log.append((key, None))

    def restored(self, records: int) -> ChangelogStore:
        """What a worker restoring from the first `records` changelog records holds."""
        restored = ChangelogStore()
        for key, value in self.log[:records]:
            if value is None:
                restored.delete(key)
            else:
                restored.put(key, value)
        return restored


Operation = Callable[[BatchStore], object]


def crash_positions(store: ChangelogStore, operation: Operation) -> Iterator[ChangelogStore]:
    """Run `operation` atomically, then yield the partition as restored after a kill at each of its
    changelog records (none written ... all written)."""
    before = len(store.log)
    with atomically(store) as writes:
        operation(writes)
    for written in range(before, len(store.log) + 1):
        yield store.restored(written)


def test_intent_encoding_round_trips_puts_and_deletes() -> None:
    writes: dict[bytes, bytes | None] = {b"x/1": b"{}", b"g/1/a": b"", b"g/1/b": None, b"": b"\xff" * 3}
    assert decode_intent(encode_intent(writes)) == writes


def test_an_exception_inside_the_block_writes_nothing() -> None:
    store = ChangelogStore()
    with pytest.raises(RuntimeError), atomically(store) as writes:
        writes.put(b"a", b"1")
        writes.put(b"b", b"2")
        raise RuntimeError("the rule refused")
    assert store.log == []


def _closed_batch(store: ChangelogStore, items: int) -> tuple[int, list[str]]:
    with atomically(store) as writes:
        batch = RULES.create(writes, 0, 4, None, 1)
        groups = RULES.add_items(writes, batch.batch_id, items, 2, lambda: str(uuid.uuid4()))
        RULES.close(writes, batch.batch_id, 3)
    return batch.batch_id, list(expand_item_ids(batch.batch_id, groups))


def test_an_ack_torn_anywhere_completes_the_batch_when_redelivered() -> None:
    store = ChangelogStore()
    batch_id, items = _closed_batch(store, 200)  # four groups: one ack changes five keys
    acks = group_item_ids(items)
    positions = 0
    for restored in crash_positions(store, lambda s: RULES.ack(s, acks, 4)):
        with atomically(restored) as writes:
            outcome = RULES.ack(writes, acks, 5)  # the ack record, redelivered
        batch = RULES.get(restored, batch_id)
        assert (batch.pending_items, batch.is_complete) == (0, True)
        assert [c.batch_id for c in outcome.completions] == [batch_id]
        assert restored.get(INTENT_KEY) is None
        positions += 1
    assert positions == 1 + 1 + 5 + 1  # nothing, the intent, each key, the intent removed


def test_without_the_intent_a_torn_ack_leaves_the_batch_pending_forever() -> None:
    """The break the intent fixes: header and groups written as separate records."""
    store = ChangelogStore()
    batch_id, items = _closed_batch(store, 200)
    acks = group_item_ids(items)
    before = len(store.log)
    RULES.ack(store, acks, 4)
    restored = store.restored(before + 1)  # the first group record only
    RULES.ack(restored, acks, 5)
    assert not RULES.get(restored, batch_id).is_complete


def test_add_items_torn_anywhere_and_retried_with_its_request_id_adds_up() -> None:
    store = ChangelogStore()
    with atomically(store) as writes:
        batch_id = RULES.create(writes, 1, 4, None, 1).batch_id
    request = str(uuid.uuid4())

    def add(s: BatchStore) -> object:
        return RULES.add_items(s, batch_id, 150, 2, lambda: str(uuid.uuid4()), request)

    for restored in crash_positions(store, add):
        with atomically(restored) as writes:  # the client retries: same request id
            groups = RULES.add_items(writes, batch_id, 150, 3, lambda: str(uuid.uuid4()), request)
        with atomically(restored) as writes:  # ... and once more after another lost answer
            again = RULES.add_items(writes, batch_id, 150, 3, lambda: str(uuid.uuid4()), request)
        assert again == groups
        with atomically(restored) as writes:
            RULES.close(writes, batch_id, 4)
            RULES.ack(writes, group_item_ids(expand_item_ids(batch_id, groups)), 5)
        batch = RULES.get(restored, batch_id)
        assert (batch.total_items, batch.pending_items, batch.is_complete) == (150, 0, True)


def test_incr_retried_with_its_request_id_counts_once() -> None:
    store = ChangelogStore()
    with atomically(store) as writes:
        batch_id = ESTIMATED.create(writes, 2, None, 0, lambda: str(uuid.uuid4())).batch_id
    request = str(uuid.uuid4())
    for restored in crash_positions(store, lambda s: ESTIMATED.add(s, batch_id, 3, 1, request)):
        for _ in range(2):
            with atomically(restored) as writes:
                answer, _ = ESTIMATED.add(writes, batch_id, 3, 2, request)
            assert answer.pending == 5
        with atomically(restored) as writes:
            ESTIMATED.close(writes, batch_id, 3)
            _, completion = ESTIMATED.add(writes, batch_id, -5, 4, str(uuid.uuid4()))
        assert completion is not None


def test_deleting_a_batch_removes_its_request_answers() -> None:
    store = ChangelogStore()
    batch_id, _ = _closed_batch(store, 10)
    with atomically(store) as writes:
        RULES.add_items(writes, RULES.create(writes, 0, 4, None, 1).batch_id, 5, 1, lambda: "g", "r1")
        RULES.delete(writes, RULES.get(writes, batch_id))
    assert not [k for k in store.data if k.startswith(b"q/x/%d/" % batch_id)]
    assert [k for k in store.data if k.startswith(b"q/")]  # the other batch keeps its answer
