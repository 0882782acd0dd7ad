"""A Tansu broker of a test's own (in memory), on an address and port the test chooses, with the
embedded stack's own command line (app.stack.broker.tansu_argv)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from app.stack.broker import tansu_argv
from tests.support.spawn import spawn_logged

__all__ = ["start_tansu"]


def start_tansu(listen: str, advertise: str, log: Path) -> subprocess.Popen[bytes]:
    """A broker listening on `listen` (HOST:PORT) that tells clients to connect to `advertise`."""
    return spawn_logged(tansu_argv(listen, advertise), log)
