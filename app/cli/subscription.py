"""`hubstream subscription …`: create, describe, start, stop, delete, reset-offset, change-shards, dlq."""

from __future__ import annotations

import click

from app.cli.common import HubstreamGroup, echo_json
from app.composite.store import MetadataStore
from app.ordered.policy import Backoff, OnDlq, RetryPolicy
from app.settings import get_settings
from app.subscription import ops
from app.subscription.dlq import STATUSES
from app.subscription.errors import SubscriptionExists
from app.subscription.model import EndpointSpec, Status
from app.subscription.registry import SubscriptionRegistry
from app.subscription.replay import ReplaySelection
from app.subscription.unsideline import unsideline


def _stores() -> tuple[SubscriptionRegistry, MetadataStore]:
    s = get_settings()
    return SubscriptionRegistry.of(s), MetadataStore.of(s)


@click.group(cls=HubstreamGroup)
def subscription() -> None:
    """Subscriptions: ordered delivery per group with retry (RQ) and dead-letter (DLQ) queues."""


@subscription.command()
@click.argument("name")
@click.option("--topic", required=True, help="composite topic to read (MQ)")
@click.option("--http", "http_url", help="POST each message to this URL")
@click.option("--sink", help="name of an in-process sink registered with register_sink()")
@click.option(
    "--batch-sink",
    help="name of an in-process batch sink registered with register_batch_sink() "
    "(gets up to SUBSCRIPTION_BATCH_MAX messages per call)",
)
@click.option("--timeout-s", type=float, default=10.0, show_default=True)
@click.option(
    "--forward-header",
    "forward_headers",
    multiple=True,
    help="--http only: forward just this record header (repeatable; framing headers never go); "
    "by default every header but hop-by-hop, framing and authority ones",
)
@click.option("--shards", type=int, default=1, show_default=True)
@click.option("--max-attempts", type=int, default=3, show_default=True)
@click.option(
    "--backoff", type=click.Choice([b.value for b in Backoff]), default="exponential", show_default=True
)
@click.option("--min-backoff-s", type=float, default=1.0, show_default=True)
@click.option("--max-backoff-s", type=float, default=60.0, show_default=True)
@click.option(
    "--on-dlq", type=click.Choice([o.value for o in OnDlq]), default="block_group", show_default=True
)
@click.option("--start/--no-start", default=True, show_default=True)
@click.option(
    "--if-not-exists", is_flag=True, help="a subscription NAME that exists is kept as it is (and printed)"
)
def create(
    name: str,
    topic: str,
    http_url: str | None,
    sink: str | None,
    batch_sink: str | None,
    timeout_s: float,
    forward_headers: tuple[str, ...],
    shards: int,
    max_attempts: int,
    backoff: str,
    min_backoff_s: float,
    max_backoff_s: float,
    on_dlq: str,
    start: bool,
    if_not_exists: bool,
) -> None:
    """Create subscription NAME on composite topic --topic with its RQ and DLQ."""
    given = [
        (kind, target)
        for kind, target in (("http", http_url), ("callable", sink), ("batch", batch_sink))
        if target
    ]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --http URL, --sink NAME or --batch-sink NAME")
    endpoint = EndpointSpec(given[0][0], given[0][1] or "", timeout_s, forward_headers or None)
    retry = RetryPolicy(max_attempts, Backoff(backoff), min_backoff_s, max_backoff_s)
    registry, metadata = _stores()
    try:
        created = ops.create(registry, metadata, name, topic, endpoint, shards, retry, OnDlq(on_dlq), start)
    except SubscriptionExists:
        if not if_not_exists:
            raise
        created = registry.get(name)
    echo_json(created.to_json())


@subscription.command()
@click.argument("name")
def describe(name: str) -> None:
    """Definition, lag per shard and DLQ depth (parked dead letters), as JSON."""
    registry, metadata = _stores()
    report = ops.lag_report(get_settings(), registry, metadata, name)
    echo_json({"definition": registry.get(name).to_json(), **report})


@subscription.command()
@click.argument("name")
def start(name: str) -> None:
    """Let workers run the subscription's shards."""
    echo_json(ops.set_status(_stores()[0], name, Status.RUNNING).to_json())


@subscription.command()
@click.argument("name")
def stop(name: str) -> None:
    """Stop the subscription's shards (offsets stay committed)."""
    echo_json(ops.set_status(_stores()[0], name, Status.STOPPED).to_json())


@subscription.command()
@click.argument("name")
@click.option("--keep-topics", is_flag=True, help="keep the RQ and DLQ composite topics")
def delete(name: str, keep_topics: bool) -> None:
    """Delete the subscription: stop its shards, delete its RQ/DLQ topics (unless --keep-topics),
    then its definition; a cut run is finished by running it again."""
    registry, metadata = _stores()
    ops.delete(registry, metadata, name, keep_topics=keep_topics)
    echo_json({"deleted": name})


@subscription.command("change-shards")
@click.argument("name")
@click.argument("shard_count", type=int)
def change_shards(name: str, shard_count: int) -> None:
    """ChangeShardCount to SHARD_COUNT (adds RQ/DLQ storage topics when needed)."""
    registry, metadata = _stores()
    echo_json(ops.change_shards(registry, metadata, name, shard_count).to_json())


@subscription.command("reset-offset")
@click.argument("name")
@click.option("--queue", type=click.Choice(["mq", "rq", "dlq"]), default="mq", show_default=True)
@click.option("--storage-idx", type=int, help="storage topic index (with --offset)")
@click.option("--offset", type=int)
@click.option("--timestamp-ms", type=int)
def reset_offset(
    name: str, queue: str, storage_idx: int | None, offset: int | None, timestamp_ms: int | None
) -> None:
    """MQ: rewind/fast-forward; RQ/DLQ: fast-forward only. The subscription must be stopped.

    A DLQ fast-forward gives up (discards) the dead letters below the new offsets, without replay.
    """
    registry, metadata = _stores()
    echo_json(
        ops.reset_offset(
            registry, metadata, name, queue, storage_idx, offset, timestamp_ms, settings=get_settings()
        )
    )


@subscription.group(cls=HubstreamGroup)
def dlq() -> None:
    """Browse the dead-letter queue and replay (unsideline) messages from it."""


@dlq.command("list")
@click.argument("name")
@click.option("--group", "group_id")
@click.option("--message-id")
@click.option("--since-ms", type=int)
@click.option("--until-ms", type=int)
@click.option("--limit", type=int, default=100, show_default=True)
@click.option(
    "--status",
    type=click.Choice(list(STATUSES)),
    default="all",
    show_default=True,
    help="parked (waiting), replayed (unsidelined) or discarded (given up by a DLQ fast-forward)",
)
def dlq_list(
    name: str,
    group_id: str | None,
    message_id: str | None,
    since_ms: int | None,
    until_ms: int | None,
    limit: int,
    status: str,
) -> None:
    """DLQ records with their status and failure reason (error class, message, source)."""
    registry, metadata = _stores()
    sub = registry.get(name)
    echo_json(
        ops.dlq_list(get_settings(), metadata, sub, group_id, message_id, since_ms, until_ms, limit, status)
    )


@dlq.command("unsideline")
@click.argument("name")
@click.option("--group", "group_id")
@click.option("--message-id")
@click.option("--since-ms", type=int, help="failed at or after (epoch ms)")
@click.option("--until-ms", type=int, help="failed at or before (epoch ms)")
@click.option("--all", "everything", is_flag=True, help="every unresolved DLQ message")
def dlq_unsideline(
    name: str,
    group_id: str | None,
    message_id: str | None,
    since_ms: int | None,
    until_ms: int | None,
    everything: bool,
) -> None:
    """Replay the selected unresolved DLQ messages through RQ in group order (subscription stopped).

    A replay that fails again goes back to DLQ once (reason replay-failed); nothing loops.
    """
    selection = ReplaySelection(group_id, message_id, since_ms, until_ms)
    if selection == ReplaySelection() and not everything:
        raise click.UsageError("select messages with --group, --message-id, --since-ms/--until-ms, or --all")
    registry, metadata = _stores()
    echo_json(unsideline(get_settings(), registry, metadata, name, selection))
