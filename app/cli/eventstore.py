"""`hubstream es ...`: look into and maintain the event store's streams on Cosmos DB (the tooling
Equinox users run with `eqx dump` and its pruner): dump a stream, prune its oldest events, delete it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from app.cli.common import HubstreamGroup, echo_json
from app.errors import InvalidInput
from app.settings import get_settings

if TYPE_CHECKING:
    from app.eventstore.ports import StreamStorage

__all__ = ["es"]

T = TypeVar("T")
CONTAINER_HELP = "The event store's container (default: the hub's actor bundle streams)."


def _default_container() -> str:
    return f"{get_settings().hub_container_prefix}-bundle-streams"


def _with_storage(container: str | None, body: Callable[[StreamStorage], Awaitable[T]]) -> T:
    from app.cosmos import open_cosmos
    from app.eventstore import open_event_store

    async def run() -> T:
        cosmos = await open_cosmos(get_settings())
        try:
            store = await open_event_store(cosmos, container or _default_container())
            return await body(store.storage)
        finally:
            await cosmos.close()

    return asyncio.run(run())


def _stream(value: str) -> str:
    from app.eventstore.model import check_stream_name

    return check_stream_name(value)  # InvalidStreamName: a bad input, exit 2


@click.group(cls=HubstreamGroup)
def es() -> None:
    """The event store: dump, prune and delete streams."""


@es.command()
@click.argument("stream")
@click.option("--container", default=None, help=CONTAINER_HELP)
def dump(stream: str, container: str | None) -> None:
    """Print a stream's stored events (index, case, data, meta, time) and its tip's unfolds."""
    from app.eventstore.lifecycle import dump_stream

    found = _with_storage(container, lambda s: dump_stream(s, _stream(stream)))
    if found is None:
        raise InvalidInput(f"no stream {stream!r}")
    echo_json(found.as_dict())


@es.command()
@click.argument("stream")
@click.option("--before", "before_index", required=True, type=click.IntRange(min=0), help="Event index.")
@click.option("--container", default=None, help=CONTAINER_HELP)
def prune(stream: str, before_index: int, container: str | None) -> None:
    """Delete the stored events before an index (whole batches; the tip and its unfolds stay)."""
    from app.eventstore.lifecycle import prune_stream

    removed = _with_storage(container, lambda s: prune_stream(s, _stream(stream), before_index))
    echo_json({"stream": stream, "pruned": removed})


@es.command()
@click.argument("stream")
@click.option("--container", default=None, help=CONTAINER_HELP)
@click.option("--yes", is_flag=True, help="Confirm: the stream's events are gone for good.")
def delete(stream: str, container: str | None, yes: bool) -> None:
    """Delete a stream: its batches, then its tip (a delete cut short is finished by running it again)."""
    from app.eventstore.lifecycle import delete_stream

    if not yes:
        raise InvalidInput("deleting a stream cannot be undone: add --yes")
    removed = _with_storage(container, lambda s: delete_stream(s, _stream(stream)))
    echo_json({"stream": stream, "deleted": removed})
