"""Bounded maps of what this process last saw, least recently used going first.

`Recent[T, Tag]` keeps a value and a tag per key. `KnownDocs[T]` is the one the hub's save and
peek use: the last version of a document this process read or wrote, tagged with its etag. A
compare-and-swap starts from it instead of a read: a write under If-Match with a stale etag is
refused (412), and the writer then reads afresh, so a stale entry costs one refused write, never
a lost update."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["KnownDocs", "Recent"]

T = TypeVar("T")
Tag = TypeVar("Tag")


class Recent(Generic[T, Tag]):
    def __init__(self, max_entries: int = 20_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[T, Tag]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> tuple[T, Tag] | None:
        known = self._entries.get(key)
        if known is not None:
            self._entries.move_to_end(key)
        return known

    def put(self, key: str, value: T, tag: Tag) -> None:
        self._entries[key] = (value, tag)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def drop(self, key: str) -> None:
        self._entries.pop(key, None)


KnownDocs = Recent[T, str]
