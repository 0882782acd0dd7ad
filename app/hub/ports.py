"""Ports the hub service depends on; adapters implement them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from app.hub.actor import ActorBundles, ActorEvent

__all__ = ["BundleLog"]

R = TypeVar("R")


class BundleLog(Protocol):
    """The per-actor stream of bundle events (event store), folded into ActorBundles."""

    async def load(self, actor: str) -> ActorBundles: ...

    async def decide(
        self, actor: str, decision: Callable[[ActorBundles], tuple[R, Sequence[ActorEvent]]]
    ) -> R:
        """Run `decision` on the current state and append its events; re-run it on a version conflict."""
        ...

    async def close(self) -> None: ...

    @property
    def requests(self) -> int:
        """Cosmos requests issued so far (for benchmarks)."""
        ...
