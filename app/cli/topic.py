"""`hubstream topic …` and `hubstream produce`."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from app.cli.common import HubstreamGroup, echo_json
from app.composite.jsonl import read_produce_file
from app.composite.producer import CompositeProducer
from app.composite.store import MetadataStore
from app.settings import get_settings


def _store() -> MetadataStore:
    settings = get_settings()
    return MetadataStore.of(settings)


@click.group(cls=HubstreamGroup)
def topic() -> None:
    """Composite topics: create, add storage topics, switch produce, describe."""


@topic.command()
@click.argument("name")
@click.option("--partitions", "-p", type=int, required=True, help="1, 2, 3 or a multiple of 4 or 6")
@click.option("--if-not-exists", is_flag=True, help="a topic NAME that exists is kept as it is (and printed)")
def create(name: str, partitions: int, if_not_exists: bool) -> None:
    """Create composite topic NAME with one storage topic NAME.0."""
    echo_json(_store().create(name, partitions, exist_ok=if_not_exists).to_json())


@topic.command("add-storage")
@click.argument("name")
@click.option("--partitions", "-p", type=int, required=True)
def add_storage(name: str, partitions: int) -> None:
    """Append a storage topic (the produce pointer does not move)."""
    echo_json(_store().add_storage_topic(name, partitions).to_json())


@topic.command()
@click.argument("name")
def switch(name: str) -> None:
    """Move the produce pointer to the next storage topic."""
    echo_json(_store().switch_produce(name).to_json())


@topic.command()
@click.argument("name")
def describe(name: str) -> None:
    """Storage topics, K, produce pointer and end offset per partition, as JSON."""
    echo_json(_store().describe(name))


@topic.command("list")
def list_topics() -> None:
    """Names of all composite topics."""
    echo_json(_store().names())


@click.command(cls=click.Command)
@click.argument("name")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
def produce(name: str, path: Path) -> None:
    """Produce each line {"group_id": …, "payload": …} of a JSON-lines file to composite topic NAME.

    The whole file is validated before anything is sent, so a bad line writes nothing.
    """
    from app.cli.common import run_guarded

    def body() -> None:
        settings = get_settings()
        records = read_produce_file(path, settings.max_group_id_bytes, settings.max_payload_bytes)
        with (
            CompositeProducer(settings, name) as producer,
            Progress(
                TextColumn("producing"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                transient=True,
            ) as progress,
        ):
            task = progress.add_task("produce", total=len(records))
            for i, (group_id, payload) in enumerate(records, 1):
                producer.produce(group_id, payload)
                if i % 5000 == 0:
                    progress.update(task, completed=i)
            progress.update(task, completed=len(records))
        click.echo(orjson.dumps({"topic": name, "produced": len(records)}).decode())

    run_guarded(body)
