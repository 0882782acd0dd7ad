"""The peek answer built as plain dicts (`bundle_wire`) is exactly what the `Bundle` model would
answer for the same bundle: same keys (camelCase, the batch item id left out when none), same
values, and it validates as a `Bundle`."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from app.dataavailable import DataAvailable
from app.hub.api_models import Bundle, BundleEvent, Dequeued, bundle_wire, dequeued_wire
from app.hub.bundling import BundleRef
from app.hub.model import CabinetKey, StoredEvent
from app.hub.service import PeekedBundle
from app.web.models import to_wire
from tests.support.strategies import data_available

events = data_available


@given(st.lists(events, max_size=20), st.integers(0, 10**9))
def test_the_dict_answer_is_the_models_answer(stored: list[DataAvailable], first_seq: int) -> None:
    bundle = PeekedBundle(
        BundleRef(str(uuid.uuid4()), CabinetKey("r1", "timeseries", "mt"), (), len(stored), 123),
        tuple(StoredEvent(event, first_seq + i, "d1") for i, event in enumerate(stored)),
    )
    model = Bundle(
        bundle_id=bundle.ref.bundle_id,
        domain="timeseries",
        message_type="mt",
        weight=123,
        count=len(stored),
        events=[
            BundleEvent(
                id=s.event.id,
                recipient=s.event.recipient,
                origin=s.event.origin,
                message_type=s.event.message_type,
                weight=s.event.weight,
                bundleable=s.event.bundleable,
                sequence=s.seq,
                batch_item_id=s.event.batch_item_id,
            )
            for s in bundle.events
        ],
    )
    wire = bundle_wire(bundle)
    assert wire == to_wire(model)
    assert to_wire(Bundle.model_validate(wire)) == wire
    # The dequeue's answer carries it as `next`, and leaves `next` out when nothing follows.
    dequeued = str(uuid.uuid4())
    assert dequeued_wire(dequeued, bundle) == to_wire(Dequeued(bundle_id=dequeued, dequeued=True, next=model))
    assert dequeued_wire(dequeued, None) == to_wire(Dequeued(bundle_id=dequeued, dequeued=True))
    assert "next" not in dequeued_wire(dequeued, None)
