"""The consumer profiles of app.kafka.consuming: the configuration each gives, overrides winning,
and that librdkafka accepts it (a consumer is built and closed; no broker is contacted)."""

from __future__ import annotations

from typing import Any

import pytest

from app.kafka import consuming
from app.kafka.consuming import (
    group_member,
    member_config,
    offset_client,
    offsets_config,
    partition_reader,
    reader_config,
)

NOWHERE = "127.0.0.1:1"


def test_a_group_member_commits_by_hand_and_starts_a_new_group_at_the_log_start() -> None:
    assert member_config("b:9092", "orders", client_id="orders-1") == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "PLAINTEXT",  # the process's Kafka security (app.kafka_security)
        "group.id": "orders",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "client.id": "orders-1",
    }


def test_a_group_member_without_a_client_id_leaves_librdkafkas() -> None:
    assert "client.id" not in member_config("b:9092", "orders")
    assert member_config("b:9092", "orders", reset="latest")["auto.offset.reset"] == "latest"


def test_a_reader_commits_nothing_and_resets_below_the_log_start_to_its_oldest_record() -> None:
    assert reader_config("b:9092", "hubstream-reader") == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "PLAINTEXT",  # the process's Kafka security (app.kafka_security)
        "group.id": "hubstream-reader",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }


def test_a_reader_can_report_the_partition_end_and_reset_to_the_log_end() -> None:
    conf = reader_config("b:9092", "g", reset="latest", partition_eof=True)
    assert conf["auto.offset.reset"] == "latest"
    assert conf["enable.partition.eof"] is True


def test_an_offset_client_only_names_its_group() -> None:
    assert offsets_config("b:9092", "orders") == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "PLAINTEXT",  # the process's Kafka security (app.kafka_security)
        "group.id": "orders",
        "enable.auto.commit": False,
    }


def test_overrides_add_options_and_win_over_the_profile() -> None:
    extra = {"fetch.wait.max.ms": 50, "enable.auto.commit": True, "auto.offset.reset": "earliest"}
    for conf in (
        member_config("b:9092", "g", reset="latest", overrides=extra),
        reader_config("b:9092", "g", overrides=extra),
        offsets_config("b:9092", "g", overrides=extra),
    ):
        assert conf["fetch.wait.max.ms"] == 50
        assert conf["enable.auto.commit"] is True
        assert conf["auto.offset.reset"] == "earliest"


def test_the_builders_hand_the_profile_to_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []

    def fake_consumer(conf: dict[str, Any]) -> dict[str, Any]:
        built.append(conf)
        return conf

    monkeypatch.setattr(consuming, "Consumer", fake_consumer)
    group_member("b:9092", "g", client_id="c", overrides={"session.timeout.ms": 6000})
    partition_reader("b:9092", "r", partition_eof=True, overrides={"fetch.wait.max.ms": 50})
    offset_client("b:9092", "o")
    assert built == [
        member_config("b:9092", "g", client_id="c", overrides={"session.timeout.ms": 6000}),
        reader_config("b:9092", "r", partition_eof=True, overrides={"fetch.wait.max.ms": 50}),
        offsets_config("b:9092", "o"),
    ]


def test_librdkafka_accepts_every_profile() -> None:
    for consumer in (
        group_member(NOWHERE, "g", client_id="c", overrides={"partition.assignment.strategy": "range"}),
        partition_reader(NOWHERE, "r", reset="earliest", partition_eof=True),
        offset_client(NOWHERE, "o"),
    ):
        consumer.close()
