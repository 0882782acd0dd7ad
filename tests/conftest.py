"""Fixtures shared by every test folder.

The service fixtures start the real services once per session, through the same code as
`hubstream stack up`; a service that cannot start fails the session loudly; nothing here skips.
Unit tests never request them, so they start nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio
from hypothesis import settings as hypothesis_settings

from app.composite.store import MetadataStore
from app.cosmos import CosmosStore, open_cosmos
from app.kafka.admin import KafkaAdmin
from app.settings import Settings, get_settings
from app.stack import stack_up
from app.stack.broker import broker_process
from app.stack.services import cosmos_process, mariadb_process


@pytest.fixture(scope="session")
def settings() -> Settings:
    return get_settings()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Iterator[Settings]:
    """Start (or reuse) the broker and Cosmos endpoint and check MySQL; stop only what we started."""
    broker_was_ours = broker_process(settings).owned_pid() is not None or not settings.embedded_kafka
    cosmos_was_ours = cosmos_process(settings).owned_pid() is not None or not settings.embedded_cosmos
    mariadb_was_ours = mariadb_process(settings).owned_pid() is not None or not settings.embedded_mariadb
    report = stack_up(settings)
    yield settings
    # Leave running what was running before the session (a developer's `make run`).
    if settings.embedded_cosmos and "started" in report.cosmos and not cosmos_was_ours:
        cosmos_process(settings).stop()
    if settings.embedded_kafka and "started" in report.kafka and not broker_was_ours:
        broker_process(settings).stop()
    if settings.embedded_mariadb and "started" in report.binlog and not mariadb_was_ours:
        mariadb_process(settings).stop(timeout_s=30.0)


@pytest.fixture(scope="session")
def kafka(settings: Settings) -> Iterator[Settings]:
    """Only the broker, started or reused (for suites that need no Cosmos DB or MySQL); stopped at
    the end only when this fixture started it."""
    started = settings.embedded_kafka and broker_process(settings).start() == "started"
    KafkaAdmin(settings.bootstrap).topics()  # raises ServiceUnavailable when the broker does not answer
    yield settings
    if started:
        broker_process(settings).stop()


@pytest.fixture
def metadata(stack: Settings) -> Iterator[MetadataStore]:
    store = MetadataStore.of(stack)
    yield store
    store.close()


@pytest_asyncio.fixture
async def cosmos(stack: Settings, unique: str) -> AsyncIterator[CosmosStore]:
    """A Cosmos store on a fresh database per test."""
    store = await open_cosmos(stack, database=f"test-{unique}")
    yield store
    await store.client.delete_database(store.database.id)
    await store.close()


@pytest.fixture
def unique() -> str:
    """A fresh suffix for topic, group, container and table names, so tests never share state."""
    return uuid.uuid4().hex[:10]


# CI runs property tests with a fixed seed so a run is reproducible; locally each run explores
# new examples. (The subscription rules' ordering is also searched exhaustively up to a bound:
# tests/unit/modelcheck.)
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "dev")
