"""What the repository's operations (save.py, peek.py, acknowledge.py) share: the options that size
drawers, pages and saves (from Settings, in app/hub/service.py), and one store, one set of ledgers
and the peeks' boards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from app.hub.known import KnownDocs
from app.hub.ledgers import Ledgers
from app.hub.ports import HubStore
from app.hub.views import CabinetBoard

__all__ = ["RepositoryOptions", "RepositoryPart"]

C = TypeVar("C")  # the store's container handle


@dataclass(frozen=True, slots=True)
class RepositoryOptions:
    drawer_capacity: int = 10_000
    parallel_drawers: int = 6
    page_size: int = 1000
    lease_s: float = 15.0  # renewed every third of it while the save runs
    save_recipients: int = 32  # recipients saved at once; the others wait before they claim
    defer_acks: bool = True  # a dequeue may record a drawer's position in the actor's stream
    dedup_window_s: int = 0  # index entries expire this long after their save (a `ttl`); 0: never
    # The embedded endpoint keeps a container's per-item TTL setting but never expires anything:
    # there the reclaim sweep deletes index entries older than the window itself.
    expire_index_by_sweep_for_embedded_cosmos: bool = False


class RepositoryPart(Generic[C]):
    def __init__(
        self,
        io: HubStore[C],
        options: RepositoryOptions,
        ledgers: Ledgers[C],
        boards: KnownDocs[CabinetBoard],
    ) -> None:
        self.io = io
        self.options = options
        self.ledgers = ledgers
        # Per actor, what its last peek here learned of its cabinets (tagged with that bundle's
        # id): the dequeue of that bundle moves it on, and the actor's next peek starts from it.
        self.boards = boards
