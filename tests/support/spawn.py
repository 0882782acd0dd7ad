"""Starting a process for a test with its output in a log file."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["spawn_logged"]


def spawn_logged(
    argv: Sequence[str], log: Path, *, append: bool = True, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout and stderr to `log`. The file is closed here: the child keeps its
    own descriptor, and the test leaves no file object to the collector."""
    with open(log, "ab" if append else "wb") as out:
        return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, **popen)
