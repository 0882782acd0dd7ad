"""Composite topics with shard-consistent routing (the Varadhi design)."""

from app.composite.model import CompositeTopic, StorageTopic, check_partition_count
from app.composite.routing import group_hash, partition_for, route, shard_of_partition, shard_partitions

__all__ = [
    "CompositeTopic",
    "StorageTopic",
    "check_partition_count",
    "group_hash",
    "partition_for",
    "route",
    "shard_of_partition",
    "shard_partitions",
]
