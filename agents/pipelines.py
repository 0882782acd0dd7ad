"""Pipelines in a Faust app: the offsets table, the control agent and the pipeline task.

Not in a worker: each pipeline runs in its own process (`hubstream pipeline run FILE`), which
calls build_worker(settings, ["pipelines"]) with PIPELINE_FILE set and its own app id, so every
pipeline has its own consumer group, table and changelog.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.context import WorkerContext
from app.crashpoints import InjectedFault, crash_point
from app.kafka.in_order import STALLED_AFTER_S
from app.pipeline.definition import load_definition
from app.pipeline.operator import PipelineOperator
from app.pipeline.service import PipelineHost
from app.pipeline.state import ControlTable
from app.pipeline.web import register_views
from app.worker.timers import every
from tables.pipelines import offsets_table

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(worker: WorkerContext) -> None:
    app, settings = worker.app, worker.settings
    if settings.pipeline_file is None:
        log.info("no PIPELINE_FILE: no pipeline in this worker")
        return
    host = worker.pipeline_host = PipelineHost(settings, load_definition(settings.pipeline_file))
    register_views(app, {host.definition.name: PipelineOperator(host)}, settings)
    # A restart on its own RocksDB datadir relies on true changelog highwaters (on the embedded
    # broker, create_app's patch of Faust's recovery: app.kafka.broker); Faust's recovery
    # consistency check stays on.
    table = offsets_table(app)
    control_name = host.topics.control
    control = app.topic(control_name, partitions=1, key_type=bytes, value_serializer="json")

    # Control records are applied strictly in offset order from the position the table keeps
    # (app.kafka.in_order): Faust's committed offset can pass a record never applied, and an
    # operator's mark sent while the pipeline was stopped would be lost.
    tables: Any = app.tables  # TableManagerT does not declare `recovery`

    def table_usable() -> bool:
        return bool(tables.recovery.completed.is_set() and not app.in_recovery and not app.rebalancing)

    positions = worker.in_order_positions(control_name, host.topics.app_id, ControlTable(table, table_usable))

    @app.agent(control, name=f"pipeline-{host.definition.name}-control")
    async def apply_control(stream: Any) -> None:
        async for event in stream.events():
            offset = event.message.offset
            if isinstance(event.value, dict) and event.value.get("kind") != "set":
                try:
                    crash_point("pipeline.control.command_delivered")
                except InjectedFault:
                    continue  # armed in tests: the command is lost on its way in, as Faust can lose one
            if not await positions.admit(0, offset):
                continue
            await host.apply(table, event.value, offset)
            # Killed here, the record's effect is in the table and the position is not past it: the
            # restart applies the record again (a set or mark is idempotent; a step or resume finds
            # no engine running while the agent catches up, and is ignored).
            crash_point("pipeline.control.position_write")
            positions.handled(0, offset)
            positions.save()

    @every(app, STALLED_AFTER_S / 2, f"pipeline-{host.definition.name}-control-watchdog")
    async def watch_control() -> None:
        await positions.watch()

    @app.task
    async def run_pipeline() -> None:
        await tables.recovery.completed.wait()  # the engine starts from the recovered offsets
        await host.run(table)

    async def stop_pipeline(sender: Any, **_: Any) -> None:
        await host.shutdown()

    app.on_before_shutdown.connect(stop_pipeline)  # type: ignore[arg-type]
