"""What a Cosmos DB error answer means for the caller: one typed hubstream error per answer.

Trying again may work after a throttle (429, with the wait Cosmos DB asks for in
`x-ms-retry-after-ms`), a timeout (408), a gone or retry-with answer (410, 449), a server error
(5xx), and also after answers an operator fixes (a wrong key, 401/403): those are
`ServiceUnavailable`, so nothing valid is dead-lettered while the store is unwell. A request that
no retry will change (400, a document over the item size limit: 413) is `StoreRefused`."""

from __future__ import annotations

from azure.cosmos.exceptions import CosmosHttpResponseError

from app.errors import HubstreamError, ServiceUnavailable

__all__ = ["NOT_RETRIED", "StoreRefused", "cosmos_failure"]

NOT_RETRIED = frozenset({400, 413})
_RETRY_AFTER_MS = "x-ms-retry-after-ms"


class StoreRefused(HubstreamError):
    """Cosmos DB refused a write that trying again will not change (malformed, or too large)."""

    http_status = 502


def cosmos_failure(exc: CosmosHttpResponseError, what: str) -> HubstreamError:
    """The error to raise for `exc`, an answer to the request `what` (e.g. "create on ledgers")."""
    status = int(exc.status_code or 0)
    sub = f"/{exc.sub_status}" if exc.sub_status else ""
    said = f"Cosmos DB answered {status}{sub} to {what}"
    if status in NOT_RETRIED:
        return StoreRefused(f"{said}: {_first_line(exc)}")
    return ServiceUnavailable(f"{said}; retry", retry_after_s=_retry_after_s(exc))


def _retry_after_s(exc: CosmosHttpResponseError) -> float | None:
    try:
        return float((exc.headers or {})[_RETRY_AFTER_MS]) / 1000
    except (KeyError, TypeError, ValueError):
        return None


def _first_line(exc: CosmosHttpResponseError) -> str:
    lines = [line.strip() for line in str(exc.message or "").splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("Status code:")), "")[:200]
