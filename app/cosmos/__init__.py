"""Cosmos DB adapter: one way to open the async client, database and containers."""

from app.cosmos.client import CosmosStore, open_cosmos

__all__ = ["CosmosStore", "open_cosmos"]
