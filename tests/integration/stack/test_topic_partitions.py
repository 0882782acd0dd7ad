"""The worker's own topics get the partition count its table needs: created so when missing, and an
existing topic with fewer partitions is given the rest or, on a broker that cannot add partitions
(the embedded one), refused with an error naming the topic and the fix. Before, a broker
auto-created the ack topic with its default 4 partitions for a table of 8, and acks for the batches
of partitions 4-7 could not be produced."""

from __future__ import annotations

import pytest

from app.errors import ConfigError
from app.kafka.admin import KafkaAdmin, TopicSpec
from app.settings import Settings

pytestmark = [pytest.mark.integration]


def test_missing_topics_are_created_with_the_partitions_asked(stack: Settings, unique: str) -> None:
    admin = KafkaAdmin(stack.bootstrap)
    names = [f"ensure-{unique}-a", f"ensure-{unique}-b"]
    try:
        admin.ensure([TopicSpec(names[0], 8), TopicSpec(names[1], 1)])
        topics = admin.topics()
        assert (topics[names[0]], topics[names[1]]) == (8, 1)
    finally:
        admin.delete(names)


def test_a_topic_with_too_few_partitions_is_grown_or_refused(stack: Settings, unique: str) -> None:
    admin = KafkaAdmin(stack.bootstrap)
    name = f"ensure-{unique}-small"
    admin.create([TopicSpec(name, 2)])
    try:
        try:
            admin.ensure([TopicSpec(name, 4)])
        except ConfigError as exc:
            assert name in str(exc) and "delete the topic" in str(exc)
            assert admin.topics()[name] == 2
        else:
            assert admin.topics()[name] == 4
    finally:
        admin.delete([name])
