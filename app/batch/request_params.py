"""What the batch API reads from a request besides its JSON body: a batch id, the caller's
Idempotency-Key header and the `since` query parameter, each checked (InvalidInput, 400)."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from app.errors import InvalidInput
from app.web.responses import check_query

__all__ = [
    "IDEMPOTENCY_HEADER",
    "MAX_BATCH_ID_DIGITS",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "_batch_id",
    "_request_id",
    "_since_ms",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY_CHARS = 128
MAX_BATCH_ID_DIGITS = 20  # an unsigned 64-bit integer


def _batch_id(raw: object) -> int:
    text = str(raw)
    if (
        isinstance(raw, bool)
        or not isinstance(raw, int | str)
        or not (text.isascii() and text.isdigit() and len(text) <= MAX_BATCH_ID_DIGITS)
    ):
        raise InvalidInput(
            f"batchId must be a non-negative integer of at most {MAX_BATCH_ID_DIGITS} digits, got {raw!r:.80}"
        )
    return int(text)


def _request_id(request: web.Request) -> str | None:
    """The caller's Idempotency-Key: a retry carrying it is answered as the first call was."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if not (0 < len(key) <= MAX_IDEMPOTENCY_KEY_CHARS and key.isascii() and key.isprintable()):
        raise InvalidInput(
            f"{IDEMPOTENCY_HEADER} must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} printable ASCII characters"
        )
    return key


def _since_ms(request: web.Request) -> int:
    check_query(request, "since")
    raw = request.query.get("since")
    if not raw:
        raise InvalidInput("query parameter since=<ISO 8601 time> is required")
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError as exc:
        raise InvalidInput(f"since={raw!r} is not an ISO 8601 time") from exc
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)
