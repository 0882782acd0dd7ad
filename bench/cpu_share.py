"""CPU time by role (workers, the Cosmos endpoint, Spark, the broker, ...) over windows of a run.

A thread reads every process's CPU seconds (psutil) every `every_s`; `core_seconds(start, end)`
then adds up, per role, the CPU each process spent between the samples around that window of
`time.monotonic()`, the partial intervals at its edges pro rata. The sampler's own reads (a few
milliseconds per tick) are counted in the role of the process that runs it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from types import TracebackType

import psutil

__all__ = ["CpuSampler", "role_of"]

# (role, substring of the command line), first match wins; this process is "this job".
ROLES: tuple[tuple[str, str], ...] = (
    ("workers", "app.cli.main worker"),
    ("MySQL mirror pipeline", "pipeline run"),
    ("Cosmos endpoint", "embedded_cosmos"),
    ("broker", "tansu"),
    ("MariaDB", "mariadbd"),
    ("Spark JVM", "java"),
    ("Spark Python workers", "pyspark"),
)


def role_of(pid: int, cmdline: str) -> str:
    if pid == os.getpid():
        return "this job"
    return next((role for role, needle in ROLES if needle in cmdline), "other processes")


Sample = tuple[float, dict[int, tuple[str, float]]]  # (monotonic time, pid -> (role, CPU seconds))


class CpuSampler:
    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._take()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._take()

    def _take(self) -> None:
        now = time.monotonic()
        seen: dict[int, tuple[str, float]] = {}
        for proc in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
            times = proc.info["cpu_times"]
            if times is None:  # gone, or not ours to read
                continue
            cmdline = " ".join(proc.info["cmdline"] or ())
            seen[proc.info["pid"]] = (role_of(proc.info["pid"], cmdline), times.user + times.system)
        self.samples.append((now, seen))

    def core_seconds(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per role spent between `start` and `end` (time.monotonic() values)."""
        spent: dict[str, float] = defaultdict(float)
        for (t0, before), (t1, after) in zip(self.samples, self.samples[1:], strict=False):
            overlap = min(t1, end) - max(t0, start)
            if overlap <= 0 or t1 <= t0:
                continue
            share = overlap / (t1 - t0)
            for pid, (role, cpu) in after.items():
                # A process born within the interval spent all its CPU in it.
                spent[role] += share * max(0.0, cpu - before.get(pid, (role, 0.0))[1])
        return dict(sorted(spent.items(), key=lambda item: -item[1]))
