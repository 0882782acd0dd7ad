"""`hubstream batch create|add|ack|close|get`: the batch API of a worker at WEB_HOST:WEB_PORT;
`hubstream batch dlq list|replay`: dead-lettered ack records, read from the broker."""

from __future__ import annotations

import sys

import click

from app.batch.client import BatchClient
from app.batch.dead_acks import dead_acks, replay_dead_acks
from app.batch.ids import expand_item_ids
from app.cli.common import URL, HubstreamGroup, echo_json
from app.errors import InvalidInput
from app.settings import get_settings

__all__ = ["batch"]


def _client(url: str | None) -> BatchClient:
    settings = get_settings()
    token = settings.admin_token.get_secret_value() if settings.admin_token else None
    return BatchClient(url or f"http://{settings.web_host}:{settings.web_port}", token=token)


def _exact_id(value: str) -> int:
    if not value.isdigit():
        raise InvalidInput(f"exact batch ids are integers, got {value!r} (use --estimated for UUIDs)")
    return int(value)


@click.group(cls=HubstreamGroup)
@click.option("--url", type=URL, default=None, help="Worker base URL (default http://WEB_HOST:WEB_PORT).")
@click.pass_context
def batch(ctx: click.Context, url: str | None) -> None:
    """Track fan-out batches (Carlyle-compatible exact and estimated batches)."""
    ctx.obj = ctx.with_resource(_client(url))  # closed when the command ends


@batch.command()
@click.option("--user-key", default=None)
@click.option("--estimated", "size", type=int, default=None, help="Create an estimated batch of this size.")
@click.pass_obj
def create(client: BatchClient, user_key: str | None, size: int | None) -> None:
    """Open a batch and print its id."""
    if size is None:
        echo_json({"batchId": client.create_exact(user_key)})
    else:
        echo_json({"batchId": client.create_estimated(size, user_key)})


@batch.command()
@click.argument("batch_id")
@click.argument("items", type=int)
@click.option("--ids", is_flag=True, help="Print the expanded item ids, one a line, instead of the groups.")
@click.pass_obj
def add(client: BatchClient, batch_id: str, items: int, ids: bool) -> None:
    """Add ITEMS items to an open exact batch."""
    groups = client.add_items(_exact_id(batch_id), items)
    if ids:
        for item_id in expand_item_ids(int(batch_id), groups):
            click.echo(item_id)
    else:
        echo_json({"batchItemGroupIds": [{"id": g.id, "upto": g.upto} for g in groups]})


@batch.command()
@click.argument("item_ids", nargs=-1)
@click.option("--stdin", "from_stdin", is_flag=True, help="Read item ids from stdin, one a line.")
@click.option(
    "--estimated",
    "estimated_by",
    type=int,
    default=None,
    help="ITEM_IDS are estimated batch ids: decrement each by this much.",
)
@click.pass_obj
def ack(client: BatchClient, item_ids: tuple[str, ...], from_stdin: bool, estimated_by: int | None) -> None:
    """Ack exact items (or decrement estimated batches); print the batches this completed."""
    ids = list(item_ids) + ([line.strip() for line in sys.stdin if line.strip()] if from_stdin else [])
    if not ids:
        raise InvalidInput("give item ids as arguments or with --stdin")
    if estimated_by is not None:
        echo_json({"results": client.decr(dict.fromkeys(ids, estimated_by))})
    else:
        echo_json({"batchCompletions": client.ack(ids)})


@batch.command()
@click.argument("batch_id")
@click.option("--estimated", is_flag=True)
@click.pass_obj
def close(client: BatchClient, batch_id: str, estimated: bool) -> None:
    """Close a batch; print whether it is complete."""
    done = client.close_estimated(batch_id) if estimated else client.close_exact(_exact_id(batch_id))
    echo_json({"isComplete": done})


@batch.command()
@click.argument("batch_id")
@click.option("--estimated", is_flag=True)
@click.pass_obj
def get(client: BatchClient, batch_id: str, estimated: bool) -> None:
    """Show a batch."""
    echo_json(client.get_estimated(batch_id) if estimated else client.get_exact(_exact_id(batch_id)))


@batch.group("dlq", cls=HubstreamGroup)
def batch_dlq() -> None:
    """Dead-lettered ack records (`<BATCH_ACKS_TOPIC>-dlq`): list them, replay them."""


@batch_dlq.command("list")
@click.option("--pending", is_flag=True, help="Only the records no replay has sent yet.")
def batch_dlq_list(pending: bool) -> None:
    """Each dead-lettered ack record: its offset, item ids, reason, where it was read, replayed or not."""
    echo_json(
        [
            {
                "offset": dead.offset,
                "itemIds": list(dead.item_ids),
                "reason": dead.reason,
                "source": dead.source,
                "replayed": dead.replayed,
            }
            for dead in dead_acks(get_settings())
            if not (pending and dead.replayed)
        ]
    )


@batch_dlq.command("replay")
def batch_dlq_replay() -> None:
    """Send the ids of every record not replayed yet to the ack topic again (acks are idempotent;
    ids that still cannot apply are dead-lettered again, with their reason)."""
    replayed = replay_dead_acks(get_settings())
    echo_json({"replayed": replayed.records, "itemIds": replayed.item_ids, "skipped": replayed.skipped})
