"""What every pipeline source uses: blocking client calls on one thread, JSON-safe column values."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any, TypeVar

import orjson

from app.pipeline.model import Message, Mode, NewEntry, Op

__all__ = ["Threaded", "copied_rows", "json_value", "now_ms"]

T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


def json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(bytes(value)).decode()
    if isinstance(value, set | frozenset):  # a SET column in a binlog row; a snapshot reads "a,b"
        return ",".join(sorted(str(json_value(member)) for member in value))
    if isinstance(value, dict | list | tuple):  # a JSON column in a binlog row; a snapshot reads its text
        return orjson.dumps(_json_tree(value)).decode()
    return value


def _json_tree(value: Any) -> Any:
    """A decoded JSON document with its keys and strings as text (the binlog gives MySQL's as bytes)."""
    if isinstance(value, dict):
        return {str(json_value(key)): _json_tree(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_tree(item) for item in value]
    return json_value(value)


class Threaded:
    # A streaming reader ends once caught up with what there was at its start (--exit-when-idle).
    until_caught_up = False

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pipeline-source")

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def close(self) -> None:
        self._executor.shutdown(wait=False)


def copied_rows(
    rows: list[dict[str, Any]], namespace: str, pk: Sequence[str], position: Mapping[str, Any]
) -> tuple[list[NewEntry], list[Any]]:
    """A table copy's rows (in primary-key order) as Copy entries, each positioned at its own key
    (`pk`, plus `position`), and the last key: the resume point of a copy cut short."""
    entries = []
    last: list[Any] = []
    for row in rows:
        data = {k: json_value(v) for k, v in row.items()}
        last = [data[c] for c in pk]
        entries.append(
            NewEntry(
                Message(Op.INSERT, now_ms(), namespace, data),
                Mode.COPY,
                {**position, "pk": last},
                "|".join(str(k) for k in last),
            )
        )
    return entries, last
