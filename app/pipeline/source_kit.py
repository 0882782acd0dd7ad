"""What every pipeline source uses: blocking client calls on one thread, JSON-safe column values."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any, TypeVar

__all__ = ["Threaded", "json_value", "now_ms"]

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
    return value


class Threaded:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pipeline-source")

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def close(self) -> None:
        self._executor.shutdown(wait=False)
