"""The message hub (MessageHub): drawers, cabinets and a catalog on Cosmos DB; Peek and Dequeue for actors.

The repository works through the HubStore port (app/hub/ports.py): HubContainers on Cosmos DB, or
MemoryHubStore in memory (same conditional-write rules, for unit tests of the hub's concurrency).
"""

from app.hub.cosmos_io import HubContainers
from app.hub.memory import MemoryHubStore
from app.hub.ports import BundleLog, HubStore
from app.hub.reclaim import ReclaimReport
from app.hub.repository import HubRepository, RepositoryOptions, SaveResult
from app.hub.service import MessageHub, PeekedBundle

__all__ = [
    "BundleLog",
    "HubContainers",
    "HubRepository",
    "HubStore",
    "MemoryHubStore",
    "MessageHub",
    "PeekedBundle",
    "ReclaimReport",
    "RepositoryOptions",
    "SaveResult",
]
