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
    from app.cosmos import CosmosStore
    from app.eventstore.ports import StreamStorage

__all__ = ["es"]

T = TypeVar("T")
CONTAINER_HELP = "The event store's container (default: the hub's actor bundle streams)."


def _default_container() -> str:
    return f"{get_settings().hub_container_prefix}-bundle-streams"


def _with_cosmos(body: Callable[[CosmosStore], Awaitable[T]]) -> T:
    from app.cosmos import open_cosmos

    async def run() -> T:
        cosmos = await open_cosmos(get_settings())
        try:
            return await body(cosmos)
        finally:
            await cosmos.close()

    return asyncio.run(run())


def _with_storage(container: str | None, body: Callable[[StreamStorage], Awaitable[T]]) -> T:
    from app.eventstore import open_event_store

    async def on(cosmos: CosmosStore) -> T:
        store = await open_event_store(cosmos, container or _default_container())
        return await body(store.storage)

    return _with_cosmos(on)


def _stream(value: str) -> str:
    from app.eventstore.model import check_stream_name

    return check_stream_name(value)  # InvalidStreamName: a bad input, exit 2


@click.group(cls=HubstreamGroup)
def es() -> None:
    """The event store: create its container, survey it, dump, prune and delete streams."""


@es.command()
@click.option("--container", default=None, help=CONTAINER_HELP)
@click.option("--throughput", type=click.IntRange(min=400), default=None, help="RU/s, when it is created.")
def init(container: str | None, throughput: int | None) -> None:
    """Create the container (partition key /p) with the indexing policy the store's queries need
    (event and unfold bodies not indexed) and per-item time to live on (for categories given a
    TTL). An existing container is left as it is and shown."""
    from app.cosmos import open_cosmos
    from app.eventstore.cosmos import INDEXING_POLICY, PARTITION_KEY_PATH

    name = container or _default_container()

    async def run() -> dict[str, object]:
        cosmos = await open_cosmos(get_settings())
        try:
            proxy = await cosmos.container(
                name,
                PARTITION_KEY_PATH,
                item_ttl=True,
                indexing_policy=INDEXING_POLICY,
                throughput=throughput,
            )
            props = await proxy.read()
            return {
                "container": name,
                "partitionKey": props.get("partitionKey"),
                "indexingPolicy": props.get("indexingPolicy"),
                "defaultTtl": props.get("defaultTtl"),  # -1: per-item TTL on; absent: off
            }
        finally:
            await cosmos.close()

    echo_json(asyncio.run(run()))


@es.command()
@click.option("--container", default=None, help=CONTAINER_HELP)
@click.option("--category", default=None, help="List the streams of this category (the name before '-').")
@click.option("--unfold-case", default=None, help="Only streams whose tip holds an unfold of this case.")
def stats(container: str | None, category: str | None, unfold_case: str | None) -> None:
    """Streams, documents and stored events of the container (a read of every document), and with
    --category / --unfold-case the streams that match (Equinox's `eqx stats` and `eqx query`)."""
    from app.eventstore.cosmos import PARTITION_KEY_PATH
    from app.eventstore.survey import survey

    name = container or _default_container()

    async def run(cosmos: CosmosStore) -> dict[str, object]:
        proxy = await cosmos.container(name, PARTITION_KEY_PATH)
        docs = [doc async for doc in proxy.read_all_items(max_item_count=1000)]
        found = survey(docs, category=category, unfold_case=unfold_case)
        listed = category is not None or unfold_case is not None
        return {"container": name, **found.as_dict(with_streams=listed)}

    echo_json(_with_cosmos(run))


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
