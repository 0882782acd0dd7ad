"""One real hubstream worker as a subprocess: `python -m tests.support.run_worker [capability …]`.

The real `build_worker` with only the capabilities a test folder exercises (default: the batch
capability), so tests run that capability alone and stay light on CPU.
"""

from __future__ import annotations

import sys

from agents import build_worker
from app.cli.common import run_faust_worker
from app.settings import Settings

if __name__ == "__main__":
    settings = Settings()
    capabilities = tuple(sys.argv[1:]) or ("batches",)
    run_faust_worker(build_worker(settings, capabilities).app, "warn")  # as `hubstream worker` runs it
