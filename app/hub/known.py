"""The last version of a document this process read or wrote, with its etag, bounded (least
recently used goes first). The hub's save starts a compare-and-swap from it instead of a read:
a write under If-Match with a stale etag is refused (412), and the writer then reads afresh, so a
stale entry costs one refused write, never a lost update."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["KnownDocs"]

T = TypeVar("T")


class KnownDocs(Generic[T]):
    def __init__(self, max_entries: int = 20_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._docs: OrderedDict[str, tuple[T, str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._docs)

    def get(self, key: str) -> tuple[T, str] | None:
        known = self._docs.get(key)
        if known is not None:
            self._docs.move_to_end(key)
        return known

    def put(self, key: str, value: T, etag: str) -> None:
        self._docs[key] = (value, etag)
        self._docs.move_to_end(key)
        while len(self._docs) > self.max_entries:
            self._docs.popitem(last=False)

    def drop(self, key: str) -> None:
        self._docs.pop(key, None)
