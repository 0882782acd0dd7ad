"""The composite-source part of a running copy (`KeyedConsumer`, app.consumer.kafka): where it
starts in a composite topic's storage topics, and its move to the next one once the group drained
the one it reads."""

from __future__ import annotations

import asyncio
import logging
import time

from app.composite.advance import may_leave
from app.composite.store import MetadataStore
from app.consumer.model import ConsumerSettings, record_key
from app.consumer.source import Source
from app.consumer.topics import drained_facts, resolve_source
from app.errors import HubstreamError

__all__ = ["CompositeFollowing"]

log = logging.getLogger(__name__)


class CompositeFollowing:
    """The composite-source part of `KeyedConsumer` (which sets these attributes)."""

    settings: ConsumerSettings
    member_id: str
    _source: Source
    read_idx: int
    _switch_seen_at: float | None
    _held_logged: int
    _topics: list[str]

    # -- composite source ------------------------------------------------------------------------
    async def _start_composite(self, store: MetadataStore) -> None:
        """Resolve the composite topic and start past the storage topics the group drained."""
        s = self.settings
        self._source = await asyncio.to_thread(resolve_source, s, store)
        self._topics = [s.retry_topic]  # the lanes; their storage partitions are assigned by hand
        # Producers may still write what a recent switch left: `_follow_source` waits the grace.
        recent = self._source.composite.switched_within(int(time.time() * 1000), s.grace_s, s.clock_skew_s)
        while not recent and may_leave(self._source.composite, self.read_idx):
            drained = await asyncio.to_thread(drained_facts, s, self._source, self.read_idx)
            idx = self._source.read_index(self.read_idx, drained)
            if idx == self.read_idx:
                break
            self.read_idx = idx
        log.info(
            "%s: reads %s from storage topic %d (%s)",
            self.member_id,
            self._source.name,
            self.read_idx,
            self._source.composite.storage_topics[self.read_idx].name,
        )

    async def _source_loop(self, store: MetadataStore) -> None:
        """Follow the composite topic's definition (new storage topics, the produce pointer) and
        move on to the next storage topic by the rule (`Source.read_index`)."""
        interval = max(0.2, min(1.0, self.settings.grace_s / 2))
        while True:
            try:
                await self._follow_source(store)
            except HubstreamError as exc:
                log.info("%s: composite topic not followed this time: %s", self.member_id, exc)
            await asyncio.sleep(interval)

    async def _follow_source(self, store: MetadataStore) -> None:
        s = self.settings
        assert s.composite_topic is not None
        topic = await asyncio.to_thread(store.get, s.composite_topic)
        source = self._source = Source.of_composite(topic, record_keys=s.key_of is record_key)
        idx = self.read_idx
        if not may_leave(topic, idx):
            self._switch_seen_at = None
            return
        # Producers that still hold the old definition may write T_idx for a while yet.
        if self._switch_seen_at is None:
            self._switch_seen_at = time.monotonic()
        if time.monotonic() - self._switch_seen_at < s.grace_s:
            return
        drained = await asyncio.to_thread(drained_facts, s, source, idx)
        new = source.read_index(idx, drained)
        if new == idx:
            if source.held(idx) and all(drained[idx].values()) and self._held_logged != idx:
                self._held_logged = idx
                log.warning(
                    "%s: stays at the end of %s: %s does not keep the keys of %s's partitions "
                    "together (its partition count is not K times theirs, or K > 1 with an "
                    "ordering key other than the record key)",
                    self.member_id,
                    topic.storage_topics[idx].name,
                    topic.storage_topics[idx + 1].name,
                    topic.storage_topics[0].name,
                )
            return
        log.info(
            "%s: %s drained by the group, reading %s",
            self.member_id,
            topic.storage_topics[idx].name,
            topic.storage_topics[new].name,
        )
        self.read_idx = new  # the poll thread resumes the new storage topic's partitions
        self._switch_seen_at = None
