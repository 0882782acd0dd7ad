from __future__ import annotations

from collections.abc import Iterator

import pytest


class MemoryStore:
    """A dict behind the BatchStore port (keys scanned in byte order, like RocksDB)."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.writes = 0

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.writes += 1
        self.data[key] = bytes(value)

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(self.data):
            if key.startswith(prefix):
                yield key, self.data[key]


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()
