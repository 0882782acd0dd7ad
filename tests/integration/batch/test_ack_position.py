"""An ack record lost on its way to the ack agent, its offset committed all the same (as Faust
does when a rebalance drops a buffered record and the next one is acked: a committed offset of 0
counts as none, so nothing stops the commit): the worker reads it again from the position its
table keeps, and the batch completes. Before the table kept its own position the record was lost
for good and the batch never completed (seen in the main-flow crash test: 1,268 items pending
forever). The crash point `batch.acks.delivered`, armed with `raise`, drops the record."""

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

ITEMS = 3_000


def send_record(env: dict[str, str], item_ids: list[str]) -> None:
    assert send_acks(env, item_ids) == 1


@pytest.mark.parametrize("lost", ["a record in the middle", "the last record"])
def test_a_lost_ack_record_is_read_again(
    stack: Settings, unique: str, tmp_path: Path, lost: str, batch_client: Callable[[str], BatchClient]
) -> None:
    env = worker_env(stack, unique, HUBSTREAM_CRASH_AT="batch.acks.delivered:2:raise")
    worker = start_worker(env, tmp_path / "home")
    try:
        wait_serving([worker])
        client = batch_client(worker.url)
        batch_id = client.create_exact(user_key=unique)
        items = client.add_item_ids(batch_id, ITEMS)
        assert client.close_exact(batch_id) is False
        send_record(env, items[:10])
        wait_for(lambda: client.get_exact(batch_id)["pendingItems"] == ITEMS - 10, what="first acks")
        if lost == "a record in the middle":
            send_record(env, items[10:1_000])  # dropped on its way in
            send_record(env, items[1_000:])  # comes after a hole: the agent seeks back
        else:
            send_record(env, items[10:])  # dropped, and nothing follows: the watchdog seeks back
        wait_for(lambda: client.get_exact(batch_id)["isComplete"], timeout_s=60, what="batch complete")
        assert "reading again from 1" in worker.log()
        events = wait_for(
            lambda: [
                e
                for e in read_completions(stack.bootstrap, env["BATCH_COMPLETIONS_TOPIC"])
                if e["batchId"] == batch_id
            ],
            what="completion event",
        )
        assert [e["userKey"] for e in events] == [unique]
    finally:
        worker.stop()
