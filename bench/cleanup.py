"""What the benches that make a Cosmos database of their own share: dropping it afterwards."""

from __future__ import annotations

from app.cosmos import CosmosStore

__all__ = ["drop_bench_database"]


async def drop_bench_database(store: CosmosStore) -> None:
    """Delete the bench's database and close the client; a failed delete is said, never raised,
    so that the run's own error is not hidden behind the cleanup's."""
    try:
        await store.client.delete_database(store.database.id)
    except Exception as exc:
        print(f"could not delete database {store.database.id}: {type(exc).__name__}")
    await store.close()
