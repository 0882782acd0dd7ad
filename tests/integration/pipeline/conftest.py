"""Fixtures of the pipeline integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from app.settings import Settings


@pytest.fixture
def mysql(stack: Settings) -> Iterator[pymysql.connections.Connection[Any]]:
    conn = pymysql.connect(**stack.mysql.connect_args(autocommit=True))
    yield conn
    conn.close()


@pytest.fixture
def source(stack: Settings) -> Iterator[pymysql.connections.Connection[Any]]:
    """The binlog tests' source: the project's own MariaDB, with a row-based binlog."""
    conn = pymysql.connect(**stack.binlog_mysql.connect_args(autocommit=True))
    yield conn
    conn.close()
