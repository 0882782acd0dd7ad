"""Fixtures of the pipeline integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from app.settings import Settings


@pytest.fixture
def mysql(stack: Settings) -> Iterator[pymysql.connections.Connection]:  # type: ignore[type-arg]
    t = stack.mysql
    conn = pymysql.connect(
        host=t.host, port=t.port, user=t.user, password=t.password, database=t.database, autocommit=True
    )
    yield conn
    conn.close()
