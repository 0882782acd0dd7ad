"""MAX_PAYLOAD_BYTES limits new input; copies of records the broker already holds (RQ/DLQ) are not
refused for their size (a shard must be able to sideline or dead-letter any record it read)."""

from __future__ import annotations

import pytest

from app.composite.errors import InvalidPayload
from app.composite.producer import encode_payload


def test_new_payloads_over_the_limit_are_refused() -> None:
    assert encode_payload(b"x" * 10, 10) == b"x" * 10
    with pytest.raises(InvalidPayload, match="11 bytes exceeds MAX_PAYLOAD_BYTES=10"):
        encode_payload(b"x" * 11, 10)


def test_copies_have_no_limit_of_their_own() -> None:
    assert len(encode_payload(b"x" * (2 * 1024 * 1024), None)) == 2 * 1024 * 1024
    assert encode_payload({"a": 1}, None) == b'{"a":1}'
