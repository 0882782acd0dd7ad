"""A worker started with LOG_FORMAT=json logs one JSON object a line, and a retry's line carries
the subscription, the message id, the group and the record's place as fields."""

from __future__ import annotations

import orjson
import pytest

from app.composite.store import MetadataStore
from app.settings import Settings
from tests.integration.subscription.conftest import (
    Endpoint,
    Workers,
    produce_groups,
    started_http_subscription,
)
from tests.support.ports import free_port
from tests.support.waiting import async_wait_until


@pytest.mark.asyncio
async def test_a_retry_is_a_json_line_with_its_ids(
    stack: Settings, metadata: MetadataStore, workers: Workers, endpoint: Endpoint, unique: str
) -> None:
    name = f"jsonlog-{unique}"
    endpoint.transient = {"g0"}  # g0's first attempts answer 503: each goes to RQ, logged
    _sub, registry = started_http_subscription(stack, metadata, workers, endpoint, name, backoff_s=0.2)
    try:
        port = free_port()
        workers.start(port, LOG_FORMAT="json")
        produce_groups(stack, name, range(4), 2)
        await async_wait_until(lambda: len(endpoint.delivered.get("g0", [])) == 2, 120, "g0 delivered")
        log = workers.home / f"worker-{port}.log"
        lines = [orjson.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        assert lines and all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
        retries = [line for line in lines if "to RQ after" in str(line["message"])]
        assert retries, "a retry was logged"
        retry = retries[0]
        assert retry["subscription"] == name and retry["group_id"] == "g0"
        assert str(retry["message_id"]) and retry["topic"] == f"{name}.0" and isinstance(retry["offset"], int)
        text = [line for line in log.read_text().splitlines() if line.strip() and not line.startswith("{")]
        assert not text, f"lines that are not JSON: {text[:5]}"
    finally:
        registry.close()
