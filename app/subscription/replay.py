"""Which DLQ messages an unsideline replays (pure).

Replays go to RQ in group order, and the group's DLQ consumption mark moves to the last replayed
entry (`on_unsidelined`), so the group is no longer blocked by them and later MQ messages queue
behind the replays. A replayed message that fails again goes back to DLQ once (replays are never
retried) and nothing is replayed again unless asked: the mark is past it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from app.ordered.rules import GroupState, Position
from app.subscription.errors import InvalidSubscription

__all__ = ["DlqEntry", "ReplaySelection", "select_discards", "select_replays"]


@dataclass(frozen=True, slots=True)
class DlqEntry:
    group_id: str
    message_id: str
    main: Position  # (MQ storage idx, offset)
    main_partition: int
    dlq: Position  # (DLQ storage idx, offset) where it sits
    failed_ms: int


@dataclass(frozen=True, slots=True)
class ReplaySelection:
    group_id: str | None = None
    message_id: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def matches(self, entry: DlqEntry) -> bool:
        return (
            (self.group_id is None or entry.group_id == self.group_id)
            and (self.message_id is None or entry.message_id == self.message_id)
            and (self.since_ms is None or entry.failed_ms >= self.since_ms)
            and (self.until_ms is None or entry.failed_ms <= self.until_ms)
        )


def select_replays(
    entries: list[DlqEntry], states: dict[str, GroupState], selection: ReplaySelection
) -> dict[str, list[DlqEntry]]:
    """Per group, the unresolved DLQ entries to replay, in group (DLQ) order.

    Unresolved: after the group's DLQ consumption mark. Refused (InvalidSubscription) when a group
    has unresolved entries before a selected one that the selection leaves out: replaying them
    out of group order would break the group's order.
    """
    by_group: dict[str, list[DlqEntry]] = defaultdict(list)
    for entry in sorted(entries, key=lambda e: (e.group_id, e.dlq)):
        state = states.get(entry.group_id)
        consumed = state.dlq.c if state is not None else None
        if consumed is not None and entry.dlq <= consumed.internal:
            continue
        by_group[entry.group_id].append(entry)
    out: dict[str, list[DlqEntry]] = {}
    for group, unresolved in by_group.items():
        picked = [e for e in unresolved if selection.matches(e)]
        if not picked:
            continue
        skipped = [e.message_id for e in unresolved[: unresolved.index(picked[-1])] if e not in picked]
        if skipped:
            raise InvalidSubscription(
                f"group {group!r} has unresolved DLQ messages before the selected ones that the "
                f"selection leaves out ({', '.join(skipped[:5])}{'...' if len(skipped) > 5 else ''}); "
                f"replaying out of group order is refused: select them too (e.g. --group {group})"
            )
        out[group] = picked
    return out


def select_discards(
    entries: list[DlqEntry], states: dict[str, GroupState], below: Callable[[DlqEntry], bool]
) -> dict[str, list[DlqEntry]]:
    """Per group, the unresolved DLQ entries a DLQ fast-forward gives up, in group (DLQ) order:
    those `below` the new offsets, up to the group's first unresolved entry that is not (its DLQ
    consumed mark is one position: only a prefix of the unresolved entries can be resolved; with
    offsets given as one position this is every entry below it, with a timestamp it keeps an
    entry stamped later in an older storage topic, and those after it)."""
    by_group: dict[str, list[DlqEntry]] = defaultdict(list)
    for entry in sorted(entries, key=lambda e: (e.group_id, e.dlq)):
        state = states.get(entry.group_id)
        consumed = state.dlq.c if state is not None else None
        if consumed is None or entry.dlq > consumed.internal:
            by_group[entry.group_id].append(entry)
    out: dict[str, list[DlqEntry]] = {}
    for group, unresolved in by_group.items():
        given_up: list[DlqEntry] = []
        for entry in unresolved:
            if not below(entry):
                break
            given_up.append(entry)
        if given_up:
            out[group] = given_up
    return out
