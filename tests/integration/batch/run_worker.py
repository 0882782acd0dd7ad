"""Runs one hubstream worker as a subprocess for the batch tests: the real `create_app`, with only
the batch capability so that the tests exercise this capability alone (and stay light on CPU)."""

from __future__ import annotations

import sys

from app.settings import Settings
from app.worker.factory import create_app

if __name__ == "__main__":
    settings = Settings()
    app = create_app(settings, capabilities=("agents.batches",))
    sys.argv = [
        sys.argv[0],
        "worker",
        "-l",
        "warn",
        "--web-port",
        str(settings.web_port),
        "--web-host",
        settings.web_host,
    ]
    app.main()
