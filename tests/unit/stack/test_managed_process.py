"""`ManagedProcess` with a real child process (Python's own HTTP server as the service): started,
found running, stopped; a service that exits at once, and a port another program holds."""

from __future__ import annotations

import os
import socket
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from app.stack.errors import PortHeldByOther, ServiceDidNotStart
from app.stack.process import ManagedProcess, pid_alive, port_holder, port_open
from tests.support.ports import free_port


def answers_http(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=0.3):
            return True
    except (OSError, urllib.error.URLError):
        return False


def http_server(home: Path, port: int, **kwargs: object) -> ManagedProcess:
    return ManagedProcess(
        name="web",
        argv=[sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        home=home,
        healthy=lambda: port_open("127.0.0.1", port),
        port=port,
        **kwargs,  # type: ignore[arg-type]
    )


def test_started_found_running_and_stopped(tmp_path: Path) -> None:
    service = http_server(tmp_path, free_port())
    assert service.start() == "started"
    pid = service.owned_pid()
    assert pid is not None and pid_alive(pid)
    assert service.start() == "running"
    assert service.stop() is True
    assert not pid_alive(pid) and service.owned_pid() is None and not service.pid_file.exists()
    assert service.stop() is False  # nothing of ours left to stop


def test_a_service_that_exits_at_once_says_so(tmp_path: Path) -> None:
    service = ManagedProcess(
        name="gone",
        argv=[sys.executable, "-c", "raise SystemExit(3)"],
        home=tmp_path,
        healthy=lambda: False,
        start_timeout_s=10,
    )
    with pytest.raises(ServiceDidNotStart, match="exited with 3"):
        service.start()
    assert not service.pid_file.exists()


def test_a_port_held_by_a_program_that_does_not_answer_as_the_service(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        service = ManagedProcess(
            name="web",
            argv=[sys.executable, "-c", "pass"],
            home=tmp_path,
            healthy=lambda: False,  # whatever listens there is not the service
            port=port,
            foreign_grace_s=0.2,
        )
        with pytest.raises(PortHeldByOther, match=rf"127.0.0.1:{port} .*\(pid {os.getpid()} "):
            service.start()
        assert not service.pid_file.exists(), "nothing was started on a port another program holds"


def test_the_holder_of_a_port_is_named_only_while_something_listens() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = int(holder.getsockname()[1])
        assert port_holder(port) is None, "bound but not listening"
        holder.listen()
        named = port_holder(port)
        assert named is not None and named.startswith(f"pid {os.getpid()} (") and "python" in named
    assert port_holder(port) is None


def test_a_port_that_comes_free_while_we_wait_is_started_on(tmp_path: Path) -> None:
    """A process that was killed a moment ago still holds its port until the kernel closes its
    socket: `start` waits for that instead of calling the port another program's."""
    port = free_port()
    ending = socket.socket()
    ending.bind(("127.0.0.1", port))
    ending.listen()
    closing = threading.Timer(0.5, ending.close)
    closing.start()
    service = ManagedProcess(
        name="web",
        argv=[sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        home=tmp_path,
        healthy=lambda: answers_http(port),  # the dying listener accepts but never answers
        port=port,
        foreign_grace_s=30,
    )
    try:
        assert service.start() == "started"
    finally:
        closing.join()
        service.stop()
