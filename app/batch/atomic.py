"""All-or-nothing writes to one table partition, on top of a changelog that has no transactions.

An operation (ack, add items, create...) changes several keys: item-group bitfields and the batch
header. Each key is its own changelog record, so a worker killed between two of them would leave a
restored partition with the bits cleared and the header still counting them (the batch never
completes), or with item groups the header does not know. `AtomicWrites` buffers an operation's
writes; `commit` writes them as one intent record under `INTENT_KEY` first, then each key, then
removes the intent. The changelog keeps a prefix of that sequence in order, so whoever restores the
partition sees either nothing of the operation, or its whole intent: `replay_intent` (run before
every operation) finishes it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager

from app.batch.errors import OperationTooLarge
from app.batch.model import BatchStore
from app.crashpoints import crash_point

__all__ = [
    "INTENT_KEY",
    "MAX_INTENT_BYTES",
    "AtomicWrites",
    "atomically",
    "decode_intent",
    "encode_intent",
    "replay_intent",
]

INTENT_KEY = b"w/intent"
# The intent is one changelog record: Faust's producer refuses a record over 1,000,000 bytes (its
# producer_max_request_size), and so does a broker at Kafka's default message.max.bytes. Refused
# there, the write would fail after the operation was answered (and Faust stops the worker).
MAX_INTENT_BYTES = 900_000
_DELETED = 0xFFFFFFFF
_LEN = struct.Struct("<I")


def encode_intent(writes: dict[bytes, bytes | None]) -> bytes:
    parts: list[bytes] = []
    for key, value in writes.items():
        parts += [_LEN.pack(len(key)), key]
        parts += [_LEN.pack(_DELETED)] if value is None else [_LEN.pack(len(value)), value]
    return b"".join(parts)


def decode_intent(raw: bytes) -> dict[bytes, bytes | None]:
    writes: dict[bytes, bytes | None] = {}
    at = 0
    while at < len(raw):
        (size,) = _LEN.unpack_from(raw, at)
        key = raw[at + 4 : at + 4 + size]
        at += 4 + size
        (size,) = _LEN.unpack_from(raw, at)
        at += 4
        if size == _DELETED:
            writes[key] = None
        else:
            writes[key] = raw[at : at + size]
            at += size
    return writes


def _apply(store: BatchStore, writes: dict[bytes, bytes | None]) -> None:
    for key, value in writes.items():
        if value is None:
            store.delete(key)
        else:
            store.put(key, value)


def replay_intent(store: BatchStore) -> bool:
    """Finish an operation a crash interrupted after its intent was written; whether there was one."""
    raw = store.get(INTENT_KEY)
    if raw is None:
        return False
    _apply(store, decode_intent(raw))
    store.delete(INTENT_KEY)
    return True


class AtomicWrites:
    """A `BatchStore` whose writes are buffered (reads see them) until `commit` writes them all."""

    def __init__(self, store: BatchStore) -> None:
        self.store = store
        self.writes: dict[bytes, bytes | None] = {}

    def get(self, key: bytes) -> bytes | None:
        if key in self.writes:
            return self.writes[key]
        return self.store.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.writes[key] = bytes(value)

    def delete(self, key: bytes) -> None:
        self.writes[key] = None

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        merged = dict(self.store.scan(prefix))
        for key, value in self.writes.items():
            if key.startswith(prefix):
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
        yield from sorted(merged.items())

    def commit(self) -> None:
        """Write everything buffered; a single key needs no intent (one record is atomic)."""
        writes, self.writes = self.writes, {}
        if len(writes) > 1:
            intent = encode_intent(writes)
            if len(intent) > MAX_INTENT_BYTES:
                raise OperationTooLarge(
                    f"the operation writes {len(intent)} bytes at once; one changelog record holds"
                    f" {MAX_INTENT_BYTES}: nothing was written"
                )
            self.store.put(INTENT_KEY, intent)
            crash_point("batch.table.intent_written")
        _apply(self.store, writes)
        if len(writes) > 1:
            self.store.delete(INTENT_KEY)


@contextmanager
def atomically(store: BatchStore) -> Iterator[BatchStore]:
    """One operation on `store`, all or nothing: an interrupted earlier one is finished first, an
    exception out of the block writes nothing, and the block's writes land together."""
    replay_intent(store)
    writes = AtomicWrites(store)
    yield writes
    writes.commit()
