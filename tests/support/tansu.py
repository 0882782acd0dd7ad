"""A Tansu broker of a test's own, on an address and port the test chooses, its topics in memory
or (`s3_port`) in an S3 server the test runs: the embedded stack's own command line either way."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from app.stack.broker import S3_BUCKET, tansu_argv, tansu_s3_env
from tests.support.spawn import spawn_logged

__all__ = ["start_tansu"]


def start_tansu(
    listen: str, advertise: str, log: Path, s3_port: int | None = None
) -> subprocess.Popen[bytes]:
    """A broker listening on `listen` (HOST:PORT) that tells clients to connect to `advertise`."""
    if s3_port is None:
        return spawn_logged(tansu_argv(listen, advertise), log)
    return spawn_logged(
        tansu_argv(listen, advertise, f"s3://{S3_BUCKET}/"), log, env={**os.environ, **tansu_s3_env(s3_port)}
    )
