"""The headers a retry or dead-letter copy carries (Varadhi's RQ/DLQ records): the original key,
payload and user headers, plus `hs-*` headers saying where it came from in the main topic, how many
attempts failed, when it is due, and why it failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.ordered.errors import UndecodableMessage
from app.ordered.rules import Position

__all__ = [
    "PREFIX",
    "FailureInfo",
    "Headers",
    "InternalMeta",
    "decode_group_id",
    "decode_internal",
    "encode_internal",
    "header_map",
    "message_id_for",
    "user_headers",
]

PREFIX = "hs-"
# A header may have no value (Kafka allows null): every reader here takes it as empty.
Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class FailureInfo:
    error_class: str
    error: str
    source: str  # "topic[partition]@offset" where the failing copy was read
    failed_ms: int
    reason: str  # failed | follows-blocked-group | undecodable | replay-failed | rq-refused | dlq-refused


@dataclass(frozen=True, slots=True)
class InternalMeta:
    main: Position
    main_partition: int
    message_id: str
    failed_attempts: int
    due_ms: int
    replay: bool = False
    failure: FailureInfo | None = None


def message_id_for(main: Position, partition: int) -> str:
    return f"{main[0]}-{partition}-{main[1]}"


def header_map(headers: Headers | None) -> dict[str, bytes]:
    """The headers by name (the last of a repeated name), a null value as empty."""
    return {k: v or b"" for k, v in headers or ()}


def user_headers(headers: Headers | None) -> list[tuple[str, bytes]]:
    """The headers that are not hubstream's own, in order, a null value as empty."""
    return [(k, v or b"") for k, v in headers or () if not k.startswith(PREFIX)]


def encode_internal(meta: InternalMeta, original: Headers | None) -> list[tuple[str, bytes]]:
    out = user_headers(original)
    out += [
        ("hs-main", f"{meta.main[0]}:{meta.main_partition}:{meta.main[1]}".encode()),
        ("hs-message-id", meta.message_id.encode()),
        ("hs-failed-attempts", str(meta.failed_attempts).encode()),
        ("hs-due-ms", str(meta.due_ms).encode()),
    ]
    if meta.replay:
        out.append(("hs-replay", b"1"))
    if meta.failure is not None:
        f = meta.failure
        out += [
            ("hs-error-class", f.error_class.encode()),
            ("hs-error", f.error[:2000].encode("utf-8", "replace")),
            ("hs-source", f.source.encode()),
            ("hs-failed-ms", str(f.failed_ms).encode()),
            ("hs-reason", f.reason.encode()),
        ]
    return out


def decode_internal(headers: Headers | None) -> InternalMeta:
    """Parse the hs-* headers of an RQ/DLQ record; UndecodableMessage when they are missing or bad."""
    h = {k: v for k, v in header_map(headers).items() if k.startswith(PREFIX)}
    try:
        idx, partition, offset = (int(x) for x in h["hs-main"].decode().split(":"))
        failure = None
        if "hs-error-class" in h:
            failure = FailureInfo(
                error_class=h["hs-error-class"].decode(),
                error=h.get("hs-error", b"").decode("utf-8", "replace"),
                source=h.get("hs-source", b"").decode(),
                failed_ms=int(h.get("hs-failed-ms", b"0")),
                reason=h.get("hs-reason", b"failed").decode(),
            )
        return InternalMeta(
            main=(idx, offset),
            main_partition=partition,
            message_id=h["hs-message-id"].decode(),
            failed_attempts=int(h["hs-failed-attempts"]),
            due_ms=int(h["hs-due-ms"]),
            replay=h.get("hs-replay") == b"1",
            failure=failure,
        )
    except (KeyError, ValueError, UnicodeDecodeError) as exc:
        raise UndecodableMessage(f"internal record headers are missing or malformed: {exc!r}") from exc


def decode_group_id(key: bytes | None, max_bytes: int) -> str:
    if not key:
        raise UndecodableMessage("record has no key (group id)")
    if len(key) > max_bytes:
        raise UndecodableMessage(f"group id longer than {max_bytes} bytes")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableMessage(f"group id is not UTF-8: {exc}") from exc
