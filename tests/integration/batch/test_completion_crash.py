"""The completion event is published at least once, whatever the moment a worker dies: killed
(SIGKILL, by an armed crash point) in the middle of the last ack's table write (its intent written,
its keys not), before the event was sent, or after it was confirmed but before that was recorded,
the restarted worker completes the batch and sends the event on the redelivered ack (or a get)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.batch.client import BatchClient
from app.settings import Settings
from tests.integration.batch.conftest import (
    read_completions,
    start_worker,
    wait_for,
    wait_serving,
    worker_env,
)
from tests.support.soak import first_in_every_suite

pytestmark = pytest.mark.integration


# The 4th multi-key write is the last ack's (create, add items and the first ack come before it).
POINTS = ["batch.completion.send:1", "batch.table.intent_written:4", "batch.completion.confirm:1"]


@pytest.mark.parametrize("point", first_in_every_suite(POINTS, 1))
def test_a_worker_killed_around_the_completion_publishes_it_after_restart(
    stack: Settings,
    unique: str,
    tmp_path: Path,
    point: str,
    batch_client: Callable[[str], BatchClient],
) -> None:
    env = worker_env(stack, unique)
    first = start_worker(dict(env, HUBSTREAM_CRASH_AT=f"{point}:kill"), tmp_path / "first")
    second = None
    topic = env["BATCH_COMPLETIONS_TOPIC"]
    try:
        wait_serving([first])
        client = batch_client(first.url)
        batch_id = client.create_exact(user_key="crash")
        items = client.add_item_ids(batch_id, 10)
        client.ack(items[:-1])
        client.close_exact(batch_id)
        with pytest.raises(Exception):  # noqa: B017 - the worker dies while answering the last ack
            client.ack(items[-1:])
        first.proc.wait(30)
        assert first.proc.returncode == -9, "killed at the crash point"

        second = start_worker(env, tmp_path / "second")
        wait_serving([second])
        client = batch_client(second.url)
        client.ack(items[-1:])  # the caller got no answer: it sends the ack again
        state = client.get_exact(batch_id)
        assert state["isComplete"] is True, state

        def completions() -> list[dict[str, object]]:
            return [e for e in read_completions(stack.bootstrap, topic) if e["batchId"] == batch_id]

        events = wait_for(completions, what="completion event")
        assert {(e["kind"], e["userKey"]) for e in events} == {("exact", "crash")}
        client.get_exact(batch_id)  # confirmed and recorded: a get sends nothing more
        assert len(completions()) == len(events)
    finally:
        first.stop()
        if second is not None:
            second.stop()
