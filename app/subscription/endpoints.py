"""Endpoints: HTTP POST (aiohttp), in-process async callables and in-process batch sinks.

A per-message endpoint is `async (SubscriptionMessage) -> None`; it returns when the message was
taken and raises a HubstreamError whose `retriable` says retry (RQ) versus DLQ. HTTP: 2xx
delivered; 408, 429, 5xx and timeouts retriable; other 4xx rejected for good.

A batch sink is `async (Sequence[SubscriptionMessage]) -> Sequence[BaseException | None]`: one
outcome per message (None = delivered). It handles each group's messages in order and, after a
group's first failure, does not deliver that group's later messages of the batch: it returns an
exception for them too (`NotAttempted`), and the runner re-decides them behind the failed one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from app.ordered.errors import DeliveryFailed
from app.subscription.errors import EndpointRejected, EndpointUnavailable, InvalidSubscription
from app.subscription.forwarded_headers import forwarded
from app.subscription.model import EndpointSpec
from app.subscription.records import SubscriptionMessage
from app.web.security import hide_url_credentials

__all__ = [
    "BatchSink",
    "Endpoint",
    "HttpEndpoint",
    "batch_sinks",
    "open_batch_sink",
    "open_endpoint",
    "register_batch_sink",
    "register_sink",
    "sinks",
]

Endpoint = Callable[[SubscriptionMessage], Awaitable[None]]
BatchSink = Callable[[Sequence[SubscriptionMessage]], Awaitable[Sequence[BaseException | None]]]
_SINKS: dict[str, Endpoint] = {}
_BATCH_SINKS: dict[str, BatchSink] = {}


def register_sink(name: str, sink: Endpoint) -> None:
    """Make an in-process sink available to subscriptions with endpoint kind `callable`."""
    _SINKS[name] = sink


def register_batch_sink(name: str, sink: BatchSink) -> None:
    """Make an in-process batch sink available to subscriptions with endpoint kind `batch`.

    Call it in every worker process before its subscriptions start (e.g. in a capability's
    `register(app, settings)`).
    """
    _BATCH_SINKS[name] = sink


def sinks() -> list[str]:
    return sorted(_SINKS)


def batch_sinks() -> list[str]:
    return sorted(_BATCH_SINKS)


def open_batch_sink(spec: EndpointSpec) -> BatchSink:
    sink = _BATCH_SINKS.get(spec.target)
    if sink is None:
        raise InvalidSubscription(
            f"no batch sink named {spec.target!r} (known: {', '.join(batch_sinks()) or 'none'})"
        )
    return sink


class HttpFailure(DeliveryFailed):
    """Base for failures of an HTTP endpoint: `status` is None for timeouts and connection errors."""


class HttpUnavailable(HttpFailure, EndpointUnavailable):
    """The HTTP endpoint timed out, was unreachable or answered 408, 429 or 5xx."""


class HttpRejected(HttpFailure, EndpointRejected):
    """The HTTP endpoint answered a 4xx other than 408/429."""


class HttpEndpoint:
    def __init__(self, spec: EndpointSpec) -> None:
        self.url = spec.target
        self.shown = hide_url_credentials(spec.target)  # what failures (DLQ headers, logs) name
        self.timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
        self.forward_headers = spec.forward_headers
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, message: SubscriptionMessage) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        ours = {
            "X-Group-Id": message.group_id,
            "X-Message-Id": message.message_id,
            "X-Subscription": message.subscription,
            "X-Attempt": str(message.attempt),
        }
        if message.owner_epoch is not None:
            ours["X-Owner-Epoch"] = str(message.owner_epoch)
        # A record's own headers never stand in for ours, whatever their case, nor frame the
        # request or speak for anyone (`forwarded_headers`).
        headers = forwarded(message.headers, (*ours, "X-Owner-Epoch"), self.forward_headers) | ours
        try:
            async with self._session.post(self.url, data=message.payload, headers=headers) as resp:
                status = resp.status
                await resp.read()
        except TimeoutError as exc:
            err: HttpFailure = HttpUnavailable(f"POST {self.shown} timed out")
            err.timed_out = True
            raise err from exc
        except aiohttp.ClientError as exc:
            raise HttpUnavailable(f"POST {self.shown} failed: {hide_url_credentials(str(exc))}") from exc
        if 200 <= status < 300:
            return
        failure: HttpFailure = (
            HttpUnavailable(f"POST {self.shown} answered {status}")
            if status in (408, 429) or status >= 500
            else HttpRejected(f"POST {self.shown} answered {status}")
        )
        failure.status = status
        raise failure

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def open_endpoint(spec: EndpointSpec) -> tuple[Endpoint, Callable[[], Awaitable[None]]]:
    """The per-message endpoint and a coroutine function that closes it (batch kind: not here)."""
    if spec.kind == "http":
        http = HttpEndpoint(spec)
        return http, http.close
    sink = _SINKS.get(spec.target)
    if sink is None:
        raise InvalidSubscription(
            f"no in-process sink named {spec.target!r} (known: {', '.join(sinks()) or 'none'})"
        )

    async def nothing() -> None:
        return None

    return sink, nothing
