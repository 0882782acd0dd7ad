"""A real `hubstream worker` subprocess with every capability, isolated by names (app id, metadata and
registry topics, Cosmos database, batch topics), for the web, security and fuzz tests."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.cosmos import open_cosmos
from app.settings import Settings
from tests.support.ports import free_port
from tests.support.spawn import spawn_logged
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]
HUBSTREAM = REPO / ".venv" / "bin" / "hubstream"


def worker_env(stack: Settings, unique: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HUBSTREAM_ADMIN_TOKEN"}
    env.update(
        HUBSTREAM_HOME=str(home),
        HUBSTREAM_APP_ID=f"web-test-{unique}",
        KAFKA_BOOTSTRAP=stack.bootstrap,
        KAFKA_BROKER_KIND=stack.broker_kind,
        COSMOS_DATABASE=f"web-test-{unique}",
        COMPOSITE_METADATA_TOPIC=f"__web-test-composite-{unique}",
        SUBSCRIPTION_REGISTRY_TOPIC=f"__web-test-subscriptions-{unique}",
        BATCH_ACKS_TOPIC=f"web-test-batch-acks-{unique}",
        BATCH_COMPLETIONS_TOPIC=f"web-test-batch-completions-{unique}",
        TABLE_PARTITIONS="2",
        SUBSCRIPTION_SHARD_SLOTS="2",
        BROKER_SESSION_TIMEOUT_S="3",
        BROKER_REBALANCE_TIMEOUT_S="3",
        OFFSET_FLUSH_INTERVAL_S="0.5",
        HUB_JWT_SECRET=f"web-test-jwt-secret-{unique}-{unique}",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    url: str
    home: Path
    env: dict[str, str] = field(repr=False)

    def log(self) -> str:
        return (self.home / "worker.log").read_text(errors="replace")

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        data = None if body is None else orjson.dumps(body)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def json(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        status, raw = self.request(method, path, body, headers)
        assert status == 200, (method, path, status, raw[:500])
        return orjson.loads(raw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_worker(env: dict[str, str], home: Path, ready_path: str = "/api/v1/batch/status") -> Worker:
    """Start `hubstream worker` and wait until its batch partitions are served (the app is running)."""
    port = free_port()
    # advertised as the test reaches it, also when bound to every interface (WEB_HOST=0.0.0.0)
    env = {"WEB_ADVERTISED_URL": f"http://127.0.0.1:{port}", **env, "WEB_PORT": str(port)}
    home.mkdir(parents=True, exist_ok=True)
    proc = spawn_logged(
        [str(HUBSTREAM), "worker", "--loglevel", "info"],
        home / "worker.log",
        env=env,
        cwd=REPO,
    )
    worker = Worker(proc, f"http://127.0.0.1:{port}", home, env)

    def serving() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"worker exited with {proc.returncode}:\n{worker.log()[-4000:]}")
        status, raw = worker.request("GET", ready_path)
        return status == 200 and bool(orjson.loads(raw).get("partitionsServed"))

    try:
        wait_until(serving, 90, "the worker to be ready", poll_s=0.5, retry_on=(OSError, ValueError))
    except AssertionError as exc:
        if proc.poll() is not None:
            raise  # it exited: the message carries its log
        worker.stop()
        raise AssertionError(f"{exc}:\n{worker.log()[-4000:]}") from None
    return worker


async def drop_database(settings: Settings) -> None:
    """Drop the worker's Cosmos database, best effort: a busy shared Cosmos endpoint must not fail
    the tests that passed."""
    try:
        store = await open_cosmos(settings)
        try:
            await store.client.delete_database(settings.cosmos_database)
        finally:
            await store.close()
    except Exception as exc:
        logging.getLogger(__name__).warning(
            "could not drop Cosmos database %s: %r", settings.cosmos_database, exc
        )


def worker_settings(stack: Settings, env: dict[str, str]) -> Settings:
    """The settings a test process needs to see what the worker started with `env` sees."""
    return stack.model_copy(
        update={
            "app_id": env["HUBSTREAM_APP_ID"],
            "metadata_topic": env["COMPOSITE_METADATA_TOPIC"],
            "subscription_registry_topic": env["SUBSCRIPTION_REGISTRY_TOPIC"],
            "cosmos_database": env["COSMOS_DATABASE"],
        }
    )
