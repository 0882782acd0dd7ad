"""Entry point of the `hubstream` console script."""

from __future__ import annotations

import click

from app.cli.batch import batch
from app.cli.common import HubstreamGroup
from app.cli.consumer import consumer
from app.cli.eventstore import es
from app.cli.hub import hub
from app.cli.pipeline import pipeline
from app.cli.run import run
from app.cli.spark import spark
from app.cli.stack import stack
from app.cli.subscription import subscription
from app.cli.topic import produce, topic
from app.cli.worker import worker


@click.group(cls=HubstreamGroup)
@click.version_option(package_name="hubstream")
def cli() -> None:
    """hubstream: a Kafka-native stream processor."""


cli.add_command(stack)
cli.add_command(topic)
cli.add_command(produce)
cli.add_command(worker)
cli.add_command(run)
# capability command groups (one line each):
cli.add_command(batch)
cli.add_command(consumer)
cli.add_command(es)
cli.add_command(hub)
cli.add_command(pipeline)
cli.add_command(subscription)
cli.add_command(spark)


if __name__ == "__main__":
    cli()
