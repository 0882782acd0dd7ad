"""`hubstream worker`: run one Faust worker in the foreground."""

from __future__ import annotations

import click

from app.settings import get_settings


@click.command()
@click.option("--loglevel", default="info", show_default=True)
def worker(loglevel: str) -> None:
    """Run a Faust worker (tables, agents, web server on WEB_HOST:WEB_PORT)."""
    from faust.worker import Worker

    from agents import build_worker

    app = build_worker(get_settings()).app
    # The app's config already carries web host/port (create_app); Worker takes no web kwargs.
    Worker(app, loglevel=loglevel).execute_from_commandline()
