"""Carlyle's own service scenarios (ServiceTests.scala) against a real worker, through the HTTP client,
plus the error contract of the API and completion events on the completions topic."""

from __future__ import annotations

import random
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from app.batch.client import BatchClient
from app.batch.errors import BatchClosed, BatchNotFound
from app.errors import InvalidInput
from app.settings import Settings
from tests.integration.batch.conftest import BatchWorker, read_completions

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(batch_worker: BatchWorker) -> Iterator[BatchClient]:
    with BatchClient(batch_worker.url) as opened:
        yield opened


def completions_of(ack_result: list[dict[str, object]], batch_id: int) -> list[dict[str, object]]:
    return [c for c in ack_result if c["batchId"] == batch_id]


@pytest.mark.parametrize("size", [1000, 25_000 + random.randrange(1000)])
def test_close_then_ack_all_completes(client: BatchClient, size: int) -> None:
    batch_id = client.create_exact()
    items = client.add_item_ids(batch_id, size)
    assert len(items) == size == len(set(items))
    got = client.get_exact(batch_id)
    assert (got["isComplete"], got["isClosed"]) == (False, False)
    assert client.close_exact(batch_id) is False
    assert completions_of(client.ack(items), batch_id) == [{"batchId": batch_id, "userKey": None}]
    got = client.get_exact(batch_id)
    assert (got["isComplete"], got["isClosed"]) == (True, True)


def test_first_ack_then_all_items_again(client: BatchClient) -> None:
    batch_id = client.create_exact()
    items = client.add_item_ids(batch_id, 25_000 + random.randrange(1000))
    assert client.close_exact(batch_id) is False
    assert completions_of(client.ack(items[:1]), batch_id) == []
    assert len(completions_of(client.ack(items), batch_id)) == 1
    assert completions_of(client.ack(items), batch_id) == []  # a complete batch is reported once
    assert client.get_exact(batch_id)["isComplete"] is True


def test_user_key_and_ack_before_close(client: BatchClient, batch_worker: BatchWorker) -> None:
    batch_id = client.create_exact(user_key="foo")
    items = client.add_item_ids(batch_id, 1000)
    assert completions_of(client.ack(items), batch_id) == []  # not closed: cannot be complete yet
    assert client.get_exact(batch_id)["isComplete"] is False
    assert client.close_exact(batch_id) is True  # the close completes it
    got = client.get_exact(batch_id)
    assert (got["userKey"], got["isComplete"], got["isClosed"]) == ("foo", True, True)
    events = read_completions(
        batch_worker.env["KAFKA_BOOTSTRAP"], batch_worker.env["BATCH_COMPLETIONS_TOPIC"]
    )
    mine = [e for e in events if e["batchId"] == batch_id]
    assert [(e["kind"], e["userKey"]) for e in mine] == [("exact", "foo")]
    assert isinstance(mine[0]["completedAtMs"], int)


@pytest.mark.parametrize("user_key", [None, "foo"])
def test_estimated_batches(client: BatchClient, user_key: str | None) -> None:
    batch_id = client.create_estimated(5, user_key=user_key)
    for _ in range(5):
        (result,) = client.decr({batch_id: 1})
        assert result == {"batchId": batch_id, "userKey": user_key, "isComplete": False}
    got = client.get_estimated(batch_id)
    assert (got["isComplete"], got["isClosed"], got["userKey"], got["pending"]) == (False, False, user_key, 0)
    assert client.close_estimated(batch_id) is True
    client.delete_estimated(batch_id)
    with pytest.raises(BatchNotFound):
        client.get_estimated(batch_id)


def test_estimated_incr_then_close_then_last_decr(client: BatchClient) -> None:
    batch_id = client.create_estimated(1)
    assert client.incr(batch_id, 2)["pending"] == 3
    assert client.close_estimated(batch_id) is False
    assert client.decr({batch_id: 2})[0]["isComplete"] is False
    assert client.decr({batch_id: 1})[0]["isComplete"] is True


def _post(batch_worker: BatchWorker, path: str, body: Any, key: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        batch_worker.url + path,
        data=orjson.dumps(body),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, orjson.loads(err.read())


def test_calls_retried_with_their_idempotency_key_count_once(
    client: BatchClient, batch_worker: BatchWorker
) -> None:
    """A client that lost the answer sends the same call again: it must learn the groups the first
    call created (not create more), and an incr or decr must move the counter once."""
    batch_id = client.create_exact()
    key = str(uuid.uuid4())
    first = _post(batch_worker, "/api/v1/batch/exact/items", {"batchId": batch_id, "items": 700}, key)
    again = _post(batch_worker, "/api/v1/batch/exact/items", {"batchId": batch_id, "items": 700}, key)
    assert first[0] == 200 and again == first
    assert client.get_exact(batch_id)["totalItems"] == 700
    estimated = client.create_estimated(1)
    incr = f"/api/v1/batch/estimated/{estimated}/incr?by=2"
    assert _post(batch_worker, incr, {}, key)[1]["pending"] == 3
    assert _post(batch_worker, incr, {}, key)[1]["pending"] == 3
    decr, decr_key = {"acks": [{"batchId": estimated, "by": 3}]}, str(uuid.uuid4())
    assert _post(batch_worker, "/api/v1/batch/estimated/decr", decr, decr_key)[0] == 200
    assert _post(batch_worker, "/api/v1/batch/estimated/decr", decr, decr_key)[0] == 200
    assert client.get_estimated(estimated)["pending"] == 0
    status, answer = _post(batch_worker, incr, {}, "k" * 200)
    assert status == 400 and "Idempotency-Key" in answer["reason"]


def test_error_contract(client: BatchClient, batch_worker: BatchWorker) -> None:
    batch_id = client.create_exact()
    items = client.add_item_ids(batch_id, 10)
    with pytest.raises(InvalidInput, match="not-an-id"):
        client.ack([items[0], "not-an-id"])
    with pytest.raises(BatchNotFound):
        client.ack([f"{batch_id + 4 * 1000}:{uuid.uuid4()}:0"])
    with pytest.raises(BatchNotFound):
        client.get_exact(batch_id + 4 * 1000)
    with pytest.raises(InvalidInput):
        client.add_items(batch_id, 0)
    client.close_exact(batch_id)
    with pytest.raises(BatchClosed):
        client.add_items(batch_id, 5)
    assert client.get_exact(batch_id)["pendingItems"] == 10  # the failed ack changed nothing
    for method, path, body in [
        ("POST", "/api/v1/batch/exact/items", b"{not json"),
        ("GET", "/api/v1/batch/exact/abc", None),
        ("POST", "/api/v1/batch/estimated/decr", orjson.dumps({"acks": [{"batchId": "nope", "by": 1}]})),
        ("DELETE", "/api/v1/batch/exact/open?since=yesterday", None),
    ]:
        json_type = {"Content-Type": "application/json"}
        request = urllib.request.Request(batch_worker.url + path, data=body, method=method, headers=json_type)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 400
        assert "reason" in orjson.loads(err.value.read())
    # urllib's default body type is a form's: a POST a cross-site page could send, refused
    form = urllib.request.Request(batch_worker.url + "/api/v1/batch/exact", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(form, timeout=10)
    assert err.value.code == 415 and orjson.loads(err.value.read())["error"] == "UnsupportedMediaType"


def test_cli_create_add_ack_close_get(batch_worker: BatchWorker) -> None:
    from click.testing import CliRunner

    from app.cli.batch import batch

    def run(*args: str, stdin: str | None = None) -> Any:
        result = CliRunner().invoke(batch, ["--url", batch_worker.url, *args], input=stdin)
        assert result.exit_code == 0, result.output
        return result.output

    batch_id = orjson.loads(run("create", "--user-key", "cli"))["batchId"]
    ids = run("add", str(batch_id), "70", "--ids").split()
    assert len(ids) == 70 and ids[0].startswith(f"{batch_id}:")
    assert orjson.loads(run("close", str(batch_id))) == {"isComplete": False}
    done = orjson.loads(run("ack", "--stdin", stdin="\n".join(ids)))
    assert done == {"batchCompletions": [{"batchId": batch_id, "userKey": "cli"}]}
    assert orjson.loads(run("get", str(batch_id)))["isComplete"] is True
    bad = CliRunner().invoke(batch, ["--url", batch_worker.url, "ack", "nonsense"])
    assert bad.exit_code == 2 and "nonsense" in bad.output


def test_delete_open_and_closed_since(client: BatchClient, stack: Settings) -> None:
    from datetime import UTC, datetime, timedelta

    open_id = client.create_exact()
    client.add_items(open_id, 100)
    closed_id = client.create_exact()
    client.add_items(closed_id, 64)
    client.close_exact(closed_id)
    past = datetime.now(UTC) - timedelta(hours=1)
    assert client.delete_expired(closed=False, since=past) == {"batchesRemoved": 0, "itemsRemoved": 0}
    future = datetime.now(UTC) + timedelta(seconds=1)
    removed_open = client.delete_expired(closed=False, since=future)
    assert removed_open["batchesRemoved"] >= 1 and removed_open["itemsRemoved"] >= 100
    with pytest.raises(BatchNotFound):
        client.get_exact(open_id)
    assert client.get_exact(closed_id)["isClosed"] is True
    removed_closed = client.delete_expired(closed=True, since=future)
    assert removed_closed["batchesRemoved"] >= 1
    with pytest.raises(BatchNotFound):
        client.get_exact(closed_id)


def test_the_largest_add_the_settings_allow_is_written_and_the_worker_goes_on(
    client: BatchClient, batch_worker: BatchWorker
) -> None:
    """Its writes are one changelog record; before, an add this size made a record the producer
    refused after the answer, and the worker stopped."""
    most = Settings().batch_max_items_per_add
    batch_id = client.create_exact()
    groups = client.add_items(batch_id, most)
    assert sum(g.upto for g in groups) == most
    got = client.get_exact(batch_id)
    assert (got["totalItems"], got["pendingItems"]) == (most, most)
    with pytest.raises(InvalidInput, match=f"from 1 to {most}"):
        client.add_items(batch_id, most + 1)
    after = client.create_exact()  # the worker still takes writes
    assert len(client.add_item_ids(after, 10)) == 10
    assert batch_worker.proc.poll() is None, batch_worker.log()[-3000:]
