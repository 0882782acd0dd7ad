"""Finding a subscription's RQ/DLQ copies whose group state does not know them (the rule that
adopts them is the engine's, `app.ordered.orphans`).

Copies are recognised as this subscription's by their incarnation header (RQ/DLQ topics outlive a
deleted subscription of the same name). Copies fed from an older RQ storage topic after a shard
change are written by the shard that read them, not the one that owns their group, so they are
not adopted. Each carries, in its fed header, the place its group's owner wrote it (storage topic
index, offset), and the owner's rules judge it there (`fed_place`): its group's state records RQ
copies by those places, so a copy fed twice (the feeder cut and restarted) is skipped as already
read, and the group's later messages wait until its last copy written before the change is read.
"""

from __future__ import annotations

from app.ordered.errors import UndecodableMessage
from app.ordered.orphans import Copy, Queue
from app.ordered.records import Headers, decode_group_id, decode_internal, header_map
from app.ordered.rules import MessageState, Position

__all__ = [
    "FED_HEADER",
    "INCARNATION_HEADER",
    "copy_of",
    "fed_headers",
    "fed_place",
]

INCARNATION_HEADER = "hs-incarnation"
FED_HEADER = "hs-fed"  # "<storage topic index>:<offset>" where the group's owner wrote the copy


def copy_of(
    queue: Queue,
    key: bytes | None,
    headers: Headers | None,
    at: tuple[int, int],
    incarnation: str,
    max_group_id_bytes: int,
) -> Copy | None:
    """The copy a record at `at` (storage topic index, offset) holds, or None when it is not one
    this subscription's shard wrote for a group it owns (another incarnation's, fed, undecodable)."""
    found = header_map(headers)
    if found.get(INCARNATION_HEADER) != incarnation.encode() or FED_HEADER in found:
        return None
    try:
        group = decode_group_id(key, max_group_id_bytes)
        meta = decode_internal(headers)
    except UndecodableMessage:
        return None
    return Copy(queue, group, meta, MessageState.at(meta.main, at))


def fed_headers(headers: Headers | None, at: Position) -> dict[str, bytes]:
    """The headers of an RQ record at `at` fed into a newer RQ storage topic: a record fed before
    keeps the place it was first fed from."""
    out = header_map(headers)
    out.setdefault(FED_HEADER, f"{at[0]}:{at[1]}".encode())
    return out


def fed_place(headers: Headers | None) -> Position | None:
    """Where the group's owner wrote a fed copy; None for a copy that was not fed (or was fed by a
    version that did not record the place: it is judged where it is read)."""
    value = header_map(headers).get(FED_HEADER)
    if not value:
        return None
    try:
        idx, offset = (int(x) for x in value.decode().split(":"))
    except (ValueError, UnicodeDecodeError):
        return None
    return (idx, offset)
