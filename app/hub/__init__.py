"""The message hub (seed 000): drawers, cabinets and a catalog on Cosmos DB; Peek and Dequeue for actors."""

from app.hub.repository import SaveResult
from app.hub.service import MessageHub, PeekedBundle

__all__ = ["MessageHub", "PeekedBundle", "SaveResult"]
