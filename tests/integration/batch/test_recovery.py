"""Kill -9 of the worker owning a batch in the middle of its Kafka acks; a replacement worker with
an EMPTY datadir recovers the batch from the changelog alone, and the batch completes exactly when
its last item is acked (not before, and reported once)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.batch.client import BatchClient
from app.settings import Settings
from tests.integration.batch.conftest import (
    read_completions,
    send_acks,
    start_worker,
    wait_for,
    wait_serving,
    worker_env,
)

pytestmark = [pytest.mark.integration]

ITEMS = 20_000


def pending(client: BatchClient, batch_id: int) -> int:
    value: int = client.get_exact(batch_id)["pendingItems"]
    return value


def test_kill9_mid_acks_then_recover_from_changelog(
    stack: Settings, unique: str, tmp_path: Path, batch_client: Callable[[str], BatchClient]
) -> None:
    env = worker_env(stack, unique)
    first = start_worker(env, tmp_path / "first")
    second = None
    try:
        wait_serving([first])
        client = batch_client(first.url)
        batch_id = client.create_exact(user_key="recovery")
        items = client.add_item_ids(batch_id, ITEMS)
        assert client.close_exact(batch_id) is False
        send_acks(env, items[:12_000])
        wait_for(lambda: pending(client, batch_id) == ITEMS - 12_000, what="first acks applied")
        # A few single-record updates last, so the changelog ends with small record batches.
        assert client.ack(items[12_000:12_003]) == []
        before_kill = client.get_exact(batch_id)
        assert before_kill["pendingItems"] == ITEMS - 12_003
        first.kill9()

        second = start_worker(env, tmp_path / "second")  # fresh HUBSTREAM_HOME: nothing on disk
        wait_serving([second])
        client = batch_client(second.url)
        assert client.get_exact(batch_id) == before_kill, "the replacement lost changelog updates"

        send_acks(env, items[10_000:-1])  # overlaps what was acked before the kill; all but the last
        wait_for(lambda: pending(client, batch_id) == 1, what="all but one item acked")
        assert client.get_exact(batch_id)["isComplete"] is False
        topic = env["BATCH_COMPLETIONS_TOPIC"]
        assert [e for e in read_completions(stack.bootstrap, topic) if e["batchId"] == batch_id] == []

        send_acks(env, items[-1:])
        wait_for(lambda: client.get_exact(batch_id)["isComplete"], what="completion after the last ack")
        events = wait_for(
            lambda: [e for e in read_completions(stack.bootstrap, topic) if e["batchId"] == batch_id],
            what="completion event",
        )
        assert [(e["kind"], e["userKey"]) for e in events] == [("exact", "recovery")]
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_restart_on_its_own_datadir(
    stack: Settings, unique: str, tmp_path: Path, batch_client: Callable[[str], BatchClient]
) -> None:
    """A worker restarted on its own datadir serves its batches again. On the embedded broker this
    needs app.kafka.faust_compat (true changelog end offsets): without it Faust raised
    ConsistencyError (persisted offset higher than the under-reported highwater) at start."""
    env = worker_env(stack, unique)
    worker = start_worker(env, tmp_path / "home")
    try:
        wait_serving([worker])
        client = batch_client(worker.url)
        batch_id = client.create_exact()
        items = client.add_item_ids(batch_id, 20_000)  # several changelog records written back to back
        client.ack(items[:5])
        before = client.get_exact(batch_id)
        worker.stop()
        worker = start_worker(env, tmp_path / "home")
        wait_serving([worker])
        assert "ConsistencyError" not in worker.log()
        assert batch_client(worker.url).get_exact(batch_id) == before
    finally:
        worker.stop()
