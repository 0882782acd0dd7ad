"""A local Spark session started by hubstream says nothing on stderr unless something failed: the
JVM's start-up warnings (log4j's default profile, the loopback hostname, the native Hadoop
library, the shell's log level) interleaved with `hubstream run`'s progress before."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

START_AND_COUNT = """
from spark_ingest.reader import build_session
session = build_session("local[1]", app_name="hubstream-quiet-start")
print(session.range(7).count())
session.stop()
"""


def test_a_local_session_starts_without_spark_warnings() -> None:
    done = subprocess.run(
        [sys.executable, "-c", START_AND_COUNT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "7"
    said = [
        line
        for line in done.stderr.splitlines()
        # the JDK's own notice of Spark's --add-modules is not Spark's log and cannot be turned off
        if line.strip() and not line.startswith("WARNING: Using incubator modules")
    ]
    assert said == [], "\n".join(said)
