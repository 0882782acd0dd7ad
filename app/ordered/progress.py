"""Which offsets of a partition may be committed, and which keys may run now. Pure.

Records of one partition are handed out in offset order and finish in any order (keys run
concurrently); the committable offset is the first one not finished, so a restart redelivers
only unfinished work. Per ordering key, one record runs at a time, the others wait in order.
"""

from __future__ import annotations

import base64
import binascii
from collections import deque
from collections.abc import Hashable, Iterable, KeysView
from typing import Generic, TypeVar

__all__ = [
    "PROGRESS_MAX_CHARS",
    "KeyLanes",
    "OffsetTracker",
    "decode_finished",
    "encode_finished",
    "partition_shares",
]

T = TypeVar("T")


class OffsetTracker:
    """Offsets of one partition: read (handed out) in increasing order, finished in any order.
    `finished`: offsets at or after `start` a previous owner had finished (from its commit's
    metadata); they are not handed out again, and are kept in this owner's commit metadata until
    the committed offset passes them."""

    def __init__(self, start: int, finished: Iterable[int] = ()) -> None:
        self._next = start  # the offset after the last one read
        self._open: deque[int] = deque()  # read and not finished, increasing
        self._finished: set[int] = set()  # finished, but an earlier one is still open
        self._inherited = deque(sorted(o for o in set(finished) if o >= start))  # not read yet

    def read(self, offset: int) -> bool:
        """Take the next record; False when it was finished before (do not hand it out)."""
        if offset < self._next:
            raise ValueError(f"offset {offset} read after {self._next - 1}")
        self._next = offset + 1
        inherited = self._inherited
        while inherited and inherited[0] < offset:
            inherited.popleft()  # never came (compaction, transaction markers)
        if inherited and inherited[0] == offset:
            inherited.popleft()
            if self._open:  # finished, behind an open one
                self._open.append(offset)
                self._finished.add(offset)
            return False
        self._open.append(offset)
        return True

    def finish(self, offset: int) -> None:
        if self._open and self._open[0] == offset:
            self._open.popleft()
            while self._open and self._open[0] in self._finished:
                self._finished.discard(self._open.popleft())
        else:
            self._finished.add(offset)

    @property
    def next_offset(self) -> int:
        """The offset after the last one read."""
        return self._next

    @property
    def committable(self) -> int:
        """Everything below this offset is finished (or was never there: compaction, markers)."""
        return self._open[0] if self._open else self._next

    @property
    def open(self) -> int:
        """Read and not finished."""
        return len(self._open) - len(self._finished)

    def finished_above(self) -> list[int]:
        """Offsets above `committable` known finished (this owner's and inherited), increasing."""
        return sorted(self._finished) + list(self._inherited)

    def progress(self, max_chars: int = 0) -> str:
        """The commit metadata for committing `committable` (see `encode_finished`)."""
        return encode_finished(self.committable, self.finished_above(), max_chars or PROGRESS_MAX_CHARS)


# Finished offsets above a committed offset, in the commit's metadata string (as Parallel Consumer
# keeps them): "hs1" + "r" (run lengths) or "b" (bitset) + base64 of varint(base) + the payload.
# Kafka keeps up to offset.metadata.max.bytes (4096 by default) per partition.
PROGRESS_MAX_CHARS = 3_000
_MAGIC = "hs1"
_MAX_SPAN = 1 << 24  # a damaged run length must not expand into millions of offsets


def encode_finished(base: int, finished: Iterable[int], max_chars: int = PROGRESS_MAX_CHARS) -> str:
    """`finished` (offsets >= base, increasing) as a metadata string of at most `max_chars`: the
    shorter of run lengths and a bitset; when neither fits, the one covering the longer prefix of
    offsets, cut there (the rest is redelivered after a crash, as without metadata)."""
    rel = [o - base for o in finished if o >= base]
    head = _varint(base)
    budget = (max(0, max_chars - len(_MAGIC) - 1) // 4) * 3 - len(head)  # raw bytes base64 leaves
    if not rel or budget <= 0:
        return _MAGIC + "r" + _b64(head)
    runs, runs_upto = _runs(rel, budget)
    bits, bits_upto = _bits(rel, budget)
    use_runs = (runs_upto, -len(runs)) >= (bits_upto, -len(bits))
    return _MAGIC + ("r" if use_runs else "b") + _b64(head + (runs if use_runs else bits))


def decode_finished(base: int, metadata: str | None) -> frozenset[int]:
    """The finished offsets a commit of `base` with `metadata` records; empty for anything else
    (no metadata, another writer's, another base, damaged)."""
    if not metadata or not metadata.startswith(_MAGIC) or len(metadata) < len(_MAGIC) + 1:
        return frozenset()
    kind = metadata[len(_MAGIC)]
    try:
        raw = base64.b64decode(metadata[len(_MAGIC) + 1 :], validate=True)
        at, pos = _read_varint(raw, 0)
        if at != base:
            return frozenset()
        if kind == "b":
            return frozenset(
                base + i * 8 + bit for i, byte in enumerate(raw[pos:]) for bit in range(8) if byte >> bit & 1
            )
        if kind != "r":
            return frozenset()
        out: list[int] = []
        finished = False
        while pos < len(raw):
            length, pos = _read_varint(raw, pos)
            if at + length - base > _MAX_SPAN:
                raise ValueError("run past the span a commit can hold")
            if finished:
                out.extend(range(at, at + length))
            at += length
            finished = not finished
        return frozenset(out)
    except (binascii.Error, ValueError):
        return frozenset()


def _runs(rel: list[int], budget: int) -> tuple[bytes, int]:
    """Alternating lengths (not finished, finished, ...) from the base, cut to `budget` bytes;
    and the relative offset the kept runs cover up to."""
    out = bytearray()
    at = 0
    i = 0
    while i < len(rel):
        j = i
        while j + 1 < len(rel) and rel[j + 1] == rel[j] + 1:
            j += 1
        pair = _varint(rel[i] - at) + _varint(j - i + 1)
        if len(out) + len(pair) > budget:
            break
        out += pair
        at = rel[j] + 1
        i = j + 1
    return bytes(out), at


def _bits(rel: list[int], budget: int) -> tuple[bytes, int]:
    size = min(rel[-1] // 8 + 1, budget)
    out = bytearray(size)
    for r in rel:
        if r >= size * 8:
            break
        out[r // 8] |= 1 << (r % 8)
    return bytes(out), size * 8


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(raw: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(raw) or shift > 63:
            raise ValueError("truncated varint")
        byte = raw[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, pos


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


K = TypeVar("K", bound=Hashable)


class KeyLanes(Generic[K, T]):
    """One lane per ordering key: `add` says whether the item may start now (its lane was idle),
    `done` hands out the next item waiting in that lane (or None: the lane is idle again)."""

    def __init__(self) -> None:
        # a busy lane: the items waiting behind its running one (None: none, no deque made yet)
        self._waiting: dict[K, deque[T] | None] = {}

    def add(self, key: K, item: T) -> bool:
        waiting = self._waiting
        if key not in waiting:
            waiting[key] = None
            return True
        lane = waiting[key]
        if lane is None:
            waiting[key] = deque((item,))
        else:
            lane.append(item)
        return False

    def done(self, key: K) -> T | None:
        lane = self._waiting[key]
        if lane:
            return lane.popleft()
        del self._waiting[key]
        return None

    def waiting(self, key: K) -> int | None:
        """None when the lane is idle, else how many items wait behind its running one."""
        if key not in self._waiting:
            return None
        return len(self._waiting[key] or ())

    @property
    def busy_keys(self) -> KeysView[K]:
        """The keys of busy lanes, a live view (`key in busy_keys`: is its lane busy?)."""
        return self._waiting.keys()

    def drop(self, keys: set[K]) -> int:
        """Forget these lanes (their partition was revoked); returns the items dropped."""
        dropped = 0
        for key in keys & self._waiting.keys():
            dropped += len(self._waiting.pop(key) or ())
        return dropped

    def any_of(self, partitions: set[int]) -> bool:
        """Whether a lane of these partitions is busy (keys are `(partition, key)` tuples)."""
        return any(key[0] in partitions for key in self._waiting)  # type: ignore[index]

    @property
    def busy(self) -> int:
        return len(self._waiting)


def partition_shares(total: int, partitions: int) -> list[int]:
    """A global in-flight limit split over partitions: shares sum to `total` exactly, so copies
    owning disjoint partitions never exceed it together."""
    base, extra = divmod(total, partitions)
    return [base + (1 if p < extra else 0) for p in range(partitions)]
