"""How the hub's repository sizes its drawers, pages and saves (from Settings, in app/hub/service.py)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RepositoryOptions"]


@dataclass(frozen=True, slots=True)
class RepositoryOptions:
    drawer_capacity: int = 10_000
    parallel_drawers: int = 6
    page_size: int = 1000
    lease_s: float = 15.0  # renewed every third of it while the save runs
    save_recipients: int = 32  # recipients saved at once; the others wait before they claim
    defer_acks: bool = True  # a dequeue may record a drawer's position in the actor's stream
