"""Starting a process for a test with its output in a log file."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["spawn_logged", "stop_processes"]


def spawn_logged(
    argv: Sequence[str], log: Path, *, append: bool = True, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout and stderr to `log`. The file is closed here: the child keeps its
    own descriptor, and the test leaves no file object to the collector."""
    with open(log, "ab" if append else "wb") as out:
        return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, **popen)


def stop_processes(*procs: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM each, then wait up to `grace_s` for each; one that outlasts it is killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
