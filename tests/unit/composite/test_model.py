"""CompositeTopic operations exactly as the Varadhi design defines them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.composite import CompositeTopic, check_partition_count, group_hash
from app.composite.errors import InvalidGroupId, InvalidPartitionCount, ReadPointerOutOfRange
from app.composite.jsonl import read_produce_file
from app.composite.model import check_group_id
from app.composite.producer import encode_payload
from app.errors import InvalidInput


def _allowed(n: int) -> bool:
    return n in (1, 2, 3) or n % 4 == 0 or n % 6 == 0


@given(st.integers(min_value=-5, max_value=500))
def test_partition_count_rule(n: int) -> None:
    if n >= 1 and _allowed(n):
        assert check_partition_count(n) == n
    else:
        with pytest.raises(InvalidPartitionCount, match="1, 2, 3 or a multiple of 4 or 6"):
            check_partition_count(n)


def test_create_add_and_switch_follow_the_seed() -> None:
    topic = CompositeTopic.create("orders", 2)
    assert [t.name for t in topic.storage_topics] == ["orders.0"]
    assert topic.produce_pointer == 0
    grown = topic.add_storage_topic(4)
    assert grown.produce_pointer == 0, "AddStorageTopic never moves the produce pointer"
    assert grown.storage_topics[1].k == 2
    odd = grown.add_storage_topic(6)
    assert odd.storage_topics[2].k == 3, "base count is 4 / K=2 = 2, and 6 = 3 x 2"
    switched = odd.switch_produce()
    assert switched.produce_pointer == 1
    last = switched.switch_produce().switch_produce().switch_produce()
    assert last.produce_pointer == 2, "SwitchProduce at the last storage topic stays there"


def test_k_rule_uses_the_previous_topics_base_count() -> None:
    topic = CompositeTopic.create("t", 2).add_storage_topic(8).add_storage_topic(24)
    assert [s.k for s in topic.storage_topics] == [1, 4, 12]
    unrelated = CompositeTopic.create("u", 4).add_storage_topic(6)
    assert unrelated.storage_topics[1].k == 1


def test_produce_targets_the_storage_topic_at_the_pointer() -> None:
    topic = CompositeTopic.create("t", 4).add_storage_topic(8)
    name, partition = topic.target("g1")
    assert name == "t.0"
    assert partition == topic.storage_topics[0].route(group_hash("g1"))
    name, partition = topic.switch_produce().target("g1")
    assert name == "t.1"
    assert 0 <= partition < 8


def test_consume_refuses_pointers_out_of_range() -> None:
    topic = CompositeTopic.create("t", 4)
    assert topic.storage(0, 3).name == "t.0"
    with pytest.raises(ReadPointerOutOfRange):
        topic.storage(1)
    with pytest.raises(ReadPointerOutOfRange):
        topic.storage(0, 4)


def test_json_round_trip() -> None:
    topic = CompositeTopic.create("t", 4).add_storage_topic(8).switch_produce()
    assert CompositeTopic.from_json(topic.to_json()) == topic


@pytest.mark.parametrize("bad", ["", "a b", "x" * 201, "../etc", ".hidden"])
def test_topic_names_are_checked(bad: str) -> None:
    with pytest.raises(InvalidInput):
        CompositeTopic.create(bad, 1)


def test_group_id_checks() -> None:
    assert check_group_id("g", 4) == "g"
    with pytest.raises(InvalidGroupId):
        check_group_id("", 4)
    with pytest.raises(InvalidGroupId, match="longer than 4 bytes"):
        check_group_id("ééé", 4)


def test_payload_encoding_and_size_limit() -> None:
    assert encode_payload({"a": 1}, 100) == b'{"a":1}'
    assert encode_payload("x", 100) == b"x"
    with pytest.raises(InvalidInput, match="exceeds"):
        encode_payload(b"x" * 101, 100)


def test_produce_file_is_validated_whole(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "in.jsonl"
    path.write_text('{"group_id": "a", "payload": 1}\n\n{"group_id": "b", "payload": {"x": 2}}\n')
    assert read_produce_file(path, 16, 100) == [("a", b"1"), ("b", b'{"x":2}')]
    path.write_text('{"group_id": "a", "payload": 1}\nnot json\n')
    with pytest.raises(InvalidInput, match=":2: invalid JSON"):
        read_produce_file(path, 16, 100)
    path.write_text('{"group_id": "", "payload": 1}\n')
    with pytest.raises(InvalidInput, match=":1: group_id"):
        read_produce_file(path, 16, 100)
    path.write_text('{"payload": 1}\n')
    with pytest.raises(InvalidInput, match="expected an object"):
        read_produce_file(path, 16, 100)
    # A payload over the limit on a later line: the lines before it were sent, then the command
    # failed (a re-run duplicated them); now nothing is sent.
    path.write_text('{"group_id": "a", "payload": 1}\n{"group_id": "b", "payload": "%s"}\n' % ("x" * 101))
    with pytest.raises(InvalidInput, match=":2: payload of 101 bytes exceeds MAX_PAYLOAD_BYTES=100"):
        read_produce_file(path, 16, 100)


def test_a_switch_records_when_the_pointer_moved() -> None:
    topic = CompositeTopic.create("t", 2).add_storage_topic(4)
    assert topic.switched_at_ms == 0 and not topic.switched_within(10_000, 5.0)
    switched = topic.switch_produce(now_ms=1_000_000)
    assert switched.switched_at_ms == 1_000_000
    assert switched.switched_within(1_004_999, 5.0) and not switched.switched_within(1_005_000, 5.0)
    # a reader whose clock may run up to 30 s ahead of the switcher's waits as long again
    assert switched.switched_within(1_034_999, 5.0, 30.0) and not switched.switched_within(
        1_035_000, 5.0, 30.0
    )
    assert switched.switch_produce(now_ms=2_000_000).switched_at_ms == 1_000_000  # at the last: no move
    assert CompositeTopic.from_json(switched.to_json()) == switched
    older = switched.to_json()
    del older["switched_at_ms"]  # a definition written before the field: switched long ago
    assert CompositeTopic.from_json(older).switched_at_ms == 0
