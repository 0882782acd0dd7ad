"""One real hubstream worker as a subprocess: `python -m tests.support.run_worker [capability …]`.

The real `build_worker` with only the capabilities a test folder exercises (default: the batch
capability), so tests run that capability alone and stay light on CPU.
"""

from __future__ import annotations

import sys

from agents import build_worker
from app.settings import Settings

if __name__ == "__main__":
    settings = Settings()
    capabilities = tuple(sys.argv[1:]) or ("batches",)
    app = build_worker(settings, capabilities).app
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    sys.argv += ["--web-port", str(settings.web_port), "--web-host", settings.web_host]
    app.main()
