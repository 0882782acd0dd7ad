"""One real hubstream worker for the spark_ingest tests: `python -m … [capability …]`.

Default: only the batch capability (the exact-batch HTTP API); the end-to-end test passes the full
list (batches, hub, flow, subscriptions).
"""

from __future__ import annotations

import sys

from app.settings import Settings
from app.worker.factory import create_app

if __name__ == "__main__":
    settings = Settings()
    capabilities = tuple(sys.argv[1:]) or ("agents.batches",)
    app = create_app(settings, capabilities=capabilities)
    sys.argv = [
        sys.argv[0],
        "worker",
        "-l",
        "warn",
        "--web-port",
        str(settings.web_port),
        "--web-host",
        "127.0.0.1",
    ]
    app.main()
