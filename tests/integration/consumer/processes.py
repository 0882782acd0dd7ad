"""Copies of a library consumer as processes, started through the CLI
(`hubstream consumer run tests.support.consumer_handler:handle`), and what their handlers wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from app.kafka.broker import BrokerPort, broker_of
from app.settings import BrokerKind, get_settings
from tests.support.spawn import spawn_logged

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Copies:
    home: Path
    bootstrap: str
    topic: str
    name: str
    broker_kind: BrokerKind = field(default_factory=lambda: get_settings().broker_kind)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def broker(self) -> BrokerPort:
        return broker_of(self.broker_kind, self.bootstrap)

    @property
    def out(self) -> Path:
        return self.home / "handled.txt"

    def start(self, label: str, *options: str, **env: str) -> subprocess.Popen[bytes]:
        proc = spawn_logged(
            [
                sys.executable,
                "-m",
                "app.cli.main",
                "consumer",
                "run",
                "tests.support.consumer_handler:handle",
                "--topic",
                self.topic,
                "--name",
                self.name,
                "--min-backoff-s",
                "0.2",
                "--max-backoff-s",
                "1",
                *options,
            ],
            self.home / f"{label}.log",
            env={
                **os.environ,
                "KAFKA_BOOTSTRAP": self.bootstrap,
                "KAFKA_BROKER_KIND": self.broker_kind,
                "HS_TEST_OUT": str(self.out),
                **env,
            },
            cwd=ROOT,
        )
        self.procs[label] = proc
        self.pids[label] = proc.pid
        return proc

    def kill9(self, label: str) -> None:
        proc = self.procs.pop(label)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self, label: str) -> int:
        proc = self.procs.pop(label)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(60)

    def stop_all(self) -> None:
        for label in list(self.procs):
            proc = self.procs.pop(label)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()

    def handled(self) -> list[tuple[str, int]]:
        """(key, seq) of every successful handler call, in the order the calls finished."""
        if not self.out.exists():
            return []
        rows = [line.split() for line in self.out.read_text().splitlines() if line.count(" ") == 4]
        rows.sort(key=lambda row: int(row[4]))
        return [(row[0], int(row[1])) for row in rows]

    def handled_by(self, label: str, pid: int | None = None) -> int:
        """Successful calls made by the copy started as `label` (or by process `pid`)."""
        wanted = str(pid if pid is not None else self.pids[label])
        if not self.out.exists():
            return 0
        return sum(1 for line in self.out.read_text().splitlines() if line.split()[3:4] == [wanted])

    def logged(self, label: str, text: str) -> bool:
        """Whether the copy started as `label` has logged `text` (anywhere in its log)."""
        path = self.home / f"{label}.log"
        return path.exists() and text in path.read_text()

    def log_tail(self, label: str, chars: int = 3000) -> str:
        path = self.home / f"{label}.log"
        return path.read_text()[-chars:] if path.exists() else ""
