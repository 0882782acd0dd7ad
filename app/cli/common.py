"""Shared CLI plumbing: one error path (message on stderr, non-zero exit) and JSON output."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from app.errors import HubstreamError

__all__ = ["HubstreamGroup", "echo_json"]


def echo_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


class HubstreamGroup(click.Group):
    """A click group that turns any HubstreamError into `error: …` and exit status 1 (2 for bad input)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HubstreamError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2 if exc.http_status == 400 else 1)


def run_guarded(body: Any) -> None:
    """For top-level commands (not in a group): same error path as HubstreamGroup."""
    try:
        body()
    except HubstreamError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2 if exc.http_status == 400 else 1)
