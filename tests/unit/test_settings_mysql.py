"""MYSQL_URL: parsed once, handed to pymysql as connect arguments."""

from __future__ import annotations

import pytest

from app.errors import ConfigError
from app.settings import MysqlTarget


def test_connect_args_carry_the_url_parts_and_options() -> None:
    target = MysqlTarget("mysql://app:pw@db.example:3307/orders")
    assert target.connect_args(autocommit=True) == {
        "host": "db.example",
        "port": 3307,
        "user": "app",
        "password": "pw",
        "charset": "utf8mb4",
        "database": "orders",
        "autocommit": True,
    }
    assert target.redacted() == "mysql://app@db.example:3307/orders"


def test_defaults_and_a_connection_without_a_database() -> None:
    target = MysqlTarget("mariadb://")
    assert (target.host, target.port, target.user, target.password, target.database) == (
        "127.0.0.1",
        3306,
        "root",
        "",
        "hubstream",
    )
    assert "database" not in target.connect_args(database="")
    assert target.connect_args(database="other")["database"] == "other"


def test_a_url_of_another_scheme_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="MYSQL_URL must start with mysql://"):
        MysqlTarget("postgres://localhost/x")
