"""HTTP client of the batch API (`BatchClient`, blocking: jobs, CLI, Spark driver), on httpx with
stamina's retries (exponential backoff with jitter). It retries connection errors, 503s (a partition
recovering or moving between workers) and other 5xx answers until `retry_for_s` has passed; then,
and for any other error at once, it raises the matching HubstreamError (400 InvalidInput, 404
BatchNotFound, 409 BatchClosed, 503 PartitionNotReady).

Retrying is safe for every call: acks, close and get are idempotent; add-items, incr and decr carry
an Idempotency-Key chosen once per call, so a retry after a lost answer is answered as the first
try was instead of adding again; a create whose answer was lost leaves an empty batch the reaper
removes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import stamina

from app.batch.errors import BatchClosed, BatchNotFound, PartitionNotReady
from app.batch.ids import ItemGroup, expand_item_ids
from app.errors import HubstreamError, InvalidInput
from app.settings import is_loopback

log = logging.getLogger(__name__)


def _log_retry(details: stamina.instrumentation.RetryDetails) -> None:
    log.info(
        "%s: retry %d in %.1f s after %s",
        details.name,
        details.retry_num,
        details.wait_for,
        details.caused_by,
    )


# One line per retry in our own log, instead of stamina's default warning on stderr (which a job
# polling through a worker restart printed hundreds of times).
stamina.instrumentation.set_on_retry_hooks([_log_retry])

__all__ = ["ACK_IDS_PER_REQUEST", "BatchClient", "Call", "calls"]

ACK_IDS_PER_REQUEST = 10_000
API = "/api/v1/batch"


class Call:
    """One request: method, path (with query), JSON body."""

    def __init__(self, method: str, path: str, body: Any = None, needs_key: bool = False) -> None:
        self.method, self.path, self.body = method, API + path, body
        # One key per call, the same on each of its retries: the server answers a replay as the first.
        self.headers = {"Idempotency-Key": str(uuid.uuid4())} if needs_key else {}


class calls:
    @staticmethod
    def create_exact(user_key: str | None) -> Call:
        return Call("POST", "/exact", {"userKey": user_key} if user_key is not None else {})

    @staticmethod
    def add_items(batch_id: int, items: int) -> Call:
        return Call("POST", "/exact/items", {"batchId": batch_id, "items": items}, needs_key=True)

    @staticmethod
    def ack(item_ids: list[str]) -> Call:
        return Call("POST", "/exact/items/ack", {"batchItemIds": item_ids})

    @staticmethod
    def close_exact(batch_id: int) -> Call:
        return Call("POST", f"/exact/close/{batch_id}")

    @staticmethod
    def get_exact(batch_id: int) -> Call:
        return Call("GET", f"/exact/{batch_id}")

    @staticmethod
    def delete_expired(closed: bool, since: datetime) -> Call:
        return Call("DELETE", f"/exact/{'closed' if closed else 'open'}?since={since.isoformat()}")

    @staticmethod
    def create_estimated(batch_size: int, user_key: str | None) -> Call:
        body: dict[str, Any] = {"batchSize": batch_size}
        if user_key is not None:
            body["userKey"] = user_key
        return Call("POST", "/estimated", body)

    @staticmethod
    def decr(acks: dict[str, int]) -> Call:
        body = {"acks": [{"batchId": b, "by": n} for b, n in acks.items()]}
        return Call("POST", "/estimated/decr", body, needs_key=True)

    @staticmethod
    def incr(batch_id: str, by: int) -> Call:
        return Call("POST", f"/estimated/{batch_id}/incr?by={by}", needs_key=True)

    @staticmethod
    def close_estimated(batch_id: str) -> Call:
        return Call("POST", f"/estimated/{batch_id}/close")

    @staticmethod
    def get_estimated(batch_id: str) -> Call:
        return Call("GET", f"/estimated/{batch_id}")

    @staticmethod
    def delete_estimated(batch_id: str) -> Call:
        return Call("DELETE", f"/estimated/{batch_id}")


def _raise_for(status: int, data: Any) -> None:
    reason = data.get("reason", data) if isinstance(data, dict) else data
    error: type[HubstreamError] = {
        400: InvalidInput,
        404: BatchNotFound,
        409: BatchClosed,
        503: PartitionNotReady,
    }.get(status, HubstreamError)
    raise error(f"batch API answered {status}: {reason}")


def _chunks(item_ids: Iterable[str]) -> Iterable[list[str]]:
    chunk: list[str] = []
    for item_id in item_ids:
        chunk.append(item_id)
        if len(chunk) == ACK_IDS_PER_REQUEST:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Answered(Exception):
    """A non-200 answer; `retriable` when the server may answer differently soon (5xx)."""

    def __init__(self, status: int, data: Any) -> None:
        super().__init__(status)
        self.status, self.data = status, data
        self.retriable = status >= 500 and status != 501


def _retriable(exc: Exception) -> bool:
    return isinstance(exc, httpx.TransportError) or (isinstance(exc, _Answered) and exc.retriable)


class BatchClient:
    def __init__(
        self, base_url: str, timeout_s: float = 30.0, retry_for_s: float = 30.0, token: str | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_for_s = retry_for_s
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # A worker on loopback is never reached through HTTP_PROXY: the proxy would see the token.
        direct = is_loopback(urlsplit(self.base_url).hostname or "")
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout_s, trust_env=not direct
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BatchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, call: Call) -> Any:
        content = orjson.dumps(call.body) if call.body is not None else None
        try:
            for attempt in stamina.retry_context(
                on=_retriable,
                attempts=None,
                timeout=self.retry_for_s,
                wait_initial=0.1,
                wait_max=1.0,
                wait_jitter=0.2,
            ):
                with attempt:
                    return self._once(call, content)
        except _Answered as exc:
            _raise_for(exc.status, exc.data)
        except httpx.TransportError as exc:
            raise PartitionNotReady(f"batch API at {self.base_url} unreachable: {exc!r}") from exc
        raise AssertionError("unreachable: stamina re-raises the last error")  # pragma: no cover

    def _once(self, call: Call, content: bytes | None) -> Any:
        response = self._http.request(call.method, call.path, content=content, headers=call.headers)
        try:
            data = orjson.loads(response.content) if response.content else {}
        except orjson.JSONDecodeError:  # e.g. a proxy's HTML error page
            data = {"reason": response.text[:200]}
        if response.status_code != 200:
            raise _Answered(response.status_code, data)
        return data

    def create_exact(self, user_key: str | None = None) -> int:
        batch_id: int = self.send(calls.create_exact(user_key))["batchId"]
        return batch_id

    def add_items(self, batch_id: int, items: int) -> list[ItemGroup]:
        groups = self.send(calls.add_items(batch_id, items))["batchItemGroupIds"]
        return [ItemGroup(g["id"], g["upto"]) for g in groups]

    def add_item_ids(self, batch_id: int, items: int) -> list[str]:
        """Add `items` and return their expanded item ids."""
        return list(expand_item_ids(batch_id, self.add_items(batch_id, items)))

    def ack(self, item_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Ack items (sent ACK_IDS_PER_REQUEST at a time); the completions these calls caused."""
        completions: list[dict[str, Any]] = []
        for chunk in _chunks(item_ids):
            completions.extend(self.send(calls.ack(chunk))["batchCompletions"])
        return completions

    def close_exact(self, batch_id: int) -> bool:
        return bool(self.send(calls.close_exact(batch_id))["isComplete"])

    def get_exact(self, batch_id: int) -> dict[str, Any]:
        result: dict[str, Any] = self.send(calls.get_exact(batch_id))
        return result

    def delete_expired(self, closed: bool, since: datetime) -> dict[str, int]:
        result: dict[str, int] = self.send(calls.delete_expired(closed, since))
        return result

    def create_estimated(self, batch_size: int, user_key: str | None = None) -> str:
        batch_id: str = self.send(calls.create_estimated(batch_size, user_key))["batchId"]
        return batch_id

    def decr(self, acks: dict[str, int]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = self.send(calls.decr(acks))["results"]
        return results

    def incr(self, batch_id: str, by: int = 1) -> dict[str, Any]:
        result: dict[str, Any] = self.send(calls.incr(batch_id, by))
        return result

    def close_estimated(self, batch_id: str) -> bool:
        return bool(self.send(calls.close_estimated(batch_id))["isComplete"])

    def get_estimated(self, batch_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.send(calls.get_estimated(batch_id))
        return result

    def delete_estimated(self, batch_id: str) -> None:
        self.send(calls.delete_estimated(batch_id))
