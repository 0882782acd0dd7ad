"""Thin Faust agents; each body calls one application function from app/.

Every capability module has `register(worker: WorkerContext)`; `build_worker` makes the Faust app
(app.worker.create_app) and registers the capabilities asked for, by name, in start-up order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agents import batches, flow, hub, pipelines, subscriptions, web
from agents.context import WorkerContext
from app.errors import ConfigError
from app.settings import Settings
from app.worker.factory import create_app

__all__ = ["CAPABILITIES", "WORKER", "Register", "WorkerContext", "build_worker"]

Register = Callable[[WorkerContext], None]

CAPABILITIES: dict[str, Register] = {
    "batches": batches.register,
    "hub": hub.register,
    "flow": flow.register,  # after hub: it saves into the hub
    "subscriptions": subscriptions.register,
    "web": web.register,
    # Not in a worker: each pipeline runs in its own process (`hubstream pipeline run FILE`).
    "pipelines": pipelines.register,
}
WORKER: tuple[str, ...] = ("batches", "hub", "flow", "subscriptions", "web")  # `hubstream worker`


def build_worker(settings: Settings, capabilities: Sequence[str] = WORKER) -> WorkerContext:
    unknown = [name for name in capabilities if name not in CAPABILITIES]
    if unknown:
        raise ConfigError(f"unknown capabilities {unknown}; known: {sorted(CAPABILITIES)}")
    worker = WorkerContext(create_app(settings), settings)
    for name in capabilities:
        CAPABILITIES[name](worker)
    return worker
