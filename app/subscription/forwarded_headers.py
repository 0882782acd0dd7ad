"""Which of a record's own headers an HTTP endpoint receives (pure).

Whoever produces into a composite topic sets its records' headers, so they are an outsider's
input. Sent as they are, `Transfer-Encoding: chunked` next to the Content-Length aiohttp sets
would smuggle a second request past a proxy, `Host` would pick another virtual host, and
`Authorization` or `Cookie` would speak with credentials the subscription never gave. So a
record's header reaches the endpoint only when:

- its name is an HTTP token and its value has no control character (a CR or LF would end the
  header block: aiohttp refuses those, which would fail the delivery for ever);
- it is not hubstream's own (`X-Group-Id`, …: `HttpEndpoint` sets those, whatever the case);
- it is not a hop-by-hop, framing or authority header (`DENIED`, `DENIED_PREFIXES`), or the
  subscription names it in its allow-list (`forward_headers`): then only the named headers go,
  and an allow-list may name authority headers (the operator's choice) but never framing ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from app.subscription.errors import InvalidSubscription

__all__ = ["DENIED", "DENIED_PREFIXES", "FRAMING", "check_allow_list", "forwarded"]

# Hop-by-hop and framing headers: they change how the request is read, never the record's data.
FRAMING = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "content-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
# Authority headers: who the request speaks for, or where it came from.
_AUTHORITY = frozenset({"authorization", "cookie", "set-cookie", "forwarded", "x-real-ip"})
DENIED = FRAMING | _AUTHORITY
DENIED_PREFIXES = ("proxy-", "x-forwarded-")
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _denied(lower: str) -> bool:
    return lower in DENIED or lower.startswith(DENIED_PREFIXES)


def check_allow_list(names: Iterable[str]) -> tuple[str, ...]:
    """A subscription's allow-list, checked: HTTP tokens, no framing header; in a stable order."""
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise InvalidSubscription(f"forwarded header name {name!r} is not an HTTP header name")
        if name.lower() in FRAMING:
            raise InvalidSubscription(
                f"header {name!r} frames the request (hop-by-hop or framing): it is never forwarded"
            )
        if name.lower() not in (n.lower() for n in out):
            out.append(name)
    return tuple(out)


def forwarded(
    headers: Mapping[str, str], reserved: Iterable[str], allow: tuple[str, ...] | None = None
) -> dict[str, str]:
    """The record headers an HTTP endpoint receives (`reserved`: the names hubstream sets)."""
    taken = {name.lower() for name in reserved}
    allowed = None if allow is None else {name.lower() for name in allow}
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in taken or not _TOKEN.match(name) or _CONTROL.search(value):
            continue
        if lower in FRAMING:
            continue
        if allowed is None and _denied(lower):
            continue
        if allowed is not None and lower not in allowed:
            continue
        out[name] = value
    return out
