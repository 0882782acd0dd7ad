"""An operation's writes go to the changelog as one intent record, which Faust's producer and the
broker refuse above about 1 MB. Before, an add of 8,000,000 items (allowed by the settings) made a
1.1 MB intent: the write failed after the add was answered, and Faust stopped the worker. Now the
largest add the settings allow fits, a setting that allows more is refused at start, and an
operation that would not fit anyway is refused before anything is written."""

from __future__ import annotations

import uuid

import pytest

from app.batch.atomic import MAX_INTENT_BYTES, atomically, encode_intent
from app.batch.errors import OperationTooLarge
from app.batch.exact import ExactRules
from app.batch.model import sequence_key
from app.batch.service import BatchService
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
