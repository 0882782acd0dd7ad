"""The embedded stack's durable broker (EMBEDDED_BROKER_STORAGE=s3) on ports of a test's own,
started and stopped through app.stack.broker as `hubstream stack up` does, with a `restart` that
SIGKILLs the broker (never its S3 server) and starts it again on the same port."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings, get_settings
from app.stack.broker import broker_process, start_broker, stop_broker
from app.stack.process import pid_alive, read_pid
from tests.support.ports import free_port
from tests.support.waiting import wait_until

__all__ = ["DurableBroker", "durable_broker"]


@dataclass
class DurableBroker:
    settings: Settings  # the broker's own: its home, ports and storage
    restarts: int = 0

    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap

    def client_env(self) -> dict[str, str]:
        """The environment of a hubstream process that connects to this broker."""
        return {
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "KAFKA_BROKER_KIND": "embedded",
            "EMBEDDED_BROKER_STORAGE": "s3",
        }

    def kill(self, how: signal.Signals = signal.SIGKILL) -> None:
        process = broker_process(self.settings)
        pid = read_pid(process.pid_file)
        assert pid is not None and pid_alive(pid), "the durable broker is not running"
        os.killpg(pid, how)
        wait_until(lambda: not pid_alive(pid), 30, f"the broker to be gone after {how.name}")

    def start(self) -> None:
        assert broker_process(self.settings).start() == "started"

    def restart(self, how: signal.Signals = signal.SIGKILL) -> None:
        """Stop it with `how`, then start it again on the same port."""
        self.kill(how)
        self.start()
        self.restarts += 1


@contextmanager
def durable_broker(home: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> Iterator[DurableBroker]:
    """The broker under `home`; with `monkeypatch`, this process is configured for it too, as a
    hubstream process would be (its environment, read again by get_settings)."""
    env: dict[str, Any] = {
        "HUBSTREAM_HOME": home,
        "EMBEDDED_BROKER_PORT": free_port(),
        "EMBEDDED_BROKER_STORAGE": "s3",
        "EMBEDDED_S3_PORT": free_port(),
    }
    settings = Settings(**env)  # by the variables' names (the aliases)
    start_broker(settings)
    broker = DurableBroker(settings)
    try:
        if monkeypatch is not None:
            for name, value in broker.client_env().items():
                monkeypatch.setenv(name, value)
            get_settings.cache_clear()
        yield broker
    finally:
        if monkeypatch is not None:
            get_settings.cache_clear()
        stop_broker(settings)
