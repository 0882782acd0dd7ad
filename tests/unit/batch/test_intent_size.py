"""An operation's writes go to the changelog as one intent record, which Faust's producer and the
broker refuse above about 1 MB. Before, an add of 8,000,000 items (allowed by the settings) made a
1.1 MB intent: the write failed after the add was answered, and Faust stopped the worker. Now the
largest add the settings allow fits, a setting that allows more is refused at start, and an
operation that would not fit anyway is refused before anything is written."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.batch.atomic import MAX_INTENT_BYTES, atomically, encode_intent
from app.batch.errors import OperationTooLarge
from app.batch.exact import ExactRules
from app.batch.ids import GroupAcks
from app.batch.model import sequence_key
from app.batch.service import BatchService, now_ms
from app.crashpoints import InjectedFault, armed
from app.errors import ConfigError
from app.settings import Settings
from tests.unit.batch.conftest import MemoryStore

PARTITIONS = 8


def batch_with_a_long_id(rules: ExactRules, store: MemoryStore) -> int:
    store.put(sequence_key(0), b"%d" % 10**18)  # a 20-digit batch id: the longest keys
    return rules.create(store, 0, PARTITIONS, "user", 1).batch_id


@pytest.mark.parametrize("group_size", [8, 64, 4096, 1_048_576])
def test_the_largest_add_fits_in_one_intent_record(group_size: int) -> None:
    rules = ExactRules(group_size, 10**9)
    items = rules.largest_add(MAX_INTENT_BYTES)
    store = MemoryStore()
    batch_id = batch_with_a_long_id(rules, store)
    with atomically(store) as writes:
        rules.add_items(writes, batch_id, items, 2, lambda: str(uuid.uuid4()), "request-" + "r" * 28)
        intent = encode_intent(writes.writes)  # type: ignore[attr-defined]
    assert 0.5 * MAX_INTENT_BYTES < len(intent) <= MAX_INTENT_BYTES, len(intent)


def test_an_operation_too_large_for_one_record_writes_nothing() -> None:
    rules = ExactRules(4096, 10**9)
    store = MemoryStore()
    batch_id = batch_with_a_long_id(rules, store)
    before = dict(store.data)
    with pytest.raises(OperationTooLarge, match="nothing was written"), atomically(store) as writes:
        rules.add_items(
            writes, batch_id, 2 * rules.largest_add(MAX_INTENT_BYTES), 2, lambda: str(uuid.uuid4())
        )
    assert store.data == before


def test_a_worker_allowing_adds_too_large_for_one_record_does_not_start() -> None:
    settings = Settings().model_copy(update={"batch_max_items_per_add": 10_000_000})
    with pytest.raises(ConfigError, match=r"BATCH_MAX_ITEMS_PER_ADD=10000000 .* at most 5476352"):
        BatchService(None, None, settings)  # type: ignore[arg-type]
    assert BatchService(None, None, Settings()).exact.max_items_per_add == 5_000_000  # type: ignore[arg-type]


class RecordLimitedStore(MemoryStore):
    """A partition whose changelog refuses a record over 1,000,000 bytes, as Faust's producer does."""

    def put(self, key: bytes, value: bytes) -> None:
        if len(key) + len(value) > 1_000_000:
            raise AssertionError(f"a {len(value)}-byte changelog record would be refused")
        super().put(key, value)


class Table:
    def __init__(self) -> None:
        self.store = RecordLimitedStore()

    def partition_store(self, partition: int, in_flight: object) -> RecordLimitedStore:
        return self.store


class App:
    in_recovery = False
    rebalancing = False


def serving_service() -> tuple[BatchService, Table]:
    table = Table()
    service = BatchService(App(), table, Settings())  # type: ignore[arg-type]
    service.mark_ready(range(PARTITIONS))
    return service, table


def test_an_ack_of_one_item_in_each_of_many_groups_is_applied_in_parts_that_fit() -> None:
    service, _ = serving_service()
    batch = service.create_exact(0, None)
    groups = [g for _ in range(3) for g in service.add_items(batch.batch_id, service.exact.max_items_per_add)]
    assert len(groups) > 2 * service.exact.groups_per_operation(MAX_INTENT_BYTES)  # one op would not fit
    acks = [GroupAcks(batch.batch_id, g.id, (0,)) for g in groups]
    outcome = service.ack(service.exact_partition(batch.batch_id), acks)
    assert outcome.items_cleared == len(groups)
    got = service.get_exact(batch.batch_id)
    assert got.pending_items == got.total_items - len(groups)
    again = service.ack(service.exact_partition(batch.batch_id), acks)  # redelivered: counted once
    assert again.items_cleared == 0 and service.get_exact(batch.batch_id).pending_items == got.pending_items


def test_a_last_ack_spread_over_parts_reports_its_completion_once() -> None:
    service, _ = serving_service()
    batch = service.create_exact(0, "k")
    groups = [g for _ in range(3) for g in service.add_items(batch.batch_id, service.exact.max_items_per_add)]
    service.close_exact(batch.batch_id)
    acks = [GroupAcks(batch.batch_id, g.id, tuple(range(g.upto))) for g in groups]
    outcome = service.ack(service.exact_partition(batch.batch_id), acks)
    assert [c.batch_id for c in outcome.completions] == [batch.batch_id]
    assert service.get_exact(batch.batch_id).pending_items == 0


def test_the_reaper_removes_more_than_one_record_holds() -> None:
    service, table = serving_service()
    batch = service.create_exact(0, None)
    adds = 20  # 24,420 item groups: their deletions would be ~1.2 MB as one intent
    for _ in range(adds):
        service.add_items(batch.batch_id, service.exact.max_items_per_add)
    removal = service.expire_exact(closed=False, not_updated_since_ms=now_ms() + 1)
    assert (removal.batches_removed, removal.items_removed) == (1, adds * service.exact.max_items_per_add)
    assert table.store.data.keys() <= {sequence_key(p) for p in range(PARTITIONS)}  # nothing else left


@given(
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from("abcdef")), max_size=40),
    st.integers(1, 5),
    st.dictionaries(st.integers(1, 4), st.integers(50, 3000)),
)
def test_ack_parts_keep_every_ack_in_order_and_each_part_fits(
    groups: list[tuple[int, str]], budget_groups: int, header_bytes: dict[int, int]
) -> None:
    rules = ExactRules(64, 1000)
    per_group = rules.GROUP_OVERHEAD_BYTES + 8
    max_bytes = rules.HEADER_BYTES + budget_groups * (per_group + rules.BATCH_KEY_BYTES + 3000)
    acks = [GroupAcks(batch_id, group, (i,)) for i, (batch_id, group) in enumerate(groups)]
    parts = rules.ack_parts(acks, max_bytes, header_bytes)
    assert [a for part in parts for a in part] == acks
    for part in parts:
        touched = {(a.batch_id, a.group_id) for a in part}
        headers = sum(
            rules.BATCH_KEY_BYTES + header_bytes.get(b, rules.HEADER_BYTES)
            for b in {a.batch_id for a in part}
        )
        assert len(touched) * per_group + headers <= max_bytes - rules.HEADER_BYTES
    assert all(parts) or acks == []


def test_an_ack_spread_over_many_batches_is_applied_in_parts_that_fit() -> None:
    """One item of each of 1,340 batches with 48-character user keys: the parts were cut by item
    groups alone (1,337 a part), and the first part's 1,337 batch headers did not fit beside the
    groups: OperationTooLarge after nothing of it was written."""
    service, _ = serving_service()
    size = service.exact.group_size_items
    batches = [service.create_exact(0, "u" * 48).batch_id for _ in range(1_340)]
    acks = [GroupAcks(b, service.add_items(b, size)[0].id, (0,)) for b in batches]
    outcome = service.ack(0, acks)
    assert outcome.items_cleared == len(batches)
    assert all(service.get_exact(b).pending_items == size - 1 for b in batches)


def test_a_reaper_pass_killed_at_any_delete_leaves_no_group_without_its_header() -> None:
    """Expiry deletes straight from the partition (crash point `batch.table.delete` before each):
    cut at every one of its deletes, what is left is whole batches or headers with some of their
    groups, never a group whose header is gone, and the next pass removes the rest."""
    service, table = serving_service()
    batches = [service.create_exact(0, None) for _ in range(2)]
    for batch in batches:
        service.add_items(batch.batch_id, 3 * 4096, request_id=f"add-{batch.batch_id}")
    before = dict(table.store.data)
    deletes = sum(1 for key in before if not key.startswith(b"s/"))
    for nth in range(1, deletes + 1):
        table.store.data = dict(before)
        with armed("batch.table.delete", nth=nth), pytest.raises(InjectedFault):
            service.expire_exact(closed=False, not_updated_since_ms=now_ms() + 1)
        headers = {key[len(b"x/") :] for key in table.store.data if key.startswith(b"x/")}
        groups = {key.split(b"/")[1] for key in table.store.data if key.startswith(b"g/")}
        assert groups <= headers, (nth, groups - headers)
        removal = service.expire_exact(closed=False, not_updated_since_ms=now_ms() + 1)
        assert removal.batches_removed == len(headers)
        assert table.store.data.keys() <= {sequence_key(p) for p in range(PARTITIONS)}


def test_an_ack_cut_between_its_parts_is_finished_by_its_redelivery() -> None:
    """A crash after the second part's intent record (`batch.table.intent_written`): the first part
    is applied, the second's intent is replayed by the next operation, and the redelivered ack
    counts every item once."""
    service, _ = serving_service()
    batch = service.create_exact(0, None)
    groups = [g for _ in range(3) for g in service.add_items(batch.batch_id, service.exact.max_items_per_add)]
    acks = [GroupAcks(batch.batch_id, g.id, (0, 1)) for g in groups]
    partition = service.exact_partition(batch.batch_id)
    with armed("batch.table.intent_written", nth=2), pytest.raises(InjectedFault):
        service.ack(partition, acks)
    service.ack(partition, acks)  # the ack record delivered again
    got = service.get_exact(batch.batch_id)
    assert got.pending_items == got.total_items - 2 * len(groups)
