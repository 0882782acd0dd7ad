"""Thin adapters over confluent-kafka shared by every part of hubstream."""

from app.kafka.admin import KafkaAdmin, TopicSpec

__all__ = ["KafkaAdmin", "TopicSpec"]
