"""`hubstream stack up|down|status`."""

from __future__ import annotations

import click

from app.cli.common import HubstreamGroup, echo_json
from app.settings import get_settings
from app.stack import stack_down, stack_status, stack_up
from app.stack.services import start_workers


@click.group(cls=HubstreamGroup)
def stack() -> None:
    """Start, stop and inspect the embedded local stack."""


@stack.command()
@click.option("--workers", type=int, default=0, show_default=True, help="also start N background workers")
def up(workers: int) -> None:
    """Start the broker and Cosmos endpoint (unless configured externally), check MySQL,
    and optionally start N background workers on WEB_PORT, WEB_PORT+1, …"""
    settings = get_settings()
    report: dict[str, object] = dict(stack_up(settings).as_dict())
    if workers:
        report["workers"] = start_workers(settings, workers)
    echo_json(report)


@stack.command()
def down() -> None:
    """Stop only what `stack up` and `hubstream run` started."""
    stopped = stack_down(get_settings())
    click.echo(f"stopped: {', '.join(stopped) if stopped else 'nothing'}")


@stack.command()
def status() -> None:
    """Show each service and worker."""
    echo_json(stack_status(get_settings()))
