"""What any process can ask about a consumer from its topics, without being one of its copies:
the live members, the state of a key (from its owning copy, or the changelog), the dead letters."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
from confluent_kafka import Producer, TopicPartition

from app.consumer.engine import KEY_HEADER
from app.consumer.members import Member, live_members
from app.consumer.owner import Answer, KeyAnswer, Request, ask, decode_reply, encode_request
from app.crashpoints import crash_point
from app.errors import ServiceUnavailable
from app.kafka.admin import KafkaAdmin
from app.kafka.broker import BrokerPort
from app.kafka.consuming import partition_reader
from app.kafka.producing import produce_blocking
from app.kafka.reading import read_from, read_topic
from app.kafka_security import client_config
from app.ordered.errors import UndecodableMessage
from app.ordered.records import decode_internal, header_map, user_headers

__all__ = ["ask_owner", "changelog_states", "dead_letters", "key_state", "members"]


def members(broker: BrokerPort, name: str) -> list[Member]:
    records = read_topic(broker, f"{name}-members", compacted=True)
    return live_members([(m.key(), m.value()) for m in records])


def key_state(broker: BrokerPort, name: str, key: str) -> dict[int, dict[str, Any]]:
    """The newest state of `key` in each partition of the changelog `<name>-state` that has one
    (a key that never failed has none: it is delivered straight away)."""
    return changelog_states(broker, name, key, _partitions(broker.bootstrap, f"{name}-state"))


def changelog_states(
    broker: BrokerPort, name: str, key: str, partitions: list[int]
) -> dict[int, dict[str, Any]]:
    """`key`'s newest value (`{"s": GroupState JSON, "at_ms": written}`) in these partitions of
    `<name>-state`, where it has one."""
    found: dict[int, dict[str, Any] | None] = {}
    wanted = key.encode()
    topic = f"{name}-state"
    for msg in read_from(broker, {(topic, p): 0 for p in partitions}, compacted=True):
        if msg.key() == wanted:
            value = msg.value()
            found[msg.partition()] = None if value is None else orjson.loads(value)
    return {p: v for p, v in found.items() if v is not None}


def ask_owner(
    broker: BrokerPort, name: str, key: str, timeout_s: float = 5.0, *, everywhere: bool = False
) -> KeyAnswer:
    """The state of ordering key `key` as the copy owning it sees it (its state in memory, the
    record of the key running now, its records waiting), asked through `<name>-requests`; what no
    owner answers within `timeout_s` (no copy live, a rebalance) comes from the changelog, and
    the answer's `source` says which. `everywhere`: ask every lane partition's owner (for
    producers that do not partition the source by the ordering key with librdkafka's default
    partitioner)."""
    return ask(KafkaAsking(broker, name), key, timeout_s, everywhere=everywhere)


class KafkaAsking:
    """`owner.Transport` on the broker."""

    def __init__(self, broker: BrokerPort, name: str) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.name = name
        self.requests = f"{name}-requests"
        self.replies_topic = f"{name}-replies"

    def routes(self) -> list[str]:
        return [m.key_route for m in members(self.broker, self.name)]

    def lanes(self) -> int:
        return KafkaAdmin(self.bootstrap).topics().get(self.requests, 0)

    def reply_mark(self) -> int:
        return self.broker.end_offsets([(self.replies_topic, 0)])[0]

    def send(self, partitions: list[int], request: Request) -> None:
        producer = Producer(client_config(self.bootstrap, **{"linger.ms": 0}))
        value, key = encode_request(request), request.key.encode()
        for p in partitions:
            crash_point("consumer.state.request")
            produce_blocking(producer, self.requests, value, key, partition=p)
        if producer.flush(10) > 0:
            raise ServiceUnavailable(f"{self.requests}: the request was not confirmed within 10 s")

    def replies(self, since: int, timeout_s: float) -> Iterator[tuple[str, Answer]]:
        reader = partition_reader(self.bootstrap, f"{self.name}-replies-reader", reset="latest")
        try:
            reader.assign([TopicPartition(self.replies_topic, 0, since)])
            deadline = time.monotonic() + timeout_s
            while (left := deadline - time.monotonic()) > 0:
                for msg in reader.consume(100, min(left, 0.2)):
                    reply = decode_reply(msg.value()) if msg.error() is None else None
                    if reply is not None:
                        yield reply
        finally:
            reader.close()

    def changelog(self, key: str) -> dict[int, dict[str, Any]]:
        return key_state(self.broker, self.name, key)


def dead_letters(broker: BrokerPort, name: str, limit: int = 100) -> list[dict[str, Any]]:
    """The first `limit` dead letters, each with its source, key and the reason it failed."""
    topic = f"{name}-dlq"
    out: list[dict[str, Any]] = []
    for msg in read_from(broker, {(topic, p): 0 for p in _partitions(broker.bootstrap, topic)}):
        headers = list(msg.headers() or ())
        entry: dict[str, Any] = {
            "partition": msg.partition(),
            "offset": msg.offset(),
            "key": (msg.key() or b"").decode("utf-8", "replace"),
            "ordering_key": header_map(headers).get(KEY_HEADER, b"").decode("utf-8", "replace"),
            "value": (msg.value() or b"").decode("utf-8", "replace"),
            "headers": {k: v.decode("utf-8", "replace") for k, v in user_headers(headers)},
        }
        try:
            meta = decode_internal(headers)
            entry.update(message_id=meta.message_id, attempts=meta.failed_attempts)
            if meta.failure is not None:
                f = meta.failure
                entry.update(reason=f.reason, error_class=f.error_class, error=f.error, source=f.source)
        except UndecodableMessage as exc:
            entry.update(reason="undecodable", error=str(exc))
        out.append(entry)
        if len(out) >= limit:
            break
    return out


def _partitions(bootstrap: str, topic: str) -> list[int]:
    count = KafkaAdmin(bootstrap).topics().get(topic, 0)
    return list(range(count))
