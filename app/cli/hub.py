"""`hubstream hub ...`: peek, dequeue and inspect an actor's queue straight on Cosmos DB, and mint tokens.

These act as the actor (operator tooling); actors themselves use GET /api/peek and DELETE /api/dequeue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from app.cli.common import HubstreamGroup, echo_json
from app.errors import InvalidInput
from app.settings import get_settings
from app.web.models import to_wire

__all__ = ["hub"]

T = TypeVar("T")


def _with_hub(body: Callable[[Any], Awaitable[T]]) -> T:
    from app.hub.service import MessageHub

    async def run() -> T:
        hub = await MessageHub.open(get_settings())
        try:
            return await body(hub)
        finally:
            await hub.close()

    return asyncio.run(run())


def _actor(value: str) -> str:
    from app.dataavailable import parse

    # Reuse the recipient rule of DataAvailable so the CLI and the API agree on actor ids.
    probe = {"id": "00000000-0000-0000-0000-000000000000", "origin": "timeseries", "message_type": "x"}
    try:
        parse({**probe, "recipient": value, "weight": 1})
    except InvalidInput as exc:
        raise InvalidInput(f"actor {value[:80]!r} is not a valid actor id") from exc
    return value


@click.group(cls=HubstreamGroup)
def hub() -> None:
    """The message hub: an actor's bundles on Cosmos DB."""


@hub.command()
@click.option("--actor", required=True, help="Recipient / actor id.")
@click.option("--domain", default=None, help="timeseries, aggregations or masterdata (default: all).")
@click.option("--bundle-id", default=None, help="GUID to use for a new bundle.")
@click.option("--summary", is_flag=True, help="Print the bundle without its events.")
def peek(actor: str, domain: str | None, bundle_id: str | None, summary: bool) -> None:
    """Peek the actor's next bundle (the same one again until it is dequeued)."""
    from app.hub.api_models import bundle_wire
    from app.hub.service import parse_bundle_id, parse_domains

    domains = parse_domains(domain)
    chosen = parse_bundle_id(bundle_id)
    bundle = _with_hub(lambda h: h.peek(_actor(actor), domains, chosen))
    if bundle is None:
        click.echo("nothing to peek")
        return
    data = bundle_wire(bundle)
    if summary:
        data.pop("events")
    echo_json(data)


@hub.command()
@click.option("--actor", required=True, help="Recipient / actor id.")
@click.option("--bundle-id", required=True, help="The peeked bundle's id.")
def dequeue(actor: str, bundle_id: str) -> None:
    """Acknowledge a peeked bundle."""
    from app.hub.api_models import Dequeued
    from app.hub.service import parse_bundle_id

    chosen = parse_bundle_id(bundle_id)
    if chosen is None:
        raise InvalidInput("--bundle-id must not be empty")
    _with_hub(lambda h: h.dequeue(_actor(actor), chosen))
    echo_json(to_wire(Dequeued(bundle_id=chosen, dequeued=True)))


@hub.command()
@click.option("--actor", default=None, help="Recipient / actor id (default: every actor, counted).")
@click.option("--top", default=10, show_default=True, type=click.IntRange(0, 10_000), help="Actors listed.")
def depth(actor: str | None, top: int) -> None:
    """Unacknowledged events waiting, per domain: for one actor (queried from its drawers), or for
    every actor (from the counts ledgers and bundle streams keep) with the most behind listed."""
    if actor is not None:
        counts = _with_hub(lambda h: h.depth(_actor(actor)))
        echo_json({"actor": actor, "total": sum(counts.values()), "domains": counts})
        return
    found = _with_hub(lambda h: h.depths())
    rows = sorted(found.by_actor.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    echo_json(
        {
            "total": found.total,
            "domains": dict(found.by_domain),
            "actors": len(found.by_actor),
            "behind": sum(1 for _, d in rows if d),
            "notMeasured": len(found.not_measured),
            "top": [{"actor": a, "total": sum(d.values()), "domains": dict(d)} for a, d in rows[:top] if d],
        }
    )


@hub.command()
@click.option("--dry-run", is_flag=True, help="Report what would be reclaimed; delete nothing.")
def gc(dry_run: bool) -> None:
    """Reclaim what actors acknowledged: the events and documents of drained drawers.

    Workers run the same sweep every HUB_RECLAIM_INTERVAL_S; this runs one now."""
    report = _with_hub(lambda h: h.reclaim(dry_run=dry_run))
    echo_json(report.as_dict())


@hub.command()
@click.option("--actor", required=True, help="Recipient / actor id (the token's subject).")
@click.option("--ttl-s", default=3600, show_default=True, type=click.IntRange(1, 86400 * 30))
def token(actor: str, ttl_s: int) -> None:
    """Mint an HS256 bearer token for the actor API, signed with HUB_JWT_SECRET (for testing)."""
    from app.hub.tokens import TokenRules, mint_actor_token

    click.echo(mint_actor_token(TokenRules.of(get_settings()), _actor(actor), ttl_s))
