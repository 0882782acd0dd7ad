"""Shard-consistent routing (the Varadhi design, "CompositeTopic").

`group_hash` is the one hash every process uses (producers, subscriptions, the Spark job):
the first 8 bytes of BLAKE2b over the UTF-8 group id, read as an unsigned big-endian
64-bit integer. It is stable across processes, machines and Python versions, unlike the
salted built-in `hash`.
"""

from __future__ import annotations

from hashlib import blake2b

__all__ = ["group_hash", "partition_for", "route", "shard_of_partition", "shard_partitions"]


def group_hash(group_id: str) -> int:
    """Stable non-negative 64-bit hash of a group id."""
    return int.from_bytes(blake2b(group_id.encode("utf-8"), digest_size=8).digest(), "big")


def route(h: int, partitions: int, k: int) -> int:
    """The seed's Router: K * h % P + (h // P) % K."""
    return k * h % partitions + (h // partitions) % k


def partition_for(group_id: str, partitions: int, k: int) -> int:
    return route(group_hash(group_id), partitions, k)


def shard_partitions(shard_id: int, shard_count: int, partitions: int) -> range:
    """Partitions [sid*P/S, (sid+1)*P/S - 1] of one storage topic owned by shard `shard_id`."""
    return range(shard_id * partitions // shard_count, (shard_id + 1) * partitions // shard_count)


def shard_of_partition(partition: int, shard_count: int, partitions: int) -> int:
    """The shard that owns `partition` under the contiguous-range assignment (the largest
    sid with sid*P//S <= partition; exact also when S does not divide P)."""
    return ((partition + 1) * shard_count - 1) // partitions
