"""Which copies read from RQ may run now: a copy whose time has come, unless an earlier copy of
its group still waits. Pure.

RQ is read in order, but its copies come due in any order: a group that failed many times waits
minutes, a group that failed once seconds. Taking copies only from the head of a partition held
every group behind the slowest one (head-of-line). Per group the order still holds: the
GroupState rules judge a group's copies in the order RQ holds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, NamedTuple, TypeVar

from app.ordered.work import Work

__all__ = ["Taken", "take_due"]

T = TypeVar("T")


class Taken(NamedTuple, Generic[T]):
    due: list[T]  # to run now, in RQ order
    rest: list[T]  # still waiting, in RQ order
    next_due_ms: float | None  # when the earliest of them comes due (None: none has a time)


def take_due(waiting: Iterable[T], now_ms: float, work_of: Callable[[T], Work]) -> Taken[T]:
    """Split `waiting` (in RQ order) into the copies to run now and the ones that keep waiting.
    A copy without hs-* metadata (undecodable) is due at once: it goes to DLQ."""
    due: list[T] = []
    rest: list[T] = []
    held: set[str] = set()  # groups with a copy still waiting
    next_due: float | None = None
    for item in waiting:
        work = work_of(item)
        meta = work.meta
        if meta is not None and meta.due_ms > now_ms:
            held.add(work.ordering_key)
            rest.append(item)
            next_due = meta.due_ms if next_due is None else min(next_due, meta.due_ms)
        elif work.ordering_key in held:
            rest.append(item)  # due, but an earlier copy of its group waits: its turn is after that
        else:
            due.append(item)
    return Taken(due, rest, next_due)
