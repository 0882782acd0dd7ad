"""Web server security: the admin-token middleware, the bind check, and log redaction.

- `admin_middleware`: when HUBSTREAM_ADMIN_TOKEN is set, every mutating request (POST, PUT, PATCH,
  DELETE) needs `Authorization: Bearer <token>`, and every read but OPEN_READS needs it or
  HUBSTREAM_READ_TOKEN; the actor endpoints (/api/peek*, /api/dequeue) authenticate actors with
  their own JWTs instead.
- `check_bind`: a worker refuses to listen on a non-loopback WEB_HOST without an admin token.
- `install_log_redaction`: every log record is scrubbed of the admin token, the hub JWT secret,
  the Cosmos key, the MySQL password and any `Bearer <token>` before a handler sees it.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from app.errors import ConfigError
from app.settings import DEV_JWT_SECRET, MIN_JWT_SECRET_BYTES, Settings, is_loopback
from app.web.responses import Unauthorized, error_response

__all__ = [
    "MUTATING_METHODS",
    "REDACTED",
    "admin_middleware",
    "check_bind",
    "install_log_redaction",
    "is_actor_path",
    "redact",
    "secrets_of",
]

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REDACTED = "***"
MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_actor_path(path: str) -> bool:
    """Actor endpoints authenticate with actor JWTs, never with the admin token."""
    return path == "/api/peek" or path.startswith("/api/peek/") or path == "/api/dequeue"


# Reads that stay open with a token set: no data in them (the dashboard's page is a shell whose
# script asks /api/dashboard with the token), readiness, the API's description, and /metrics,
# which carries no actor or batch ids (app.observability.scrape).
OPEN_READS = frozenset({"/", "/dashboard/", "/openapi.json", "/metrics", "/api/v1/batch/status"})


def _bearer(request: web.Request) -> bytes:
    header = request.headers.get("Authorization", "")
    supplied = header[7:].strip() if header[:7].lower() == "bearer " else ""
    # surrogateescape: header bytes that are not UTF-8 arrive as lone surrogates
    return supplied.encode("utf-8", "surrogateescape")


def admin_middleware(settings: Settings) -> Any:
    """aiohttp middleware: with HUBSTREAM_ADMIN_TOKEN set, mutating requests need it and reads need
    it or HUBSTREAM_READ_TOKEN (but OPEN_READS and the actor endpoints, which take actor JWTs)."""
    token = settings.admin_token.get_secret_value().encode() if settings.admin_token else None
    read_token = settings.read_token.get_secret_value().encode() if settings.read_token else None

    def holds(supplied: bytes, expected: bytes | None) -> bool:
        return expected is not None and hmac.compare_digest(supplied, expected)

    @web.middleware
    async def require_admin_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not token or is_actor_path(request.path):
            return await handler(request)
        supplied = _bearer(request)
        if request.method in MUTATING_METHODS:
            if not holds(supplied, token):
                return error_response(
                    Unauthorized(
                        f"{request.method} {request.path} needs the admin token "
                        "(Authorization: Bearer <HUBSTREAM_ADMIN_TOKEN>)"
                    )
                )
        elif request.path not in OPEN_READS and not (holds(supplied, token) or holds(supplied, read_token)):
            return error_response(
                Unauthorized(
                    f"{request.method} {request.path} needs a token "
                    "(Authorization: Bearer <HUBSTREAM_READ_TOKEN or HUBSTREAM_ADMIN_TOKEN>)"
                )
            )
        return await handler(request)

    return require_admin_token


MIN_ADMIN_TOKEN_CHARS = 32


def check_bind(settings: Settings) -> None:
    """ConfigError when the web server would listen beyond loopback without an admin token, or with
    the public development JWT secret (or one too short to resist guessing): anyone could then
    mint actor tokens and read any actor's data."""
    if is_loopback(settings.web_host):
        return
    token = settings.admin_token.get_secret_value() if settings.admin_token else ""
    if not token.strip():
        raise ConfigError(
            f"WEB_HOST={settings.web_host} is not a loopback address: set HUBSTREAM_ADMIN_TOKEN "
            "(it then guards every mutating endpoint) or bind WEB_HOST=127.0.0.1"
        )
    if len(token.strip()) < MIN_ADMIN_TOKEN_CHARS:  # one character was accepted: guessed at once
        raise ConfigError(
            f"WEB_HOST={settings.web_host} is not a loopback address: HUBSTREAM_ADMIN_TOKEN must be at "
            f"least {MIN_ADMIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 32`)"
        )
    read = settings.read_token.get_secret_value().strip() if settings.read_token else None
    if read is not None and len(read) < MIN_ADMIN_TOKEN_CHARS:
        raise ConfigError(
            f"WEB_HOST={settings.web_host} is not a loopback address: HUBSTREAM_READ_TOKEN must be at "
            f"least {MIN_ADMIN_TOKEN_CHARS} characters"
        )
    secret = settings.hub_jwt_secret.get_secret_value()
    if secret == DEV_JWT_SECRET or len(secret.encode()) < MIN_JWT_SECRET_BYTES:
        raise ConfigError(
            f"WEB_HOST={settings.web_host} is not a loopback address: set HUB_JWT_SECRET to a secret of "
            f"at least {MIN_JWT_SECRET_BYTES} bytes (the default is public) or bind WEB_HOST=127.0.0.1"
        )


def secrets_of(settings: Settings) -> list[str]:
    """Secret values that must never reach a log line."""
    values = [settings.hub_jwt_secret.get_secret_value()]
    for token in (settings.admin_token, settings.read_token):
        if token is not None:
            values.append(token.get_secret_value())
    if settings.cosmos_key is not None:
        values.append(settings.cosmos_key.get_secret_value())
    with contextlib.suppress(ConfigError):
        values.append(settings.mysql.password)
    return sorted({v for v in values if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return hide_url_credentials(_BEARER.sub(rf"\g<1>{REDACTED}", text))


# `scheme://user:password@` (or `scheme://token@`) in a URL: the part before the host.
_URL_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")


def hide_url_credentials(text: str) -> str:
    """`text` with the credentials of every URL in it replaced (endpoint URLs may carry them)."""
    return _URL_CREDENTIALS.sub(rf"\g<1>{REDACTED}@", text)


class _RedactingFactory:
    """A LogRecord factory: records are created only for enabled levels, so the cost is per line logged."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self.inner = inner
        self.secrets: list[str] = []
        self._formatter = logging.Formatter()

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is logging's problem to report, not ours
            return record
        clean = redact(message, self.secrets)
        if clean != message or record.args:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self._formatter.formatException(record.exc_info), self.secrets)
        return record


_install_lock = threading.Lock()


def install_log_redaction(settings: Settings) -> None:
    """Scrub this process's log records of the settings' secrets (idempotent; adds new secrets)."""
    with _install_lock:
        factory = logging.getLogRecordFactory()
        if not isinstance(factory, _RedactingFactory):
            factory = _RedactingFactory(factory)
            logging.setLogRecordFactory(factory)
        known = set(factory.secrets) | set(secrets_of(settings))
        factory.secrets = sorted(known, key=len, reverse=True)
