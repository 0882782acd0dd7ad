"""A minimal Faust app on hubstream's factory, run as a subprocess by test_table_recovery.

It keeps the last value seen per key in a RocksDB table and serves the table as JSON.
"""

from __future__ import annotations

import os
import sys

import faust
from aiohttp import web

from app.settings import Settings
from app.web.responses import json_response
from app.worker.factory import create_app

suffix = os.environ["RECOVERY_SUFFIX"]
settings = Settings()
app = create_app(settings)
source = app.topic(f"recovery-in-{suffix}", partitions=1, key_type=str, value_type=int)  # type: ignore[arg-type]
latest = app.Table(f"recovery-latest-{suffix}", default=int, partitions=1)


if not os.environ.get("RECOVERY_READ_ONLY"):
    # The replacement worker runs without the agent: its table can only come from the changelog.

    @app.agent(source)
    async def remember(stream: faust.StreamT[int]) -> None:
        async for key, value in stream.items():
            latest[key] = value


@app.page("/latest/")  # type: ignore[arg-type]  # faust's aiohttp driver serves aiohttp responses
async def show(_view: faust.web.View, _request: faust.web.Request) -> web.Response:
    return json_response(dict(latest.items()))


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "-l", "warn", "--web-port", str(settings.web_port)]
    app.main()
