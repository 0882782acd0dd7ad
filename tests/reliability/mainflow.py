"""Running the main job (`hubstream run`) as a subprocess on its own app id, topics, Cosmos database
and MySQL database, with its two workers supervised by the test: restarted when they die (killed
by the test, or by an armed crash point), always without the crash point armed again."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from app.cosmos import open_cosmos
from app.settings import Settings
from app.stack.process import pid_alive, port_open, read_pid
from app.stack.services import worker_process

RUN_SETTINGS = (
    "HUBSTREAM_APP_ID",
    "BATCH_ACKS_TOPIC",
    "BATCH_COMPLETIONS_TOPIC",
    "SUBSCRIPTION_REGISTRY_TOPIC",
    "COSMOS_DATABASE",
    "MYSQL_URL",
    "BROKER_SESSION_TIMEOUT_S",
    "BROKER_REBALANCE_TIMEOUT_S",
)


def free_base_port() -> int:
    rng = random.Random()
    while True:
        base = rng.randrange(7000, 7900, 20)
        if not any(port_open("127.0.0.1", base + offset) for offset in (0, 1, 10)):
            return base


@dataclass
class MainFlowRun:
    """One `hubstream run` subprocess and what it needs to supervise and check it."""

    stack: Settings
    unique: str
    tmp_path: Path
    events: int
    recipients: int
    invalid: int
    crash_at: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. another broker and its security
    worker_urls: tuple[str, ...] = ()  # workers the test runs elsewhere: the job starts none
    home: Path = field(init=False)
    base_port: int = field(init=False)
    env: dict[str, str] = field(init=False)
    job: subprocess.Popen[bytes] | None = None
    restarts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home = self.tmp_path / "home"
        self.home.mkdir()
        self.base_port = free_base_port()
        unique = self.unique
        self.env = {
            **os.environ,
            "HUBSTREAM_HOME": str(self.home),
            "WEB_PORT": str(self.base_port),
            "HUBSTREAM_APP_ID": f"rel-{unique}",
            "SUBSCRIPTION_REGISTRY_TOPIC": f"__subs-rel-{unique}",
            # Own ack and completion topics: batch ids repeat across runs, and a completion left
            # by an earlier run must not count for this one.
            "BATCH_ACKS_TOPIC": f"batch-acks-rel-{unique}",
            "BATCH_COMPLETIONS_TOPIC": f"batch-completions-rel-{unique}",
            "COSMOS_DATABASE": f"rel-{unique}",
            "MYSQL_URL": f"mysql://root@127.0.0.1:3306/rel_{unique}",
            "BROKER_SESSION_TIMEOUT_S": "6",
            "BROKER_REBALANCE_TIMEOUT_S": "6",
        }
        self.env.update(self.extra_env)
        if self.crash_at:
            self.env["HUBSTREAM_CRASH_AT"] = self.crash_at

    @property
    def err_path(self) -> Path:
        return self.tmp_path / "run.err"

    def log(self) -> str:
        return self.err_path.read_text(errors="replace")

    def start(self) -> None:
        args = ["--events", str(self.events), "--recipients", str(self.recipients)]
        args += ["--invalid", str(self.invalid), "--topic", f"da-{self.unique}"]
        args += ["--subscription", f"hub-{self.unique}", "--timeout-s", "600"]
        for url in self.worker_urls:
            args += ["--worker-url", url]
        with open(self.err_path, "wb") as err:
            self.job = subprocess.Popen(
                [sys.executable, "-m", "app.cli.main", "run", *args],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=err,
            )

    def ended_within(self, seconds: float) -> bool:
        """Wait up to `seconds` for the main job to end; True once it has."""
        assert self.job is not None
        try:
            self.job.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def worker_pid(self, index: int) -> int | None:
        return read_pid(self.home / "pids" / f"worker-{index}.pid")

    def restart_dead_workers(self) -> None:
        """Restart a worker whose recorded process died, with this run's settings and no crash point."""
        for index in (1, 2):
            pid = self.worker_pid(index)
            if pid is not None and not pid_alive(pid):
                self.restart_worker(index)

    def restart_worker(self, index: int) -> None:
        settings = self.stack.model_copy(update={"home": self.home, "web_port": self.base_port})
        with pytest.MonkeyPatch.context() as patch:
            for name in RUN_SETTINGS:
                patch.setenv(name, self.env[name])
            patch.delenv("HUBSTREAM_CRASH_AT", raising=False)
            worker_process(settings, index).start()
        self.restarts.append(f"worker-{index}")

    def worker_errors(self) -> str:
        """The workers' logged errors and tracebacks (their logs live under the run's home)."""
        lines: list[str] = []
        for path in sorted((self.home / "logs").glob("worker-*.log")):
            text = path.read_text(errors="replace").splitlines()
            for n, line in enumerate(text):
                if "[ERROR]" in line or "[CRITICAL]" in line or line.startswith("Traceback"):
                    lines += [f"{path.name}: {entry}" for entry in text[n : n + 25]]
        return "\n".join(lines[-200:])

    def counts(self) -> dict[str, Any]:
        assert self.job is not None
        out = ""
        if self.job.stdout is not None:
            with self.job.stdout as pipe:  # closed here: else reported unclosed at garbage collection
                out = pipe.read().decode()
        failure = f"{self.log()[-4000:]}\n--- worker errors ---\n{self.worker_errors()}"
        assert self.job.returncode == 0, failure
        counts: dict[str, Any] = orjson.loads(out.strip().splitlines()[-1])
        return counts

    def assert_consumers_saw_every_event_once(self, counts: dict[str, Any]) -> None:
        valid = self.events - self.invalid
        assert counts["events_in"] == self.events
        assert counts["rejected"] == self.invalid
        assert counts["produced"] == valid
        assert counts["dead_lettered"] == 0
        assert counts["delivered"] == valid
        assert counts["hub_saved"] == valid, "every valid event drained by its actor: none lost"
        assert counts["hub_duplicates"] == 0, "no event shown to its actor after its dequeue"
        assert counts["hub_out_of_order"] == 0, "FIFO per cabinet"
        assert counts["mysql_rows"] == valid, "each MySQL row once"
        assert counts["batch_complete"] is True, f"batch not complete; worker logs:\n{self.worker_logs()}"
        assert counts["completion_events"] >= 1, "the batch completion event is on its topic"

    def worker_logs(self, tail_chars: int = 3000) -> str:
        logs = sorted((self.home / "logs").glob("*.log"))
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-tail_chars:]}" for p in logs)

    def cleanup(self) -> None:
        if self.job is not None and self.job.poll() is None:
            self.job.kill()
        subprocess.run(
            [sys.executable, "-m", "app.cli.main", "stack", "down"], env=self.env, timeout=120, check=False
        )
        conn = pymysql.connect(host="127.0.0.1", user="root")
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `rel_{self.unique}`")
        finally:
            conn.close()

        async def drop_cosmos() -> None:
            store = await open_cosmos(self.stack, database=f"rel-{self.unique}")
            try:
                await store.client.delete_database(store.database.id)
            finally:
                await store.close()

        asyncio.run(drop_cosmos())


@contextmanager
def main_flow(
    stack: Settings,
    unique: str,
    tmp_path: Path,
    *,
    events: int,
    recipients: int,
    invalid: int,
    crash_at: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[MainFlowRun]:
    run = MainFlowRun(stack, unique, tmp_path, events, recipients, invalid, crash_at, dict(extra_env or {}))
    try:
        run.start()
        yield run
    finally:
        run.cleanup()
