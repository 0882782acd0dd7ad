"""Cosmos DB's error answers to the hub's writes as typed errors: before, a create, replace or
delete that Cosmos DB answered with anything but 409/412/404 reached HTTP as a bare 500, where
app/hub/ports.py promises a retriable 503. Now a throttle is a 503 whose Retry-After is the wait
Cosmos DB asked for, a server error a 503, and a request no retry changes (400, 413) a
`StoreRefused` that is not retried."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from azure.cosmos.exceptions import CosmosHttpResponseError

from app.cosmos.failures import StoreRefused, cosmos_failure
from app.errors import ServiceUnavailable
from app.hub.cosmos_io import HubContainers
from app.web.responses import error_response


class _Answer:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers
        self.reason = "refused"

    def text(self) -> str:
        return ""


def answered(status: int, **headers: str) -> CosmosHttpResponseError:
    return CosmosHttpResponseError(  # type: ignore[no-untyped-call]
        status_code=status, message="refused", response=_Answer(status, headers)
    )


class _Refusing:
    """A container whose every call Cosmos DB answers with `error`."""

    id = "ledgers"

    def __init__(self, error: CosmosHttpResponseError) -> None:
        self.error = error

    async def create_item(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def replace_item(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def delete_item(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def read_item(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


def test_a_throttle_is_retriable_after_the_wait_cosmos_asked_for() -> None:
    failure = cosmos_failure(answered(429, **{"x-ms-retry-after-ms": "2500"}), "a create on ledgers")
    assert isinstance(failure, ServiceUnavailable) and failure.retriable
    assert failure.retry_after_s == 2.5
    response = error_response(failure)
    assert response.status == 503 and response.headers["Retry-After"] == "3"
    assert orjson.loads(response.body)["error"] == "ServiceUnavailable"  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [408, 410, 449, 500, 503, 401, 403])
def test_answers_a_retry_may_change_are_a_503_with_retry_after(status: int) -> None:
    failure = cosmos_failure(answered(status), "a replace on ledgers")
    assert isinstance(failure, ServiceUnavailable) and failure.retriable
    assert f"answered {status}" in str(failure) and "ledgers" in str(failure)
    response = error_response(failure)
    assert response.status == 503 and response.headers["Retry-After"] == "1"


@pytest.mark.parametrize("status", [400, 413])
def test_a_request_no_retry_changes_is_refused_and_not_retried(status: int) -> None:
    failure = cosmos_failure(answered(status), "a create on events-0")
    assert isinstance(failure, StoreRefused) and not failure.retriable
    response = error_response(failure)
    assert response.status == 502 and "Retry-After" not in response.headers


@pytest.mark.parametrize("operation", ["create", "replace", "delete_if_match", "delete", "read"])
async def test_every_hub_write_and_read_raises_the_typed_error(operation: str) -> None:
    container: Any = _Refusing(answered(500))
    io = HubContainers([container], container, container, container, container)
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "create": lambda: io.create(container, {"id": "x"}),
        "replace": lambda: io.replace_if_match(container, {"id": "x"}, "etag"),
        "delete_if_match": lambda: io.delete_if_match(container, "x", "pk", "etag"),
        "delete": lambda: io.delete(container, "x", "pk"),
        "read": lambda: io.read(container, "x", "pk"),
    }
    with pytest.raises(ServiceUnavailable, match=r"answered 500 to a .* on ledgers"):
        await calls[operation]()
