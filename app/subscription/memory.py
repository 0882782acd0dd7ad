"""In-memory group states: ShardStates without a Faust table (single-process runs, benches, tests)."""

from __future__ import annotations

from app.subscription.state import GroupState

__all__ = ["MemoryStates"]


class MemoryStates:
    """Keeps each group's state in a dict; nothing survives the process."""

    def __init__(self) -> None:
        self.states: dict[str, GroupState] = {}

    def get(self, group_id: str) -> GroupState | None:
        return self.states.get(group_id)

    def put(self, group_id: str, state: GroupState) -> None:
        self.states[group_id] = state

    async def flush(self) -> None:
        return None
