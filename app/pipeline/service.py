"""Runs one pipeline inside a Faust app: applies control records to the offsets table (the agent
body), then starts the engine from the recovered offsets (the app task), and stops it cleanly."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from collections.abc import MutableMapping
from typing import Any

from rich.console import Console

from app.kafka.admin import KafkaAdmin, TopicSpec
from app.kafka.broker import broker_for
from app.kafka.producing import AsyncProducer
from app.pipeline.definition import PipelineDefinition
from app.pipeline.engine import PipelineRuntime
from app.pipeline.kafka_dlq import KafkaDeadLetters
from app.pipeline.kafka_log import KafkaCommitLog, PipelineTopics
from app.pipeline.offsets import WriterState
from app.pipeline.progress_view import PipelineProgress
from app.pipeline.readers import build_source
from app.pipeline.state import ControlChannel, ControlTable, KafkaStateStore, split_states, writer_key
from app.pipeline.tolerance import ErrorsTolerance
from app.pipeline.writers import build_sink
from app.settings import Settings

YOUNG_COLLECTION_AT = 20_000
WRITER_FAILED_EXIT = 3  # `pipeline run --exit-when-idle` when a writer stopped on a failure

__all__ = ["WRITER_FAILED_EXIT", "PipelineHost", "ensure_topics", "tune_garbage_collector"]

log = logging.getLogger(__name__)


def ensure_topics(settings: Settings, topics: PipelineTopics) -> None:
    KafkaCommitLog(broker_for(settings), topics.log).ensure_topic(settings.kafka_replication_factor)
    KafkaAdmin(settings.bootstrap, settings.kafka_replication_factor).create(
        [TopicSpec(topics.control, 1), TopicSpec(topics.dlq, 1)]
    )


def tune_garbage_collector() -> None:
    """Takes what lives when the engine starts (modules, the app, settings) out of the cyclic garbage
    collector's scans. The engine allocates a few objects per log entry, and the full collections that
    triggers would otherwise rescan that whole heap (about a tenth of the writer's CPU in
    bench/pipeline_mysql.py). Young collections run every YOUNG_COLLECTION_AT allocations instead of
    700: the entries make no cycles, and at 700 a collection ran every ~90 entries and moved the
    tail's entries into the generations the full collections scan (GC pauses 1.0 -> 0.4 s a run)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_AT, older, oldest)


class PipelineHost:
    def __init__(self, settings: Settings, definition: PipelineDefinition) -> None:
        self.settings = settings
        self.definition = definition
        self.topics = PipelineTopics(definition.name, settings.app_id)
        self.runtime: PipelineRuntime | None = None
        self.applied_offset = -1
        self._commit_log: KafkaCommitLog | None = None
        self.exit_code = 0  # for --exit-when-idle: non-zero when a writer stopped on a failure
        # Between reading the offsets table and the runtime running, operator marks wait here:
        # written to the table then, they would be lost (the runtime already read it).
        self._starting = False
        self._queued_marks: list[tuple[str, int]] = []
        self.progress: PipelineProgress | None = None  # the live view (PIPELINE_PROGRESS)

    # -- the control agent's body --------------------------------------------------
    async def apply(self, table: MutableMapping[str, Any], record: Any, offset: int) -> None:
        self.applied_offset = offset
        if not isinstance(record, dict) or "kind" not in record:
            log.warning("%s[0] offset=%d: ignored control record %r", self.topics.control, offset, record)
            return
        kind, writer = record["kind"], record.get("writer")
        try:
            if kind == "set":
                table[str(record["key"])] = record["value"]
            elif kind == "mark":
                offset_to = int(record["offset"])
                if self.runtime is not None:
                    await self.runtime.mark(str(writer), offset_to)
                elif self._starting:
                    self._queued_marks.append((str(writer), offset_to))
                else:
                    state = WriterState.from_json(table.get(writer_key(str(writer))))
                    table[writer_key(str(writer))] = state.marked(offset_to).to_json()
            elif kind in {"step", "resume"}:
                if self.runtime is None:
                    log.warning(
                        "%s[0] offset=%d: %s ignored, the pipeline was not running",
                        self.topics.control,
                        offset,
                        kind,
                    )
                elif kind == "step":
                    log.info("step: %s", await self.runtime.step(str(writer)))
                else:
                    log.info("resumed writers: %s", await self.runtime.resume(writer))
            else:
                log.warning("%s[0] offset=%d: unknown control kind %r", self.topics.control, offset, kind)
        except Exception as exc:  # an operator typo must not stop the agent
            log.error(
                "%s[0] offset=%d: control record %r failed: %s", self.topics.control, offset, record, exc
            )

    # -- the app task ----------------------------------------------------------------
    async def _drain_control(self, table: MutableMapping[str, Any], timeout_s: float = 60.0) -> None:
        """Wait until the agent applied every control record written before we started: its
        position in the table reached their end (or, for a table that keeps no position yet, the
        group's committed offset did)."""
        end = (await asyncio.to_thread(broker_for(self.settings).end_offsets, [(self.topics.control, 0)]))[0]
        admin = KafkaAdmin(self.settings.bootstrap, self.settings.kafka_replication_factor)
        position = ControlTable(table)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.applied_offset + 1 < end:
            stored = position.read()
            if stored is None:
                stored = (
                    await asyncio.to_thread(admin.committed, self.topics.app_id, self.topics.control, 1)
                )[0]
            if stored >= end:
                return
            if asyncio.get_running_loop().time() > deadline:
                log.warning(
                    "%s: control records up to %d not applied after %.0f s",
                    self.topics.control,
                    end,
                    timeout_s,
                )
                return
            await asyncio.sleep(0.1)

    async def run(self, table: MutableMapping[str, Any]) -> None:
        definition = self.definition
        await self._drain_control(table)
        self._starting = True
        writers, readers = split_states({str(k): v for k, v in table.items()})
        for name, state in writers.items():
            log.info(
                "pipeline %s: writer %s resumes after %s[0] offset=%d%s",
                definition.name,
                name,
                self.topics.log,
                state.offset,
                " (replaying a failed range)" if state.failed else "",
            )
        self._commit_log = KafkaCommitLog(
            broker_for(self.settings), self.topics.log, self.settings.max_payload_bytes
        )
        runtime = PipelineRuntime(
            name=definition.name,
            log_=self._commit_log,
            store=KafkaStateStore(ControlChannel(self.settings.bootstrap, self.topics.control)),
            source=build_source(
                definition.reader.type,
                self.settings,
                definition.reader.options,
                definition.batch_size,
                definition.batch_wait_s,
            ),
            writers={
                w.name: (w.branch, build_sink(w.component.type, self.settings, w.component.options))
                for w in definition.writers
            },
            writer_states={w.name: writers.get(w.name, WriterState()) for w in definition.writers},
            reader_states=readers,
            batch_size=definition.batch_size,
            batch_wait_s=definition.batch_wait_s,
            flush_interval_s=definition.flush_interval_s or self.settings.offset_flush_interval_s,
            restart_after_s=definition.restart_after_s,
            errors_tolerance={w.name: w.errors_tolerance for w in definition.writers},
            write_retries={w.name: w.retry for w in definition.writers if w.retry is not None},
            dead_letters=self._dead_letters(),
        )
        tune_garbage_collector()
        await runtime.start()
        if self.settings.pipeline_progress:
            # The counts' base is taken here, before the writers' and the source's tasks first run
            # (start() returns without yielding after creating them): this run's entries all count.
            self.progress = PipelineProgress(Console(stderr=True), definition).__enter__()
            self.progress.show(runtime.status())
        self.runtime = runtime
        self._starting = False
        for writer, offset in self._queued_marks:
            try:
                await runtime.mark(writer, offset)
            except Exception as exc:  # an operator typo must not stop the pipeline
                log.error(
                    "pipeline %s: mark of %s at offset=%d failed: %s", definition.name, writer, offset, exc
                )
        self._queued_marks.clear()
        log.info(
            "pipeline %s running: %s[0] from offset=%d",
            definition.name,
            self.topics.log,
            min((s.state.next_offset for s in runtime.slots.values()), default=0),
        )
        while True:
            await asyncio.sleep(0.5)
            if self.progress is not None:
                self.progress.show(runtime.status())
            if self.settings.pipeline_exit_when_idle and await runtime.idle():
                failed = runtime.failed_writers()
                if failed:
                    self.exit_code = WRITER_FAILED_EXIT
                    log.error("pipeline %s idle with failed writer(s) %s: stopping", definition.name, failed)
                else:
                    log.info("pipeline %s idle: stopping", definition.name)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def _dead_letters(self) -> KafkaDeadLetters | None:
        if all(w.errors_tolerance is ErrorsTolerance.NONE for w in self.definition.writers):
            return None
        producer = AsyncProducer(self.settings.bootstrap, name=f"pipeline-{self.definition.name}-dlq")
        return KafkaDeadLetters(producer, self.topics.dlq)

    async def shutdown(self) -> None:
        """Clean shutdown: writers get up to `shutdown_timeout_s` (30 s) to commit."""
        if self.runtime is not None:
            runtime, self.runtime = self.runtime, None
            await runtime.stop(self.definition.shutdown_timeout_s)
            if self.progress is not None:
                # The last writes may have landed after the loop's last update (an idle stop checks
                # after updating): the closing table counts what the writers confirmed.
                self.progress.show(runtime.status())
            log.info(
                "pipeline %s stopped: %s",
                self.definition.name,
                {n: s.state.offset for n, s in runtime.slots.items()},
            )
        if self._commit_log is not None:
            await self._commit_log.close()
        if self.progress is not None:
            progress, self.progress = self.progress, None
            progress.__exit__(None, None, None)
