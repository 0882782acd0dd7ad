"""MySQL statements built in Python: literals as pymysql's Connection.escape writes them, in both
quoting modes of the server, and multi-row upserts cut at MAX_STATEMENT_CHARS."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pymysql
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysql.constants.SERVER_STATUS import SERVER_STATUS_NO_BACKSLASH_ESCAPES
from pymysql.converters import encoders

from app.pipeline.sql import MAX_STATEMENT_CHARS, row_values, sql_literal, upsert_statements


class _Escaper:
    """pymysql's own Connection.escape on a connection in the given quoting mode (the oracle)."""

    escape: Any = pymysql.connections.Connection.escape  # the stubs bind it to a Connection only
    _escape_string = pymysql.connections.Connection._escape_string  # type: ignore[attr-defined]  # private
    encoders = encoders
    encoding = "utf8mb4"

    def __init__(self, backslash_escapes: bool) -> None:
        self.server_status = 0 if backslash_escapes else SERVER_STATUS_NO_BACKSLASH_ESCAPES


# Every character pymysql escapes, the separator row_values joins strings with, and non-ASCII text.
TEXT = st.text(alphabet=st.sampled_from("ab '\"\\\n\r\0\x1a\x01é😀"), max_size=8)
VALUE = st.one_of(
    TEXT,
    st.integers(-(2**63), 2**63),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
COLUMNS = ["a", "b", "c"]


@given(
    rows=st.lists(st.fixed_dictionaries({}, optional={c: VALUE for c in COLUMNS}), min_size=1),
    backslash_escapes=st.booleans(),
)
def test_row_values_write_each_value_as_pymysql_escapes_it(
    rows: list[dict[str, Any]], backslash_escapes: bool
) -> None:
    escape = _Escaper(backslash_escapes).escape
    expected = ["(" + ",".join(escape(row.get(c)) for c in COLUMNS) + ")" for row in rows]
    assert row_values(COLUMNS, rows, backslash_escapes) == expected


@given(columns=st.lists(st.one_of(TEXT, st.integers()), min_size=1), backslash_escapes=st.booleans())
def test_a_column_of_one_type_is_written_like_mixed_ones(columns: list[Any], backslash_escapes: bool) -> None:
    rows = [{"a": value} for value in columns]
    literal = sql_literal(backslash_escapes)
    assert row_values(["a"], rows, backslash_escapes) == [f"({literal(value)})" for value in columns]


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (b"\x00'", "X'0027'"),
        (Decimal("1.50"), "1.50"),
        ({"k": [1, "x'"]}, r"'{\"k\":[1,\"x\'\"]}'"),
        (1.5, "1.5e0"),
    ],
)
def test_uncommon_values(value: Any, literal: str) -> None:
    assert sql_literal(True)(value) == literal


def test_nan_is_refused_like_pymysql_refuses_it() -> None:
    with pytest.raises(pymysql.ProgrammingError):
        sql_literal(True)(float("nan"))


def test_upserts_are_cut_at_max_statement_chars_and_keep_row_order() -> None:
    rows = [{"id": f"{i:03d}", "text": "x" * 50_000} for i in range(12)]
    values = row_values(["id", "text"], rows)
    statements = list(upsert_statements("`db`.`t`", ["id"], ["id", "text"], values))

    assert len(statements) > 1
    assert all(len(s) < MAX_STATEMENT_CHARS + len(values[0]) + 200 for s in statements)
    head = "INSERT INTO `db`.`t` (`id`, `text`) VALUES "
    tail = " ON DUPLICATE KEY UPDATE `text`=VALUES(`text`)"
    assert all(s.startswith(head) and s.endswith(tail) for s in statements)
    written = ",".join(s.removeprefix(head).removesuffix(tail) for s in statements)
    assert written == ",".join(values)


def test_an_upsert_of_key_columns_only_updates_nothing() -> None:
    statement = next(upsert_statements("`t`", ["id"], ["id"], ["('a')"]))
    assert statement == "INSERT INTO `t` (`id`) VALUES ('a') ON DUPLICATE KEY UPDATE `id`=`id`"
