"""Every interleaving of one exact batch's life on a worker that may be killed after any changelog
record, up to a bound, checked with the pure rules (app/batch/exact.py) run the way BatchService
runs them (all or nothing per operation through app/batch/atomic.py):

- the producer adds items (with its Idempotency-Key; retried until answered), then closes the
  batch (retried until answered);
- consumers send one ack record per item, and the first item's ack twice (a redelivery); a record
  counts as handled only when its operation's writes are confirmed;
- a completion found due (by an ack, the close or a get) is sent, then recorded as confirmed;
- a kill cuts the changelog after any record of the operation in flight: the worker that restores
  the partition holds that prefix, and what was not answered or confirmed comes again.

Checked in every reachable state: the header's pending count is the number of set bits, and a
batch recorded as confirmed had its completion sent. Where nothing is left to do: the batch is
complete, its completion was sent at least once and is recorded, and the producer learned the
same item groups however often it retried.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest

from app.batch import bitfield
from app.batch.atomic import atomically, replay_intent
from app.batch.exact import ExactRules
from app.batch.ids import GroupAcks, ItemGroup
from app.batch.model import BatchStore, ExactBatch, decode_group, group_prefix
from tests.unit.batch.test_atomic import ChangelogStore
from tests.unit.modelcheck.bfs import explore

BATCH_ID = 3  # sequence 1 on partition 1 of 2
NOW_MS = 1


@dataclass(frozen=True)
class Bound:
    items: int
    group_size: int
    crashes: int

    def __str__(self) -> str:
        return f"{self.items} items in groups of {self.group_size}, up to {self.crashes} kill(s)"


@dataclass(frozen=True)
class World:
    table: frozenset[tuple[bytes, bytes]]
    answered_groups: tuple[ItemGroup, ...] | None  # what the producer learned from add-items
    acks_left: tuple[int, ...]  # item numbers of ack records not handled yet (duplicates allowed)
    closed_answered: bool
    due: bool  # a completion was found due and not sent yet by the live worker
    sent: int  # completion events on the topic
    crashes: int


class Batch:
    def __init__(self, bound: Bound) -> None:
        self.bound = bound
        self.rules = ExactRules(group_size_items=bound.group_size, max_items_per_add=1_000)

    def roots(self) -> list[World]:
        store = ChangelogStore()
        with atomically(store) as writes:
            batch = self.rules.create(writes, 1, 2, None, NOW_MS)
        assert batch.batch_id == BATCH_ID
        return [World(frozenset(store.data.items()), None, (), False, False, 0, 0)]

    # -- running one operation, with a kill after any of its changelog records ------------------

    def _run(self, w: World, operation: Callable[..., Any]) -> Iterator[tuple[int | None, Any, World]]:
        """(kill point or None, result, table after): the whole operation, then each torn prefix."""
        store = ChangelogStore()
        store.data = dict(w.table)
        with atomically(store) as writes:
            result = operation(writes)
        yield None, result, replace(w, table=frozenset(store.data.items()))
        if w.crashes < self.bound.crashes:
            for written in range(len(store.log)):
                torn = ChangelogStore()
                torn.data = dict(w.table)
                for key, value in store.log[:written]:
                    if value is None:
                        torn.delete(key)
                    else:
                        torn.put(key, value)
                yield (
                    written,
                    None,
                    replace(w, table=frozenset(torn.data.items()), due=False, crashes=w.crashes + 1),
                )

    def successors(self, w: World) -> Iterator[tuple[str, World]]:
        if w.answered_groups is None:
            counter = itertools.count()

            def add(s: BatchStore) -> list[ItemGroup]:
                return self.rules.add_items(
                    s, BATCH_ID, self.bound.items, NOW_MS, lambda: f"g{next(counter)}", "r1"
                )

            for kill, groups, after in self._run(w, add):
                if kill is not None:
                    yield f"add:killed@{kill}", after
                else:
                    assert isinstance(groups, list)
                    acks = (0, *range(self.bound.items))  # item 0's record is delivered twice
                    yield "add", replace(after, answered_groups=tuple(groups), acks_left=acks)
            return
        for position, item in enumerate(w.acks_left):
            if item in w.acks_left[:position]:
                continue  # the same record twice: one interleaving is enough
            ack = self._ack_of(w.answered_groups, item)
            for kill, outcome, after in self._run(w, lambda s, a=ack: self.rules.ack(s, [a], NOW_MS)):
                if kill is not None:
                    yield f"ack{item}:killed@{kill}", after
                    continue
                rest = w.acks_left[:position] + w.acks_left[position + 1 :]
                due = after.due or bool(outcome.completions)
                yield f"ack{item}", replace(after, acks_left=rest, due=due)
        if not w.closed_answered:
            for kill, result, after in self._run(w, lambda s: self.rules.close(s, BATCH_ID, NOW_MS)):
                if kill is not None:
                    yield f"close:killed@{kill}", after
                    continue
                _, completion = result
                yield "close", replace(after, closed_answered=True, due=after.due or completion is not None)
        if w.due:
            sent = replace(w, sent=w.sent + 1)
            for kill, _, after in self._run(sent, lambda s: self.rules.confirm_completion(s, BATCH_ID)):
                yield (
                    ("send+confirm" if kill is None else f"send+confirm:killed@{kill}"),
                    replace(after, due=False),
                )
        elif self._batch(w).completion_due:
            yield "get:due", replace(w, due=True)  # the job polling the batch finds it due

    @staticmethod
    def _ack_of(groups: tuple[ItemGroup, ...] | None, item: int) -> GroupAcks:
        assert groups is not None
        for group in groups:
            if item < group.upto:
                return GroupAcks(BATCH_ID, group.id, (item,))
            item -= group.upto
        raise AssertionError("item out of range")

    @staticmethod
    def _restored(w: World) -> ChangelogStore:
        """The partition as the next operation sees it (an interrupted one finished first)."""
        store = ChangelogStore()
        store.data = dict(w.table)
        replay_intent(store)
        return store

    def _batch(self, w: World) -> ExactBatch:
        return self.rules.get(self._restored(w), BATCH_ID)

    # -- checks ------------------------------------------------------------------------------------

    def invariant(self, w: World) -> None:
        store = self._restored(w)
        batch = self.rules.get(store, BATCH_ID)
        set_bits = sum(
            bitfield.count_set(decode_group(raw)[1]) for _, raw in store.scan(group_prefix(BATCH_ID))
        )
        assert batch.pending_items == set_bits, f"header says {batch.pending_items} pending, bits {set_bits}"
        if batch.completion_confirmed:
            assert w.sent >= 1, "completion recorded as confirmed but never sent"

    def at_end(self, w: World) -> None:
        batch = self._batch(w)
        assert w.answered_groups is not None and not w.acks_left and w.closed_answered
        assert sum(g.upto for g in w.answered_groups) == self.bound.items, "the producer's groups"
        assert batch.is_complete, f"not complete: {batch}"
        assert batch.total_items == self.bound.items, f"items added twice: {batch}"
        assert w.sent >= 1 and batch.completion_confirmed, f"completion sent {w.sent}, {batch}"


BOUNDS = [Bound(3, 2, 2), Bound(4, 2, 3), Bound(5, 2, 3)]


@pytest.mark.parametrize("bound", BOUNDS, ids=str)
def test_every_interleaving_completes_the_batch_and_reports_it(bound: Bound) -> None:
    model = Batch(bound)
    seen = explore(model.roots(), model.successors, model.invariant, model.at_end)
    print(f"exact batch: {bound}: {seen.states} states, {seen.terminal} final, 0 violations")
    assert seen.terminal > 0


def test_the_check_finds_torn_writes_without_the_intent_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker has teeth: with each key written on its own (no intent record), a kill between
    a group's bits and the header leaves them disagreeing, and the search says how."""

    @contextmanager
    def one_by_one(store: BatchStore) -> Iterator[BatchStore]:
        yield store

    monkeypatch.setattr(sys.modules[__name__], "atomically", one_by_one)
    model = Batch(Bound(3, 2, 1))
    with pytest.raises(AssertionError, match="pending"):
        explore(model.roots(), model.successors, model.invariant, model.at_end)
