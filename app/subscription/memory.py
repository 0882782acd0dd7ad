"""In-memory group states: ShardStates without a Faust table (single-process runs, benches, tests)."""

from __future__ import annotations

from collections.abc import Sequence

from app.crashpoints import crash_point
from app.ordered.rules import GroupState

__all__ = ["MemoryStates"]


class MemoryStates:
    """Keeps each group's state in a dict; nothing survives the process (the table's SlotStates
    writes through to the changelog on top of it)."""

    def __init__(self) -> None:
        self.states: dict[str, GroupState] = {}
        self._to_check: set[str] = set()

    def get(self, group_id: str) -> GroupState | None:
        return self.states.get(group_id)

    def put(self, group_id: str, state: GroupState) -> None:
        self.states[group_id] = state
        self._to_check.add(group_id)

    async def flush(self) -> None:
        return None

    def to_check(self) -> list[str]:
        return list(self._to_check)

    def checked(self, group_id: str) -> None:
        self._to_check.discard(group_id)

    async def forget(self, group_ids: Sequence[str]) -> None:
        for group_id in group_ids:
            crash_point("subscription.state.forget")
            self.states.pop(group_id, None)
            self._to_check.discard(group_id)
