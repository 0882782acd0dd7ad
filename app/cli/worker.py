"""`hubstream worker`: run one Faust worker in the foreground."""

from __future__ import annotations

import click

from app.cli.common import run_faust_worker
from app.settings import get_settings


@click.command()
@click.option("--loglevel", default="info", show_default=True)
def worker(loglevel: str) -> None:
    """Run a Faust worker (tables, agents, web server on WEB_HOST:WEB_PORT)."""
    from agents import build_worker

    app = build_worker(get_settings()).app
    # The app's config already carries web host/port (create_app); Worker takes no web kwargs.
    run_faust_worker(app, loglevel)
