"""Logs as one JSON object a line (LOG_FORMAT=json), for collectors that index fields: a record's
time, level, logger and message, its exception, and the ids it is about when the code logging it
names them (`extra=`): the subscription or library consumer, the message id and ordering key,
the record's topic, partition and offset, the batch id.

The records are the same as the text logs' (secrets are scrubbed when a record is made, by
app.web.security's record factory), so both formats say the same.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["CONTEXT_FIELDS", "JsonFormatter", "configure_logging", "faust_logging_config"]

CONTEXT_FIELDS = (
    "subscription",
    "consumer",
    "message_id",
    "group_id",
    "topic",
    "partition",
    "offset",
    "batch_id",
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        return orjson.dumps(line, default=str).decode()


def faust_logging_config(log_format: str, loglevel: str) -> dict[str, Any] | None:
    """What a Faust worker's `logging_config` takes (merged over Faust's own); None for text."""
    if log_format != "json":
        return None
    level = logging.getLevelName(loglevel.upper())
    return {
        "merge": True,
        "version": 1,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "default": {
                "level": level,
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stdout",
            }
        },
    }


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    """The root logger of a process that is no Faust worker (a library consumer's CLI copy)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level, handlers=[handler], force=True)
