"""confluent-kafka consumers of three kinds, each site naming the kind it builds:

- `group_member`: joins its group, subscribes, commits its positions by hand;
- `partition_reader`: assigns its own partitions at positions of its choosing, commits nothing;
- `offset_client`: never reads records; asks for committed offsets, watermarks, offsets by time
  or topic metadata, or commits offsets it is given.

The `*_config` functions give the configuration each builds; `overrides` (librdkafka options)
win over the profile's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from confluent_kafka import Consumer

from app.kafka_security import client_config

__all__ = [
    "Reset",
    "group_member",
    "member_config",
    "offset_client",
    "offsets_config",
    "partition_reader",
    "reader_config",
]

Reset = Literal["earliest", "latest"]
Overrides = Mapping[str, Any] | None


def _config(
    bootstrap: str, group_id: str, profile: Mapping[str, Any], overrides: Overrides
) -> dict[str, Any]:
    conf = client_config(
        bootstrap,
        **{
            # librdkafka wants a group even where none is joined: it names the offsets committed or looked up.
            "group.id": group_id,
            # Commits are the caller's, of positions it has finished with; none behind its back.
            "enable.auto.commit": False,
        },
    )
    conf.update(profile)
    conf.update(overrides or {})
    return conf


def member_config(
    bootstrap: str,
    group_id: str,
    *,
    client_id: str | None = None,
    reset: Reset = "earliest",
    overrides: Overrides = None,
) -> dict[str, Any]:
    profile: dict[str, Any] = {"auto.offset.reset": reset}  # where a partition never committed starts
    if client_id is not None:
        profile["client.id"] = client_id
    return _config(bootstrap, group_id, profile, overrides)


def reader_config(
    bootstrap: str,
    group_id: str,
    *,
    reset: Reset = "earliest",
    partition_eof: bool = False,
    overrides: Overrides = None,
) -> dict[str, Any]:
    profile = {
        # Positions are assigned, so this only moves one outside the log: a read "from 0" of a
        # topic whose oldest records retention deleted starts at the oldest kept, instead of
        # librdkafka's default "latest", which would skip everything to the end.
        "auto.offset.reset": reset,
        "enable.partition.eof": partition_eof,  # a _PARTITION_EOF event when a read reaches the end
    }
    return _config(bootstrap, group_id, profile, overrides)


def offsets_config(bootstrap: str, group_id: str, *, overrides: Overrides = None) -> dict[str, Any]:
    return _config(bootstrap, group_id, {}, overrides)


def group_member(
    bootstrap: str,
    group_id: str,
    *,
    client_id: str | None = None,
    reset: Reset = "earliest",
    overrides: Overrides = None,
) -> Consumer:
    """A member of `group_id` that subscribes and commits by hand."""
    return Consumer(member_config(bootstrap, group_id, client_id=client_id, reset=reset, overrides=overrides))


def partition_reader(
    bootstrap: str,
    group_id: str,
    *,
    reset: Reset = "earliest",
    partition_eof: bool = False,
    overrides: Overrides = None,
) -> Consumer:
    """A consumer that is assigned partitions (no group membership) and commits nothing."""
    return Consumer(
        reader_config(bootstrap, group_id, reset=reset, partition_eof=partition_eof, overrides=overrides)
    )


def offset_client(bootstrap: str, group_id: str, *, overrides: Overrides = None) -> Consumer:
    """A consumer that reads no records: offset and metadata lookups, commits of given offsets."""
    return Consumer(offsets_config(bootstrap, group_id, overrides=overrides))
