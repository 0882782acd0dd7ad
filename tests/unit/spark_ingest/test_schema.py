"""Row validation and deterministic ids of the ingest job (pure)."""

from __future__ import annotations

import uuid

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.dataavailable import DataAvailable, deterministic_id, parse
from app.errors import InvalidInput
from spark_ingest.executor import event_json
from spark_ingest.schema import RowSource, csv_record, event_id, missing_columns, validate_row
from tests.support.strategies import data_available

ROW = {"recipient": "5790000000001", "origin": "timeseries", "message_type": "Notify", "weight": 2048}
SOURCE = RowSource("part-0.parquet", 17)


def test_id_from_file_identity_and_row_index() -> None:
    event = validate_row(dict(ROW), SOURCE)
    assert event.id == deterministic_id("row", SOURCE.file, str(SOURCE.row))
    assert validate_row(dict(ROW), SOURCE).id == event.id
    assert validate_row(dict(ROW), RowSource(SOURCE.file, 18)).id != event.id
    assert validate_row(dict(ROW), RowSource("part-1.parquet", 17)).id != event.id


def test_given_id_wins_and_key_derives_the_id() -> None:
    given_id = str(uuid.uuid4())
    assert validate_row({**ROW, "id": given_id, "key": "k1"}, SOURCE).id == given_id
    keyed = validate_row({**ROW, "key": "order-42"}, SOURCE)
    assert keyed.id == deterministic_id("key", "order-42")
    assert validate_row({**ROW, "key": "order-42"}, RowSource("elsewhere.csv", 0)).id == keyed.id
    assert validate_row({**ROW, "id": None, "key": ""}, SOURCE).id == event_id(ROW, SOURCE)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"origin": "billing"}, "origin"),
        ({"weight": 0}, "weight"),
        ({"weight": "12"}, "wrong type"),
        ({"recipient": "no spaces allowed"}, "recipient"),
        ({"message_type": ""}, "message_type"),
        ({"id": "not-a-guid"}, "not a GUID"),
        ({"bundleable": "yes"}, "bundleable"),
        ({"batch_item_id": "1:g:0"}, "assigned by the job"),
    ],
)
def test_invalid_rows_name_the_reason_like_parse(change: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        validate_row({**ROW, **change}, SOURCE)


def test_missing_field_is_rejected_and_null_means_missing() -> None:
    with pytest.raises(InvalidInput, match="missing field 'weight'"):
        validate_row({**ROW, "weight": None}, SOURCE)
    assert validate_row({**ROW, "bundleable": None}, SOURCE).bundleable is True


def test_csv_cells_are_converted_before_validation() -> None:
    record = csv_record({**{k: str(v) for k, v in ROW.items()}, "bundleable": "false"})
    event = validate_row(record, SOURCE)
    assert (event.weight, event.bundleable) == (2048, False)
    with pytest.raises(InvalidInput, match="weight"):
        validate_row(csv_record({**ROW, "weight": "2kB"}), SOURCE)
    assert "bundleable" not in csv_record({**ROW, "bundleable": ""})


@pytest.mark.parametrize("cell", ["\u00b2", "-\u00b9", "\u0663", "1\u00b2"])
def test_a_weight_of_non_ascii_digits_is_a_rejected_row_not_a_failed_task(cell: str) -> None:
    """`"²".isdigit()` is true and `int("²")` raises ValueError: the task failed, Spark retried it
    and the whole job aborted on one cell."""
    with pytest.raises(InvalidInput, match="weight"):
        validate_row(csv_record({**ROW, "weight": cell}), SOURCE)


def test_missing_columns() -> None:
    assert missing_columns(["recipient", "origin", "weight", "key"]) == ["message_type"]
    assert missing_columns([*ROW]) == []


events = data_available


@given(events)
def test_event_json_serialises_exactly_like_to_json(event: DataAvailable) -> None:
    assert orjson.dumps(event_json(event)) == orjson.dumps(event.to_json())
    assert parse(orjson.loads(orjson.dumps(event_json(event)))) == event


@given(st.text(min_size=1, max_size=40), st.integers(0, 10**9), st.integers(0, 10**9))
def test_row_ids_are_distinct_per_position(file: str, row_a: int, row_b: int) -> None:
    same = event_id({}, RowSource(file, row_a)) == event_id({}, RowSource(file, row_b))
    assert same == (row_a == row_b)
