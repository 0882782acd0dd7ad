"""Actors draining the hub through the HTTP actor API, as market actors do: Peek, then Dequeue
asking for the next bundle in the same call, until none is left.

This is how the main job reads the hub back (never a depth counter): what it counts is what an
actor saw. `drain_actors` runs every actor concurrently and records, per actor, each event id it
was shown and whether it had been shown before (a duplicate), and checks FIFO per cabinet: the
sequence numbers of one actor's cabinet (domain, message type) only grow across its bundles.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from app.errors import ServiceUnavailable
from app.hub.tokens import TokenRules, mint_actor_token

__all__ = ["DrainReport", "drain_actors"]

_RETRIABLE = (aiohttp.ClientError, asyncio.TimeoutError)
RETRY_FOR_S = 120.0


@dataclass
class DrainReport:
    """What the actors saw."""

    drained: int = 0  # distinct event ids shown to their actor
    duplicates: int = 0  # events shown again after their bundle was dequeued
    fifo_violations: int = 0  # a cabinet's sequence went backwards across bundles
    bundles: int = 0
    retries: int = 0  # HTTP calls repeated after a lost answer or a 5xx
    seconds: float = 0.0
    per_actor: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.drained / self.seconds if self.seconds > 0 else 0.0


class _Actor:
    """One actor's Peek/Dequeue loop; bookkeeping is shared through the report."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, actor: str, rules: TokenRules) -> None:
        self.session = session
        self.base_url = base_url
        self.actor = actor
        self.headers = {"Authorization": f"Bearer {mint_actor_token(rules, actor)}"}
        self.seen: set[str] = set()
        self.last_seq: dict[tuple[str, str], int] = {}

    async def _call(self, report: DrainReport, method: str, path: str) -> tuple[int, bytes]:
        """One HTTP call, repeated (with backoff, for RETRY_FOR_S at most) after a lost answer or
        a 5xx: a worker may be restarting. Peek is safe to repeat (the same bundle comes back)
        and so is Dequeue of a bundle this actor peeked (asked to peek too, it answers the
        bundle the lost answer held)."""
        deadline = time.monotonic() + RETRY_FOR_S
        delay_s = 0.2
        while True:
            try:
                async with self.session.request(method, self.base_url + path, headers=self.headers) as resp:
                    body = await resp.read()
                    if resp.status < 500:
                        return resp.status, body
                    failure = f"HTTP {resp.status}: {body[:200]!r}"
            except _RETRIABLE as exc:
                failure = repr(exc)
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"actor {self.actor}: {method} {path} kept failing: {failure}")
            report.retries += 1
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 5.0)

    async def drain(self, report: DrainReport) -> None:
        """Peek, then dequeue each bundle asking for the next one (`peek=all`), until none is left."""
        status, body = await self._call(report, "GET", "/api/peek")
        if status == 204:
            return
        if status != 200:
            raise ServiceUnavailable(f"actor {self.actor}: peek answered {status}: {body[:200]!r}")
        bundle: dict[str, Any] | None = orjson.loads(body)
        while bundle is not None:
            self._record(report, bundle)
            path = f"/api/dequeue?bundleId={bundle['bundleId']}&peek=all"
            status, body = await self._call(report, "DELETE", path)
            if status != 200:
                raise ServiceUnavailable(f"actor {self.actor}: dequeue answered {status}: {body[:200]!r}")
            report.bundles += 1
            bundle = orjson.loads(body).get("next")

    def _record(self, report: DrainReport, bundle: dict[str, Any]) -> None:
        cabinet = (str(bundle["domain"]), str(bundle["messageType"]))
        for event in bundle["events"]:
            event_id = str(event["id"])
            if event_id in self.seen:
                report.duplicates += 1
            else:
                self.seen.add(event_id)
                report.drained += 1
                report.per_actor[self.actor] = report.per_actor.get(self.actor, 0) + 1
            seq = int(event["sequence"])
            if seq <= self.last_seq.get(cabinet, -1):
                report.fifo_violations += 1
            self.last_seq[cabinet] = seq


async def drain_actors(
    base_urls: Sequence[str],
    secret: str | TokenRules,
    actors: Sequence[str],
    *,
    expected: int,
    deadline_s: float,
    concurrency: int = 16,
    poll_s: float = 2.0,
    progress: Callable[[DrainReport], None] | None = None,
) -> DrainReport:
    """Drain every actor, again and again until `expected` distinct events were seen or
    `deadline_s` passed (events behind a crashed save's claim show only once its lease expired).

    The actors are spread over the workers' actor APIs in `base_urls`, each actor always on the
    same one (a worker's peek after its own dequeue starts from what it learned)."""
    rules = secret if isinstance(secret, TokenRules) else TokenRules(secret)
    report = DrainReport()
    started = time.monotonic()
    limit = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        members = [
            _Actor(session, base_urls[i % len(base_urls)].rstrip("/"), actor, rules)
            for i, actor in enumerate(actors)
        ]

        async def one(member: _Actor) -> None:
            async with limit:
                await member.drain(report)
                if progress is not None:
                    progress(report)

        while True:
            await asyncio.gather(*(one(m) for m in members))
            report.seconds = time.monotonic() - started
            if report.drained >= expected or report.seconds > deadline_s:
                return report
            await asyncio.sleep(poll_s)
