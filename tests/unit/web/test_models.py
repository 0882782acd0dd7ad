"""Bodies go out camelCase through their models, and request bodies a model refuses are a 400
InvalidInput naming the field."""

from __future__ import annotations

import orjson
import pytest
from pydantic import StrictInt

from app.errors import InvalidInput
from app.hub.api_models import BundleEvent
from app.subscription.api_models import GroupStateAnswer
from app.web.models import ApiModel, RequestModel
from app.web.responses import model_response, parse_body


class Answer(ApiModel):
    group_id: str
    dead_lettered: int


class Body(RequestModel):
    batch_size: StrictInt


def _json(model: ApiModel) -> object:
    body = model_response(model).body
    assert isinstance(body, bytes)
    return orjson.loads(body)


def test_answers_are_camel_case() -> None:
    assert _json(Answer(group_id="g", dead_lettered=2)) == {"groupId": "g", "deadLettered": 2}
    read = Answer(group_id="g", dead_lettered=2)
    assert Answer.model_validate({"groupId": "g", "deadLettered": 2}) == read
    assert Answer.model_validate({"group_id": "g", "dead_lettered": 2}) == read


def test_keys_left_out_rather_than_null() -> None:
    event = BundleEvent(
        id="e", recipient="r", origin="timeseries", message_type="T", weight=1, bundleable=True, sequence=3
    )
    assert "batchItemId" not in _json(event)  # type: ignore[operator]
    assert _json(event.model_copy(update={"batch_item_id": "1:g:0"}))["batchItemId"] == "1:g:0"  # type: ignore[index]
    elsewhere = GroupStateAnswer(subscription="s", group_id="g", owned_here=False, state=None)
    assert _json(elsewhere) == {"subscription": "s", "groupId": "g", "ownedHere": False, "state": None}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([1], "the request body must be a JSON object"),
        ({}, "batchSize is required"),
        ({"batchSize": "5"}, "batchSize '5' is not an integer"),
        ({"batchSize": True}, "batchSize True is not an integer"),
        ({"batchSize": 1.5}, "batchSize 1.5 is not an integer"),
    ],
)
def test_refused_bodies_name_the_field(data: object, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        parse_body(Body, data)


def test_bodies_read_by_wire_name() -> None:
    assert parse_body(Body, {"batchSize": 5, "unknown": 1}).batch_size == 5
