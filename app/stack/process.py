"""A local service process that hubstream may start, health-check, record and stop.

A pid file under `<home>/pids/` marks a process hubstream started; `stop` only ever
touches processes it has a pid file for, so a service that was already running is
reused and left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.stack.errors import PortHeldByOther, ServiceDidNotStart
from app.waiting import poll_until

__all__ = [
    "ManagedProcess",
    "exit_code",
    "pid_alive",
    "port_holder",
    "port_open",
    "read_pid",
    "spawn_detached",
]

_LISTEN = "0A"  # the TCP state column of /proc/net/tcp for a listening socket


def port_open(host: str, port: int, timeout_s: float = 0.3) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        return sock.connect_ex((host, port)) == 0


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_holder(port: int) -> str | None:
    """Which program listens on `port`, as "pid N (command line)", when this machine's /proc tells
    (Linux, and a process we may look into); None otherwise."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not any(os.readlink(fd) in wanted for fd in (proc / "fd").iterdir()):
                continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        return f"pid {proc.name} ({command.strip()[:120]})"
    return None


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def spawn_detached(argv: Sequence[str], log_file: Path, env: Mapping[str, str]) -> int:
    """Start `argv` in a session of its own, output to `log_file`, input from /dev/null; its pid.
    Meant to outlive this process (a `stack up` returns and leaves it running), so no Popen object
    is kept for it: one would warn that its process still runs when collected."""
    with open(log_file, "ab") as log:
        return os.posix_spawnp(
            argv[0],
            list(argv),
            dict(env),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, log.fileno(), 2),
            ],
            setsid=True,
        )


def exit_code(pid: int) -> int | None:
    """The exit code of a child of ours that has ended (reaping it), None while it runs or when it
    is not our child."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@dataclass
class ManagedProcess:
    name: str
    argv: Sequence[str]
    home: Path
    healthy: Callable[[], bool]
    host: str = "127.0.0.1"
    port: int | None = None
    setting_hint: str = ""
    env: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 30.0
    # How long a listener hubstream did not start gets to answer as the service before it counts as
    # another program: long enough for a service someone else just started, short enough that a
    # squatter is named at once rather than after the whole start timeout.
    foreign_grace_s: float = 10.0

    @property
    def pid_file(self) -> Path:
        return self.home / "pids" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / f"{self.name}.log"

    def owned_pid(self) -> int | None:
        pid = read_pid(self.pid_file)
        if pid is not None and pid_alive(pid):
            return pid
        return None

    def status(self) -> str:
        if self.owned_pid() is not None:
            return "running (started by hubstream)" if self.healthy() else "started, not answering"
        if self.healthy():
            return "running (not started by hubstream; reused)"
        return "stopped"

    def start(self) -> str:
        """Start unless already answering; return 'reused', 'running' or 'started'."""
        if self.port is not None and port_open(self.host, self.port):
            if self.owned_pid() is not None:
                return "running"  # ours and listening, answering or only too busy to answer yet
            # Not ours: maybe the service someone else started, too busy to answer the probe yet,
            # or a process that is ending (killed a moment ago, its socket not closed yet).
            port = self.port

            def settled() -> str | None:
                if self.healthy():
                    return "reused"
                return None if port_open(self.host, port) else "free"

            verdict = poll_until(settled, self.foreign_grace_s, every_s=0.5)
            if verdict == "reused":
                return "reused"
            if verdict is None:
                holder = port_holder(port)
                raise PortHeldByOther(
                    f"{self.name}: port {self.host}:{port} is held by another program"
                    f"{f' ({holder})' if holder else ''} that does not answer as {self.name}; "
                    f"free the port or set {self.setting_hint}"
                )
        if self.healthy():  # answering elsewhere (a service without a port of ours)
            return "running" if self.owned_pid() is not None else "reused"
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        pid = spawn_detached(self.argv, self.log_file, {**os.environ, **self.env})
        self.pid_file.write_text(str(pid))

        def answering() -> bool:
            code = exit_code(pid)
            if code is not None:
                self.pid_file.unlink(missing_ok=True)
                raise ServiceDidNotStart(f"{self.name} exited with {code}; {self._log_tail()}")
            return self.healthy()

        if poll_until(answering, self.start_timeout_s):
            return "started"
        self.stop()
        raise ServiceDidNotStart(
            f"{self.name} did not answer within {self.start_timeout_s:.0f} s; {self._log_tail()}"
        )

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop the process if hubstream started it; return whether anything was stopped."""
        pid = self.owned_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)

        def gone() -> bool:
            exit_code(pid)  # reaps it when it is our child
            return not pid_alive(pid)

        if not poll_until(gone, timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    def _log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            return "no log"
        return f"log {self.log_file}:\n" + "\n".join(text)
