"""One worker thread per sink, so a sink's blocking client (pymysql, confluent-kafka's flush, file
writes and fsync) stays off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["_Threaded"]

T = TypeVar("T")


class _Threaded:
    """One worker thread per sink: blocking clients stay off the event loop."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=False)
