"""Which RQ copies run now (`app.ordered.retries.take_due`), checked exhaustively: every sequence
of up to 5 copies over 2 groups with due times 0-2, taken at times 0, 1 and 2. Each copy must be
taken exactly at max(its due time, the time its group's previous copy was taken): per group in RQ
order, and never later than that (a group is not held behind another group's backoff). Before,
hosts took copies only from the head of the partition, so a group waited for every copy ahead
of it."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from app.ordered.records import InternalMeta
from app.ordered.retries import Taken, take_due
from app.ordered.work import RecordStub, Work

TIMES = (0, 1, 2)


def copy(offset: int, group: str, due_ms: int) -> Work:
    meta = InternalMeta((0, offset), 0, f"m-{offset}", 1, due_ms)
    return Work(RecordStub("rq.0", 0, offset), 0, group, meta)


def expected_take_times(copies: list[Work]) -> dict[int, int]:
    last: dict[str, int] = {}
    out: dict[int, int] = {}
    for c in copies:
        assert c.meta is not None
        at = max(c.meta.due_ms, last.get(c.ordering_key, 0))
        out[c.record.offset] = last[c.ordering_key] = at
    return out


def check_every_sequence(take: Callable[[list[Work], int], Taken[Work]]) -> int:
    checked = 0
    for n in range(1, 6):
        for groups in itertools.product("ab", repeat=n):
            for dues in itertools.product(TIMES, repeat=n):
                copies = [copy(i, g, d) for i, (g, d) in enumerate(zip(groups, dues, strict=True))]
                waiting = list(copies)
                taken_at: dict[int, int] = {}
                for now in TIMES:
                    taken = take(waiting, now)
                    for c in taken.due:
                        taken_at[c.record.offset] = now
                    assert [c.record.offset for c in taken.rest] == sorted(
                        c.record.offset for c in taken.rest
                    )
                    later = [c.meta.due_ms for c in taken.rest if c.meta and c.meta.due_ms > now]
                    assert taken.next_due_ms == (min(later) if later else None)
                    waiting = taken.rest
                assert not waiting
                assert taken_at == expected_take_times(copies), (groups, dues)
                checked += 1
    return checked


def test_every_copy_is_taken_as_soon_as_its_group_allows() -> None:
    checked = check_every_sequence(lambda waiting, now: take_due(waiting, now, lambda w: w))
    assert checked == sum(2**n * 3**n for n in range(1, 6))


def test_the_check_catches_taking_from_the_head_only() -> None:
    """What the hosts did before: copies left the partition only from its head."""

    def head_only(waiting: list[Work], now: int) -> Taken[Work]:
        n = 0
        while n < len(waiting) and getattr(waiting[n].meta, "due_ms", 0) <= now:
            n += 1
        later = [c.meta.due_ms for c in waiting[n:] if c.meta and c.meta.due_ms > now]
        return Taken(waiting[:n], waiting[n:], min(later) if later else None)

    with pytest.raises(AssertionError):
        check_every_sequence(head_only)


def test_a_group_backing_off_at_the_head_holds_no_other_group() -> None:
    waiting = [copy(0, "slow", 60_000), copy(1, "slow", 0), copy(2, "fast", 1_000)]
    taken = take_due(waiting, 1_000, lambda w: w)
    assert [c.record.offset for c in taken.due] == [2]
    assert [c.record.offset for c in taken.rest] == [0, 1]
    assert taken.next_due_ms == 60_000


def test_a_copy_without_metadata_is_due_at_once() -> None:
    undecodable = Work(RecordStub("rq.0", 0, 5), 0, "__undecodable__", undecodable="no hs-* headers")
    assert take_due([undecodable], 0, lambda w: w).due == [undecodable]
