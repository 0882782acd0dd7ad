"""JSON responses and errors for Faust views.

Every error leaves as HTTP 4xx/5xx with a JSON body {"error": <class>, "reason": <message>};
a view wrapped in `guarded` never lets an exception escape as a bare 500 page, and the
`json_errors` middleware gives aiohttp's own errors (no such route, body over MAX_BODY_BYTES) the
same JSON shape.
"""

from __future__ import annotations

import functools
import hmac
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError

from app.errors import HubstreamError, InvalidInput, ServiceUnavailable
from app.service_errors import UNANSWERED
from app.settings import Settings
from app.web.models import Error, to_wire

__all__ = [
    "MAX_BODY_BYTES",
    "Unauthorized",
    "check_query",
    "error_response",
    "guarded",
    "json_errors",
    "json_response",
    "model_response",
    "parse_body",
    "read_json",
    "require_admin",
    "validation_reason",
]

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 1024 * 1024  # the web server's client_max_size (set in app/worker/factory.py)


class Unauthorized(HubstreamError):
    """Missing or invalid credentials."""

    http_status = 401


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def model_response(model: BaseModel, status: int = 200) -> web.Response:
    """The one way an answer becomes JSON: the model's wire (camelCase) names."""
    return json_response(to_wire(model), status)


def _error(error: str, reason: str, status: int) -> web.Response:
    return model_response(Error(error=error, reason=reason), status)


def error_response(exc: HubstreamError) -> web.Response:
    response = _error(type(exc).__name__, str(exc), exc.http_status)
    if exc.http_status == 503:
        wait_s = exc.retry_after_s if isinstance(exc, ServiceUnavailable) else None
        response.headers["Retry-After"] = _retry_after(wait_s)
    return response


def _retry_after(wait_s: float | None) -> str:
    """Whole seconds, at least 1 (the header takes no fractions)."""
    return str(max(1, math.ceil(wait_s or 1)))


_PHRASES = {  # pydantic's error types, as this API words them
    "int_type": "is not an integer",
    "string_type": "is not a string",
    "bool_type": "is not a boolean",
    "list_type": "is not a list",
    "model_type": "is not an object",
    "dict_type": "is not an object",
}


def validation_reason(exc: ValidationError) -> str:
    """The first problem a model found, naming the field by its wire name."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the body"
    if first["type"] == "missing":
        return f"{where} is required"
    phrase = _PHRASES.get(first["type"])
    if phrase is not None:
        return f"{where} {first['input']!r:.40} {phrase}"
    return f"{where}: {first['msg']}"


def parse_body(model: type[M], data: Any, expected: str = "a JSON object") -> M:
    """A request body through its model; InvalidInput (400) naming what is wrong with it."""
    if not isinstance(data, dict):
        raise InvalidInput(f"the request body must be {expected}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"{validation_reason(exc)} (the body must be {expected})") from None


async def read_json(request: web.Request) -> Any:
    """The request body as JSON, or InvalidInput naming what is wrong with it."""
    body = await request.read()  # beyond MAX_BODY_BYTES aiohttp raises 413 (rendered by json_errors)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from exc


def require_admin(request: web.Request, settings: Settings) -> None:
    """Mutating endpoints need HUBSTREAM_ADMIN_TOKEN as a bearer token when one is set."""
    if settings.admin_token is None:
        return
    supplied = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    # surrogateescape: header bytes that are not UTF-8 arrive as lone surrogates
    if not hmac.compare_digest(
        supplied.encode("utf-8", "surrogateescape"), settings.admin_token.get_secret_value().encode()
    ):
        raise Unauthorized(
            "this endpoint needs the admin token (Authorization: Bearer <HUBSTREAM_ADMIN_TOKEN>)"
        )


Handler = Callable[..., Awaitable[web.StreamResponse]]


def check_query(request: web.Request, *allowed: str) -> None:
    """InvalidInput (400) for a query parameter the endpoint does not take: a misspelt `bundleid`
    silently ignored would do something the caller did not ask for."""
    unknown = sorted(set(request.query) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) if allowed else "none"
        raise InvalidInput(f"unknown query parameters {unknown}; this endpoint takes: {takes}")


def guarded(handler: Handler) -> Handler:
    """Turn HubstreamError into its JSON status and anything else into a logged JSON 500."""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> web.StreamResponse:
        try:
            return await handler(*args, **kwargs)
        except HubstreamError as exc:
            return error_response(exc)
        except web.HTTPException:
            raise
        except UNANSWERED as exc:
            # A backing store (Cosmos, Kafka) did not answer: retriable, not a bug in the request.
            log.warning(
                "%s: backing service unavailable: %s: %s", handler.__qualname__, type(exc).__name__, exc
            )
            reason = f"a backing service did not answer ({type(exc).__name__}); retry"
            response = _error("ServiceUnavailable", reason, 503)
            response.headers["Retry-After"] = _retry_after(None)
            return response
        except Exception as exc:
            log.exception("unhandled error in %s", handler.__qualname__)
            reason = f"{type(exc).__name__}: {exc}"[:300]  # the worker's log has the traceback
            return _error("InternalError", reason, 500)

    return wrapper


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 4xx/5xx (no route for the path, body over client_max_size) as JSON errors."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        reason = exc.text or ""
        if reason in {"", f"{exc.status}: {exc.reason}"}:  # aiohttp's default text says nothing more
            reason = f"{exc.reason}: {request.method} {request.path[:200]}"
        headers = {k: v for k, v in exc.headers.items() if k not in {"Content-Type", "Content-Length"}}
        response = _error(exc.reason.replace(" ", ""), reason, exc.status)
        response.headers.update(headers)
        return response
