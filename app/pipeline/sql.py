"""MySQL statements built in Python for the bulk writer: identifiers, literals and multi-row upserts.

Literals are written as pymysql's `Connection.escape` writes them, for either quoting mode of the
server (`NO_BACKSLASH_ESCAPES` only doubles quotes), without its per-value dispatch: a bulk of
1,000 rows spends more time in that dispatch than MariaDB spends inserting the rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from operator import methodcaller
from typing import Any

import orjson
from pymysql.converters import escape_float

from app.pipeline.errors import WriteFailed

__all__ = ["MAX_STATEMENT_CHARS", "ident", "row_values", "sql_literal", "upsert_statements"]

_IDENT = re.compile(r"^[A-Za-z0-9_$]{1,64}$")
# A multi-row statement is cut at this many characters (<= 1 MiB of utf-8 even at 4 bytes a char,
# far below MariaDB's max_allowed_packet).
MAX_STATEMENT_CHARS = 256 * 1024

# pymysql's escape table: the characters mysql_real_escape_string escapes (index = code point).
_BACKSLASH_ESCAPES = [chr(code) for code in range(128)]
for _char, _escaped in {"\0": "\\0", "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\032": "\\Z"}.items():
    _BACKSLASH_ESCAPES[ord(_char)] = _escaped
_BACKSLASH_ESCAPES[ord('"')] = '\\"'
_BACKSLASH_ESCAPES[ord("'")] = "\\'"
_SEPARATOR = "\x01"  # joins a column's strings to escape them at once; not escaped itself


def ident(name: str) -> str:
    if not _IDENT.match(name):
        raise WriteFailed(f"{name!r} is not a valid MySQL identifier")
    return f"`{name}`"


def _quoter(backslash_escapes: bool) -> Callable[[str], str]:
    if backslash_escapes:
        return lambda text: "'" + text.translate(_BACKSLASH_ESCAPES) + "'"
    return lambda text: "'" + text.replace("'", "''") + "'"


def sql_literal(backslash_escapes: bool = True) -> Callable[[Any], str]:
    """A value as an SQL literal: strings quoted for the server's quoting mode, ints, None and bools
    directly (the hot path), floats and decimals as numbers, bytes as hex, other values as JSON text."""
    quote = _quoter(backslash_escapes)

    def convert(value: Any) -> str:
        kind = type(value)
        if kind is str:
            return quote(value)
        if kind is int:
            return str(value)
        if value is None:
            return "NULL"
        if kind is bool:
            return "1" if value else "0"
        return _uncommon_literal(value, quote)

    return convert


def _uncommon_literal(value: Any, quote: Callable[[str], str]) -> str:
    if isinstance(value, str):
        return quote(str(value))
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return str(escape_float(value))  # raises ProgrammingError for nan and inf, as pymysql does
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    return quote(orjson.dumps(value, default=str).decode())


def row_values(
    columns: Sequence[str], rows: Sequence[Mapping[str, Any]], backslash_escapes: bool = True
) -> list[str]:
    """Each row as `(literal,...)` in column order (a column missing from a row is NULL), built a
    column at a time: a column of only strings is escaped in one pass, one of only ints converted
    in one pass, any other column value by value with sql_literal."""
    literal = sql_literal(backslash_escapes)
    by_column = [
        _column_literals(list(map(methodcaller("get", c), rows)), literal, backslash_escapes) for c in columns
    ]
    return ["(" + row + ")" for row in map(",".join, zip(*by_column, strict=True))]


def _column_literals(values: list[Any], literal: Callable[[Any], str], backslash_escapes: bool) -> list[str]:
    kinds = set(map(type, values))
    if kinds == {str}:
        quoted = _quoted_strings(values, backslash_escapes)
        if quoted is not None:
            return quoted
    elif kinds == {int}:
        return list(map(str, values))
    return list(map(literal, values))


def _quoted_strings(values: list[str], backslash_escapes: bool) -> list[str] | None:
    """The strings quoted and escaped through one joined string (None if one holds the separator)."""
    joined = _SEPARATOR.join(values)
    if joined.count(_SEPARATOR) != len(values) - 1:
        return None
    escaped = joined.translate(_BACKSLASH_ESCAPES) if backslash_escapes else joined.replace("'", "''")
    return ("'" + escaped.replace(_SEPARATOR, "'" + _SEPARATOR + "'") + "'").split(_SEPARATOR)


def upsert_statements(
    table: str, key: Sequence[str], columns: Sequence[str], values: Sequence[str]
) -> Iterator[str]:
    """INSERT INTO table (columns) VALUES <values> ON DUPLICATE KEY UPDATE the non-key columns, cut
    at MAX_STATEMENT_CHARS (`values` from row_values)."""
    names = [ident(c) for c in columns]
    head = f"INSERT INTO {table} ({', '.join(names)}) VALUES "
    updates = ", ".join(f"{n}=VALUES({n})" for c, n in zip(columns, names, strict=True) if c not in key)
    tail = f" ON DUPLICATE KEY UPDATE {updates or f'{names[0]}={names[0]}'}"
    first, size = 0, 0
    for index, length in enumerate(map(len, values)):
        size += length + 1
        if size >= MAX_STATEMENT_CHARS:
            yield head + ",".join(values[first : index + 1]) + tail
            first, size = index + 1, 0
    if first < len(values):
        yield head + ",".join(values[first:]) + tail
