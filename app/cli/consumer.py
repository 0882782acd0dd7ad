"""`hubstream consumer …`: run a copy of a library consumer, list its members, show a key's state,
browse its dead letters."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import asdict
from typing import Any

import click

from app import crashpoints
from app.cli.common import HubstreamGroup, echo_json
from app.consumer import (
    ConsumerSettings,
    OnDlq,
    RetryPolicy,
    ThrottlePolicy,
    key_from_header,
    record_key,
    run_forever,
)
from app.consumer.inspect import ask_owner, dead_letters, key_state, members
from app.consumer.replay import replay_dead_letters
from app.errors import InvalidInput
from app.kafka.broker import broker_for
from app.observability.json_logs import configure_logging
from app.settings import get_settings
from app.subscription.replay import ReplaySelection


def load_callable(spec: str) -> Any:
    """`package.module:attribute` -> the attribute; InvalidInput naming what is missing."""
    if os.getcwd() not in sys.path:  # the user's module, as `python -m` would find it
        sys.path.insert(0, os.getcwd())
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidInput(f"{spec!r}: expected MODULE:NAME, e.g. examples.order_totals:handle")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"cannot import {module_name!r}: {exc}") from exc
    found = getattr(module, attr, None)
    if not callable(found):
        raise InvalidInput(f"{module_name!r} has no callable {attr!r}")
    return found


@click.group(cls=HubstreamGroup)
def consumer() -> None:
    """Library consumers: key-ordered concurrency, retries and DLQ for any topic."""


@consumer.command()
@click.argument("handler")
@click.option("--topic", default="", help="topic to consume")
@click.option("--composite-topic", help="composite topic to consume (instead of --topic)")
@click.option("--name", required=True, help="consumer name (Kafka group; prefix of its own topics)")
@click.option("--key-header", help="ordering key from this header (default: the record key)")
@click.option("--filter", "filter_spec", help="MODULE:NAME of a predicate; false = done without the handler")
@click.option(
    "--concurrency", type=int, default=64, show_default=True, help="messages in flight in this copy"
)
@click.option("--global-in-flight", type=int, help="messages in flight across all copies")
@click.option("--max-attempts", type=int, default=3, show_default=True)
@click.option("--min-backoff-s", type=float, default=1.0, show_default=True)
@click.option("--max-backoff-s", type=float, default=60.0, show_default=True)
@click.option(
    "--on-dlq", type=click.Choice([o.value for o in OnDlq]), default="block_group", show_default=True
)
@click.option("--throttle-error-rate", type=float, help="slow all copies above this failure rate (0-1]")
@click.option("--throttled-per-s", type=float, default=50.0, show_default=True)
@click.option(
    "--metrics-port", type=click.IntRange(1, 65535), help="serve Prometheus metrics on 127.0.0.1:PORT"
)
def run(
    handler: str,
    topic: str,
    composite_topic: str | None,
    name: str,
    key_header: str | None,
    filter_spec: str | None,
    concurrency: int,
    global_in_flight: int | None,
    max_attempts: int,
    min_backoff_s: float,
    max_backoff_s: float,
    on_dlq: str,
    throttle_error_rate: float | None,
    throttled_per_s: float,
    metrics_port: int | None,
) -> None:
    """Run one copy of consumer --name over --topic (or --composite-topic), calling HANDLER
    (MODULE:NAME, an async function of one Message) until SIGINT/SIGTERM. Start more copies to
    scale."""
    configure_logging(get_settings().log_format)
    try:
        retry = RetryPolicy(
            max_attempts=max_attempts, min_backoff_s=min_backoff_s, max_backoff_s=max_backoff_s
        )
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    settings = ConsumerSettings(
        name=name,
        topic=topic,
        composite_topic=composite_topic,
        bootstrap=get_settings().bootstrap,
        metadata_topic=get_settings().metadata_topic,
        replication_factor=get_settings().kafka_replication_factor,
        clock_skew_s=get_settings().clock_skew_s,
        metadata_refresh_s=get_settings().metadata_refresh_s,
        broker_kind=get_settings().broker_kind,
        key_of=key_from_header(key_header) if key_header else record_key,
        concurrency=concurrency,
        global_in_flight=global_in_flight,
        retry=retry,
        on_dlq=OnDlq(on_dlq),
        filter=load_callable(filter_spec) if filter_spec else None,
        throttle=ThrottlePolicy(throttle_error_rate, throttled_per_s=throttled_per_s)
        if throttle_error_rate is not None
        else None,
        metrics_port=metrics_port,
    )
    crashpoints.arm(get_settings().crash_at)  # fault injection for crash tests; nothing when unset
    stats = run_forever(settings, load_callable(handler))
    echo_json(vars(stats))


@consumer.command("members")
@click.argument("name")
def members_cmd(name: str) -> None:
    """The live copies of consumer NAME: partitions, in flight, counts and lag."""
    echo_json([asdict(m) for m in members(broker_for(get_settings()), name)])


@consumer.command("state")
@click.argument("name")
@click.argument("key")
@click.option("--from-changelog", is_flag=True, help="read <NAME>-state only; do not ask the owning copy")
@click.option("--timeout-s", type=float, default=5.0, show_default=True, help="wait for the owner's answer")
@click.option("--all-partitions", is_flag=True, help="ask every partition's owner, not only the key's")
def state_cmd(name: str, key: str, from_changelog: bool, timeout_s: float, all_partitions: bool) -> None:
    """The state of ordering KEY, answered by the copy that owns it (its state, the record of the
    key in flight, its records waiting), or from the changelog when no owner answers in time;
    `source` says which. --from-changelog: the key state per partition of <NAME>-state only ({}
    for a key that never failed)."""
    broker = broker_for(get_settings())
    if from_changelog:
        echo_json(key_state(broker, name, key))
        return
    echo_json(ask_owner(broker, name, key, timeout_s, everywhere=all_partitions).to_json())


@consumer.command("dlq")
@click.argument("name")
@click.option("--limit", type=int, default=100, show_default=True)
def dlq_cmd(name: str, limit: int) -> None:
    """The dead letters of consumer NAME with the reason each failed."""
    if limit < 1:
        raise InvalidInput("--limit must be at least 1")
    echo_json(dead_letters(broker_for(get_settings()), name, limit))


@consumer.command("replay")
@click.argument("name")
@click.option("--key", "key", help="only this ordering key's dead letters")
@click.option("--message-id")
@click.option("--since-ms", type=int, help="failed at or after (epoch ms)")
@click.option("--until-ms", type=int, help="failed at or before (epoch ms)")
@click.option("--all", "everything", is_flag=True, help="every unresolved dead letter")
def replay_cmd(
    name: str,
    key: str | None,
    message_id: str | None,
    since_ms: int | None,
    until_ms: int | None,
    everything: bool,
) -> None:
    """Replay the selected unresolved dead letters of consumer NAME through its retry topic, in each
    key's order (every copy stopped). A replay that fails goes back to DLQ once; nothing loops."""
    selection = ReplaySelection(key, message_id, since_ms, until_ms)
    if selection == ReplaySelection() and not everything:
        raise click.UsageError(
            "select dead letters with --key, --message-id, --since-ms/--until-ms, or --all"
        )
    crashpoints.arm(get_settings().crash_at)  # fault injection for crash tests; nothing when unset
    echo_json(replay_dead_letters(broker_for(get_settings()), name, selection))
