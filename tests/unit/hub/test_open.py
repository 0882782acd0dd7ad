"""MessageHub.open closes the Cosmos client it opened when the rest of opening fails."""

from __future__ import annotations

from typing import Any

import pytest

from app.hub import service
from app.hub.service import MessageHub
from app.settings import Settings


class FailingStore:
    """A store whose containers cannot be opened (Cosmos busy at a worker's start, say)."""

    def __init__(self) -> None:
        self.closed = 0

    async def container(self, name: str, partition_key_path: str, *, item_ttl: bool = False) -> Any:
        raise TimeoutError(f"{name}: no answer")

    async def close(self) -> None:
        self.closed += 1


async def test_a_failed_open_closes_the_client_it_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    store = FailingStore()

    async def open_cosmos(settings: Settings) -> FailingStore:
        return store

    monkeypatch.setattr(service, "open_cosmos", open_cosmos)
    with pytest.raises(TimeoutError):
        await MessageHub.open(Settings())
    assert store.closed == 1


async def test_a_failed_open_leaves_a_given_store_open() -> None:
    store = FailingStore()
    with pytest.raises(TimeoutError):
        await MessageHub.open(Settings(), store=store)  # type: ignore[arg-type]
    assert store.closed == 0
