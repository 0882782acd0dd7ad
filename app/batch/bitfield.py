"""Bitfields over bytes: bit i of a group is bit (i % 8) of byte (i // 8); 1 = item pending.

A group of `size` items is `ceil(size / 8)` bytes with every used bit set and the padding
bits zero, so a group is finished exactly when all of its bytes are zero.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["clear_bits", "count_set", "filled", "is_empty", "is_set", "set_bits"]


def filled(size: int) -> bytearray:
    """A bitfield of `size` items, all pending."""
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    full, rest = divmod(size, 8)
    buf = bytearray(b"\xff" * full)
    if rest:
        buf.append((1 << rest) - 1)
    return buf


def clear_bits(buf: bytearray, indexes: Iterable[int]) -> int:
    """Clear the bits at `indexes`; return how many were set before (repeats count once)."""
    cleared = 0
    for index in indexes:
        byte, mask = index >> 3, 1 << (index & 7)
        if buf[byte] & mask:
            buf[byte] ^= mask
            cleared += 1
    return cleared


def set_bits(buf: bytearray, indexes: Iterable[int]) -> int:
    """Set the bits at `indexes`; return how many were clear before (repeats count once)."""
    newly = 0
    for index in indexes:
        byte, mask = index >> 3, 1 << (index & 7)
        if not buf[byte] & mask:
            buf[byte] |= mask
            newly += 1
    return newly


def is_set(buf: bytes | bytearray, index: int) -> bool:
    return bool(buf[index >> 3] & (1 << (index & 7)))


def count_set(buf: bytes | bytearray) -> int:
    return int.from_bytes(buf, "little").bit_count()


def is_empty(buf: bytes | bytearray) -> bool:
    return not any(buf)
