"""One record to a topic, answered only once the broker confirmed it: for the definitions kept in
compacted topics (composite-topic metadata, subscription definitions), written by operator
commands. The crash point is named by the caller."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer

from app.crashpoints import crash_point
from app.errors import ServiceUnavailable
from app.kafka_security import client_config

__all__ = ["produce_confirmed"]


def produce_confirmed(
    bootstrap: str, topic: str, key: bytes, value: bytes | None, *, point: str, timeout_s: float = 30.0
) -> None:
    """Write one record (None: a tombstone); ServiceUnavailable when the broker refused it or did
    not confirm it within `timeout_s` (the caller's command fails and may be run again)."""
    crash_point(point)
    producer = Producer(client_config(bootstrap, **{"enable.idempotence": True}))
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
    left = producer.flush(timeout_s)
    if errors:
        raise ServiceUnavailable(f"write of {key.decode(errors='replace')} to {topic} failed: {errors[0]}")
    if left:
        raise ServiceUnavailable(
            f"write of {key.decode(errors='replace')} to {topic} not confirmed in {timeout_s:.0f} s"
        )
