"""Bad requests get a JSON 4xx, never a 500: aiohttp's own errors rendered as JSON, non-UTF-8
Authorization headers, and batch ids only str.isdigit accepts (no I/O: mocked requests)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from app.batch.request_params import _batch_id
from app.errors import InvalidInput
from app.hub.web import actor_from_request
from app.settings import Settings
from app.web.responses import Unauthorized, json_errors, require_admin
from app.web.security import admin_middleware

# What aiohttp hands a view for header bytes that are not UTF-8 (decoded with surrogateescape).
UNDECODABLE_BEARER = "Bearer " + b"\xff\xfe".decode("utf-8", "surrogateescape")


def _request(method: str = "GET", path: str = "/x") -> web.Request:
    return make_mocked_request(method, path)


def _undecodable_bearer_request(method: str, path: str) -> web.Request:
    """Only what the auth checks read: make_mocked_request cannot carry undecodable header bytes."""
    return cast(
        web.Request,
        SimpleNamespace(method=method, path=path, headers=CIMultiDict(Authorization=UNDECODABLE_BEARER)),
    )


def _body(response: web.StreamResponse) -> dict[str, str]:
    assert isinstance(response, web.Response) and response.body is not None
    assert response.content_type == "application/json"
    body = orjson.loads(bytes(response.body))  # type: ignore[arg-type]
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize(
    ("raised", "status", "error", "reason"),
    [
        (web.HTTPNotFound(), 404, "NotFound", "Not Found: POST /api/v1/batch/exact/1/2"),
        (
            web.HTTPRequestEntityTooLarge(max_size=1048576, actual_size=1048577),
            413,
            "RequestEntityTooLarge",
            "Maximum request body size 1048576 exceeded",
        ),
    ],
)
async def test_aiohttp_errors_are_rendered_as_json(
    raised: web.HTTPException, status: int, error: str, reason: str
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise raised

    response = await json_errors(_request("POST", "/api/v1/batch/exact/1/2"), handler)
    body = _body(response)
    assert response.status == status and body["error"] == error and body["reason"].startswith(reason)


async def test_json_errors_leaves_answers_and_redirects_alone() -> None:
    async def ok(request: web.Request) -> web.StreamResponse:
        return web.Response(text="fine")

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/elsewhere")

    assert (await json_errors(_request(), ok)).status == 200
    with pytest.raises(web.HTTPFound):
        await json_errors(_request(), redirect)


async def test_admin_middleware_refuses_an_undecodable_bearer_with_401() -> None:
    settings = Settings.model_validate({"HUBSTREAM_ADMIN_TOKEN": "admin-token-under-test"})

    async def handler(request: web.Request) -> web.StreamResponse:
        raise AssertionError("must not be reached")

    response = await admin_middleware(settings)(
        _undecodable_bearer_request("POST", "/api/v1/batch/exact"), handler
    )
    assert response.status == 401 and _body(response)["error"] == "Unauthorized"
    with pytest.raises(Unauthorized):
        require_admin(_undecodable_bearer_request("POST", "/x"), settings)


def test_an_undecodable_actor_token_is_unauthorized() -> None:
    settings = Settings.model_validate({"HUB_JWT_SECRET": "a-jwt-secret-of-at-least-32-bytes-long"})
    with pytest.raises(Unauthorized, match="not ASCII"):
        actor_from_request(_undecodable_bearer_request("GET", "/api/peek"), settings)


@pytest.mark.parametrize("raw", ["²", "١٢", "9" * 21, "9" * 5000, "-1", "1/2", "", True, 1.5, None])
def test_batch_ids_are_ascii_digits_of_at_most_20(raw: object) -> None:
    with pytest.raises(InvalidInput, match="batchId"):
        _batch_id(raw)


@pytest.mark.parametrize(("raw", "expected"), [("0", 0), ("42", 42), (42, 42), ("9" * 20, int("9" * 20))])
def test_valid_batch_ids(raw: object, expected: int) -> None:
    assert _batch_id(raw) == expected
