"""Shared CLI plumbing: one error path (message on stderr, non-zero exit) and JSON output."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
import orjson

from app.errors import ConfigError, HubstreamError
from app.observability.json_logs import faust_logging_config
from app.service_errors import REFUSED, UNANSWERED, service_failure
from app.settings import get_settings, worker_url

T = TypeVar("T")

__all__ = ["URL", "WORKER_URL", "HubstreamGroup", "echo_json", "run_faust_worker"]


def echo_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


class _Url(click.ParamType):
    """An http(s) base URL with a host and, if any, a port number: checked before a request."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        try:
            parts = urlsplit(text)
            _ = parts.port  # a port that is not a number raises here
        except ValueError as exc:
            self.fail(f"{text!r} is not a URL: {exc}", param, ctx)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            self.fail(f"{text!r} is not an http(s) URL with a host (http://127.0.0.1:6066)", param, ctx)
        return text


URL = _Url()


class _WorkerUrl(click.ParamType):
    """The URL a worker advertises (`app.settings.worker_url`): scheme, host and port."""

    name = "worker-url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return worker_url(str(value), "--worker-url")
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


WORKER_URL = _WorkerUrl()


class HubstreamGroup(click.Group):
    """A click group whose commands end with `error: …` on stderr and a non-zero exit on a
    HubstreamError (2 for bad input) or a backing service's failure (1), not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        return run_guarded(lambda: super(HubstreamGroup, self).invoke(ctx))


def run_guarded(body: Callable[[], T]) -> T:
    """For top-level commands (not in a group): the same error path as HubstreamGroup."""
    try:
        return body()
    except HubstreamError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2 if exc.http_status == 400 else 1)
    except (*UNANSWERED, *REFUSED) as exc:
        click.echo(f"error: {service_failure(exc)}", err=True)
        sys.exit(1)


def run_faust_worker(app: Any, loglevel: str) -> None:
    """Run a Faust app's worker in the foreground, without Faust's start-up spinner.

    At a level above INFO, Faust keeps its spinner turning on every log record by setting the
    root logger to DEBUG and filtering only in its handler: every debug line of aiokafka, azure and
    Faust itself then built a record that was thrown away (about a tenth of a busy worker's CPU).
    """
    from faust.worker import Worker

    logging_config = faust_logging_config(get_settings().log_format, loglevel)
    worker = Worker(app, loglevel=loglevel, debug=False, logging_config=logging_config)  # not F_DEBUG
    worker.spinner = None
    worker.execute_from_commandline()
