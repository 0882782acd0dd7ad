"""The main job's live progress: Spark's tasks and the batch's acks as the ingest reports them,
and, polled once a second from the broker and MySQL, events produced into the topic, consumed by
the hub's subscription and mirrored into MySQL."""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.flow.readback import Offsets, consumed, ends, since
from app.kafka.broker import broker_for
from app.progress import Stages
from app.settings import Settings
from spark_ingest.batch import BatchState

__all__ = ["FLOW_STAGES", "FlowWatch"]

FLOW_STAGES = (
    ("spark", "Spark → data-available"),
    ("acked", "batch items acked"),
    ("hub", "hub saved (subscription consumed)"),
    ("mysql", "MySQL mirror rows"),
    ("drain", "actors drained (Peek/Dequeue)"),
)
POLL_S = 1.0


class FlowWatch:
    def __init__(
        self,
        settings: Settings,
        stages: Stages,
        ends_before: Offsets,
        consumer_group: str,
        mysql_rows: Callable[[], int],
    ) -> None:
        """`ends_before`: the topic's partitions and their ends before the run (the topic outlives
        runs: each bar counts what this run adds)."""
        self.bootstrap = settings.bootstrap
        self.broker = broker_for(settings)
        self.stages = stages
        self.tps = list(ends_before)
        self.ends_before = ends_before
        self.consumer_group = consumer_group
        self.mysql_rows = mysql_rows
        self.consumed_before = consumed(self.bootstrap, consumer_group, self.tps)
        self.rows_before = mysql_rows()
        self.batch_id: str | None = None
        self.total: int | None = None
        self._produced = 0
        self._tasks_note = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="flow-watch", daemon=True)

    def __enter__(self) -> FlowWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10 * POLL_S)

    # IngestProgress: called by the ingest job
    def tasks(self, stage: str, done: int, total: int) -> None:
        self._tasks_note = f"{stage}: {done}/{total} tasks"
        self.stages.update("spark", self._produced, note=self._tasks_note)

    def batch(self, state: BatchState) -> None:
        """Called once the events are produced and the batch closed, then at each poll."""
        first = self.batch_id is None
        self.batch_id, self.total = state.batch_id, state.total_items
        if first:
            self._tasks_note = ""
            self._poll_produced()
            self.stages.finish("spark")
        self.stages.update("acked", state.acked_items or 0, state.total_items)
        if state.is_complete:
            self.stages.finish("acked")

    def _poll_produced(self) -> None:
        self._produced = since(ends(self.broker, self.tps), self.ends_before)
        self.stages.update("spark", self._produced, self.total, note=self._tasks_note)

    def _poll(self) -> None:
        """Each stage is polled until it ends: the drain that follows has the machine to itself
        (counting the mirror table's rows is a scan of everything earlier runs wrote there)."""
        if self._tasks_note:  # the produce job runs
            self._poll_produced()
        if not self.stages.finished("hub"):
            delivered = since(consumed(self.bootstrap, self.consumer_group, self.tps), self.consumed_before)
            if delivered:
                self.stages.update("hub", delivered, self.total)
                if self.total is not None and delivered >= self.total:
                    self.stages.finish("hub")
        if not self.stages.finished("mysql"):
            rows = self.mysql_rows() - self.rows_before
            if rows > 0:
                self.stages.update("mysql", rows, self.total)
                if self.total is not None and rows >= self.total:
                    self.stages.finish("mysql")

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self._poll()
            except Exception:  # a broker or MySQL hiccup only skips one drawing
                continue
