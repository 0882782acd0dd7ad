"""Security: a worker bound beyond loopback needs HUBSTREAM_ADMIN_TOKEN, which then guards every
mutating endpoint; actor endpoints take actor JWTs only; reads and the dashboard stay open; secrets
never reach the log, even when bad input carries them into a log line."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import jwt
import orjson
import pytest
from confluent_kafka import Producer

from agents.openapi import worker_openapi_document
from app.settings import EMULATOR_KEY, Settings
from tests.integration.web.worker import HUBSTREAM, REPO, Worker, start_worker, worker_env
from tests.support.waiting import wait_until

ADMIN_TOKEN = f"admin-{uuid.uuid4().hex}"
READ_TOKEN = f"read-{uuid.uuid4().hex}"
JWT_SECRET = f"jwt-secret-{uuid.uuid4().hex}"
PATH_VALUES = {"batchId": "1", "name": "nope", "group_id": "g", "domain": "timeseries", "key": "k"}


@pytest.fixture(scope="module")
def guarded_worker(stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    unique = uuid.uuid4().hex[:10]
    home = tmp_path_factory.mktemp("secure-worker")
    env = worker_env(
        stack,
        unique,
        home,
        WEB_HOST="0.0.0.0",
        HUBSTREAM_ADMIN_TOKEN=ADMIN_TOKEN,
        HUBSTREAM_READ_TOKEN=READ_TOKEN,
        HUB_JWT_SECRET=JWT_SECRET,
        COSMOS_KEY=EMULATOR_KEY,
    )
    worker = start_worker(env, home)
    try:
        yield worker
    finally:
        worker.stop()


def _admin(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _actor_jwt(actor: str, secret: str = JWT_SECRET, expires_in_s: int = 300) -> str:
    return jwt.encode({"sub": actor, "exp": int(time.time()) + expires_in_s}, secret, algorithm="HS256")


def _mutating_operations() -> list[tuple[str, str]]:
    out = []
    for path, methods in worker_openapi_document()["paths"].items():
        for method in methods:
            if method in {"post", "put", "patch", "delete"}:
                out.append((method.upper(), re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], path)))
    return out


@pytest.mark.integration
def test_worker_refuses_to_bind_beyond_loopback_without_admin_token(stack: Settings, tmp_path: Path) -> None:
    env = worker_env(stack, uuid.uuid4().hex[:10], tmp_path, WEB_HOST="0.0.0.0", WEB_PORT="6599")
    result = subprocess.run(
        [str(HUBSTREAM), "worker"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert "WEB_HOST=0.0.0.0" in result.stderr and "HUBSTREAM_ADMIN_TOKEN" in result.stderr, result.stderr


@pytest.mark.integration
def test_every_mutating_endpoint_needs_the_admin_token(guarded_worker: Worker) -> None:
    operations = [(m, p) for m, p in _mutating_operations() if not p.startswith("/api/dequeue")]
    assert len(operations) >= 10
    for method, path in operations:
        for headers in ({}, _admin("wrong-token"), {"Authorization": ADMIN_TOKEN}, _admin(_actor_jwt("a1"))):
            status, raw = guarded_worker.request(method, path, {}, headers)
            assert status == 401, (method, path, headers, raw[:300])
            assert orjson.loads(raw)["error"] == "Unauthorized"
        status, raw = guarded_worker.request(method, path, {}, _admin())
        assert status != 401, (method, path, raw[:300])
    created = guarded_worker.json("POST", "/api/v1/batch/exact", {"userKey": "secure"}, _admin())
    batch = guarded_worker.json("GET", f"/api/v1/batch/exact/{created['batchId']}", None, _read())
    assert batch["userKey"] == "secure" and not batch["isClosed"]


def _read() -> dict[str, str]:
    return {"Authorization": f"Bearer {READ_TOKEN}"}


@pytest.mark.integration
def test_reads_need_a_token_but_the_open_ones_and_the_dashboard_mutates_nothing(
    guarded_worker: Worker,
) -> None:
    for path in ("/dashboard/", "/metrics", "/openapi.json", "/api/v1/batch/status"):
        status, _ = guarded_worker.request("GET", path)
        assert status == 200, path
    for path in ("/api/dashboard", "/subscriptions/shards", "/api/v1/batch/exact/1"):
        status, raw = guarded_worker.request("GET", path)
        assert status == 401 and orjson.loads(raw)["error"] == "Unauthorized", (path, raw[:300])
        for token in (_read(), _admin()):
            status, raw = guarded_worker.request("GET", path, None, token)
            assert status in (200, 404), (path, status, raw[:300])
    status, _ = guarded_worker.request("POST", "/api/v1/batch/exact", {}, _read())
    assert status == 401, "the read token mutates nothing"
    for method in ("POST", "PUT", "DELETE"):  # the dashboard has no mutating method at all
        status, _ = guarded_worker.request(method, "/api/dashboard", {}, _admin())
        assert status == 405, method


@pytest.mark.integration
def test_what_a_web_page_could_send_is_refused(guarded_worker: Worker) -> None:
    """A rebound DNS name, a cross-site form and a foreign origin, against the real worker."""
    status, raw = guarded_worker.request("GET", "/metrics", None, {"Host": "evil.example:6066"})
    assert status == 403 and orjson.loads(raw)["error"] == "Forbidden", raw[:300]
    created = f"{guarded_worker.url}/api/v1/batch/exact"
    form = urllib.request.Request(
        created,
        data=b"userKey=x",
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(form, timeout=30)
    assert refused.value.code == 401  # a form carries no admin token (without one set: 415)
    status, _ = guarded_worker.request(
        "POST", "/api/v1/batch/exact", {}, {**_admin(), "Origin": "https://evil.example"}
    )
    assert status == 403


@pytest.mark.integration
def test_actor_endpoints_take_actor_jwts_never_the_admin_token(guarded_worker: Worker) -> None:
    bundle = str(uuid.uuid4())
    cases = {
        "missing": {},
        "admin token": _admin(),
        "expired": _admin(_actor_jwt("actor-1", expires_in_s=-60)),
        "wrong secret": _admin(
            _actor_jwt("actor-1", secret="not-the-secret-at-all-but-long-enough-for-hs256")
        ),
        "bad subject": _admin(_actor_jwt("../etc/passwd")),
    }
    for what, headers in cases.items():
        for method, path in (
            ("GET", "/api/peek"),
            ("GET", "/api/peek/timeseries"),
            ("DELETE", f"/api/dequeue?bundleId={bundle}"),
        ):
            status, raw = guarded_worker.request(method, path, None, headers)
            assert status == 401, (what, method, path, raw[:300])
    # A valid actor JWT passes without the admin token: no such bundle for this actor.
    status, raw = guarded_worker.request(
        "DELETE", f"/api/dequeue?bundleId={bundle}", None, _admin(_actor_jwt("actor-1"))
    )
    assert status == 404, raw[:300]


@pytest.mark.integration
def test_secrets_never_reach_the_log(guarded_worker: Worker, stack: Settings) -> None:
    # Bad ack records whose item ids are the secrets: the worker logs the reason (naming the id).
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    topic = guarded_worker.env["BATCH_ACKS_TOPIC"]
    for secret in (ADMIN_TOKEN, JWT_SECRET, EMULATOR_KEY):
        producer.produce(topic, orjson.dumps({"batchItemIds": [secret]}), b"k", partition=0)
    assert producer.flush(30) == 0
    wait_until(
        lambda: guarded_worker.log().count("ack record dead-lettered") >= 3,
        60,
        "three ack records dead-lettered in the log",
        poll_s=0.5,
    )
    log = guarded_worker.log()
    assert log.count("ack record dead-lettered") >= 3, log[-3000:]
    assert "***" in log
    for secret in (ADMIN_TOKEN, JWT_SECRET, EMULATOR_KEY):
        assert secret not in log
