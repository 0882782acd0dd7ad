"""A Kafka header may have no value (null). Records carrying one are read like any other: the value
reads as empty. Before, `.decode()` on it raised AttributeError inside the shard, which restarted
and read the same record again, for ever."""

from __future__ import annotations

import pytest
from aiokafka import ConsumerRecord

from app.consumer.engine import KEY_HEADER
from app.consumer.orphans import copy_at
from app.ordered.errors import UndecodableMessage
from app.ordered.records import InternalMeta, decode_internal, encode_internal, header_map, user_headers
from app.settings import Settings
from app.subscription.delivery import Delivery, ShardStats, main_work
from app.subscription.memory import MemoryStates
from app.subscription.model import EndpointSpec, Subscription
from app.subscription.orphans import FED_HEADER, fed_place

NULLS: list[tuple[str, bytes | None]] = [("note", None), ("message-id", None), ("trace", b"t-1")]


def delivery() -> Delivery:
    sub = Subscription("s", "mq", EndpointSpec("callable", "rec"))

    async def nowhere(*_: object) -> None:
        raise AssertionError("nothing is produced here")

    return Delivery(Settings(), sub, MemoryStates(), ShardStats(), nowhere, 0)  # type: ignore[arg-type]


def test_a_null_header_value_reads_as_empty() -> None:
    assert header_map(NULLS) == {"note": b"", "message-id": b"", "trace": b"t-1"}
    assert user_headers(NULLS) == [("note", b""), ("message-id", b""), ("trace", b"t-1")]


def test_a_main_queue_record_with_null_headers_becomes_a_message() -> None:
    record = ConsumerRecord("mq.0", 3, 17, 0, 0, b"g1", b"payload", None, 1, 1, NULLS)
    message = delivery().message(main_work(record, 0, 256))
    assert message.headers == {"note": "", "message-id": "", "trace": "t-1"}
    assert message.message_id == "0-3-17"  # a null message-id is no id: the position names it


def test_internal_headers_without_values_are_undecodable_not_a_crash() -> None:
    meta = InternalMeta((0, 5), 1, "m-5", 2, 0)
    headers = [(k, None if k == "hs-main" else v) for k, v in encode_internal(meta, NULLS)]
    with pytest.raises(UndecodableMessage):
        decode_internal(headers)
    assert decode_internal(encode_internal(meta, NULLS)).message_id == "m-5"


def test_copies_with_null_valued_markers_are_judged_not_crashed_on() -> None:
    assert fed_place([(FED_HEADER, None)]) is None
    assert copy_at("rq", 4, [(KEY_HEADER, None)]) is None
