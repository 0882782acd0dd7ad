"""`hubstream run` (what `make run` calls): the main job on the embedded stack."""

from __future__ import annotations

import click
import orjson

from app.cli.common import WORKER_URL, run_guarded
from app.settings import get_settings


@click.command()
@click.option("--events", type=int, default=200_000, show_default=True, help="sample events to generate")
@click.option("--recipients", type=int, default=1000, show_default=True)
@click.option("--invalid", type=int, default=25, show_default=True, help="invalid rows mixed into the sample")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--timeout-s", type=float, default=1800.0, show_default=True)
@click.option("--topic", default="data-available", show_default=True, help="composite topic of the flow")
@click.option("--subscription", default="hub-feed", show_default=True, help="subscription feeding the hub")
@click.option(
    "--worker-url",
    "worker_urls",
    multiple=True,
    type=WORKER_URL,
    help="a worker running elsewhere, by the URL it advertises (repeat for each); none is started then",
)
def run(
    events: int,
    recipients: int,
    invalid: int,
    workers: int,
    timeout_s: float,
    topic: str,
    subscription: str,
    worker_urls: tuple[str, ...],
) -> None:
    """Start the stack and workers, ingest a sample with Spark, let the subscription fill the hub
    while a pipeline mirrors into MySQL, let every actor peek and dequeue until the hub is empty,
    and print the counts as the last line (JSON). Workers and the dashboard keep running; `make
    stop` ends everything."""
    from app.flow.mainjob import MainJobOptions, run_main_job

    def body() -> None:
        options = MainJobOptions(
            events,
            recipients,
            invalid,
            workers,
            timeout_s=timeout_s,
            topic=topic,
            subscription=subscription,
            worker_urls=worker_urls,
        )
        counts = run_main_job(get_settings(), options)
        click.echo(orjson.dumps(counts).decode())

    run_guarded(body)
