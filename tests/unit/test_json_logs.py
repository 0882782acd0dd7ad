"""LOG_FORMAT=json: one JSON object a line, with the ids a record is about, scrubbed of secrets
like the text logs."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from app.observability.json_logs import JsonFormatter, faust_logging_config
from app.settings import Settings
from app.web.security import install_log_redaction

SECRET = "hub-secret-" + "x" * 32


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("hubstream.test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, out
    logger.removeHandler(handler)


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_a_line_carries_the_ids_the_record_is_about(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = captured
    about = {"subscription": "orders", "message_id": "m-1", "group_id": "g\n7", "partition": 3, "offset": 42}
    logger.warning("orders[3] offset=42: group %s to DLQ", "g\n7", extra=about)
    [line] = _lines(out)  # a newline in a value stays inside the one line
    assert line["level"] == "WARNING" and line["logger"] == "hubstream.test.json"
    assert line["message"] == "orders[3] offset=42: group g\n7 to DLQ"
    assert {k: line[k] for k in about} == about
    assert "batch_id" not in line and str(line["ts"]).endswith("+00:00")


def test_an_exception_is_a_field_and_secrets_are_scrubbed(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = captured
    install_log_redaction(Settings(HUB_JWT_SECRET=SECRET))  # type: ignore[call-arg]
    try:
        raise ValueError(f"bad token {SECRET}")
    except ValueError:
        logger.exception("refused %s", SECRET)
    [line] = _lines(out)
    assert SECRET not in out.getvalue()
    assert "ValueError" in str(line["exception"]) and line["message"] == "refused ***"


def test_a_worker_writes_json_only_when_asked() -> None:
    assert faust_logging_config("text", "info") is None
    config = faust_logging_config("json", "warn")
    assert config is not None and config["merge"] is True
    assert config["handlers"]["default"]["formatter"] == "json"
    assert config["formatters"]["json"]["()"] is JsonFormatter
