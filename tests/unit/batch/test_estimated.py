from __future__ import annotations

import uuid

import pytest

from app.batch.errors import BatchNotFound
from app.batch.estimated import EstimatedRules
from app.errors import InvalidInput
from tests.unit.batch.conftest import MemoryStore

RULES = EstimatedRules()


def test_carlyle_scenario_decrement_then_close(store: MemoryStore) -> None:
    batch = RULES.create(store, 5, "foo", 0, lambda: str(uuid.uuid4()))
    for n in range(5):
        after, completion = RULES.add(store, batch.batch_id, -1, n)
        assert completion is None and not after.is_complete
    got = RULES.get(store, batch.batch_id)
    assert (got.is_complete, got.is_closed, got.user_key, got.pending) == (False, False, "foo", 0)
    closed, completion = RULES.close(store, batch.batch_id, 9)
    assert closed.is_complete and completion is not None and completion.user_key == "foo"


def test_close_first_then_last_decrement_completes(store: MemoryStore) -> None:
    batch = RULES.create(store, 2, None, 0, lambda: str(uuid.uuid4()))
    RULES.add(store, batch.batch_id, 3, 1)  # incr
    assert RULES.close(store, batch.batch_id, 2)[1] is None
    assert RULES.add(store, batch.batch_id, -4, 3)[1] is None
    assert RULES.add(store, batch.batch_id, -1, 4)[1] is not None
    RULES.confirm_completion(store, batch.batch_id)  # the broker confirmed the event
    assert RULES.add(store, batch.batch_id, -1, 5)[1] is None  # already complete


def test_close_then_incr_then_decr_completes_once(store: MemoryStore) -> None:
    batch = RULES.create(store, 0, None, 0, lambda: str(uuid.uuid4()))
    assert RULES.close(store, batch.batch_id, 1)[1] is not None  # closed at 0: complete
    RULES.confirm_completion(store, batch.batch_id)  # the broker confirmed the event
    after, completion = RULES.add(store, batch.batch_id, 1, 2)
    assert completion is None and not after.is_complete
    after, completion = RULES.add(store, batch.batch_id, -1, 3)
    assert after.is_complete and completion is None, "its completion was confirmed already"
    assert RULES.close(store, batch.batch_id, 4)[1] is None


def test_delete_and_bad_sizes(store: MemoryStore) -> None:
    batch = RULES.create(store, 1, None, 0, lambda: str(uuid.uuid4()))
    RULES.delete(store, batch.batch_id)
    with pytest.raises(BatchNotFound):
        RULES.get(store, batch.batch_id)
    with pytest.raises(InvalidInput):
        RULES.create(store, -1, None, 0, lambda: str(uuid.uuid4()))


def test_expire_by_state_and_age(store: MemoryStore) -> None:
    a = RULES.create(store, 1, None, 0, lambda: str(uuid.uuid4()))
    b = RULES.create(store, 1, None, 0, lambda: str(uuid.uuid4()))
    RULES.close(store, b.batch_id, 100)
    assert RULES.expire(store, closed=False, not_updated_since_ms=0).batches_removed == 1
    assert RULES.expire(store, closed=True, not_updated_since_ms=99).batches_removed == 0
    with pytest.raises(BatchNotFound):
        RULES.get(store, a.batch_id)
