"""The actor API's bodies (GET /api/peek, DELETE /api/dequeue) and its OpenAPI operations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.dataavailable import DOMAINS
from app.web.models import ApiModel, omitted_when_none
from app.web.openapi import ACTOR, Operation, path_param, query_param

if TYPE_CHECKING:
    from app.hub.service import PeekedBundle

__all__ = ["OPERATIONS", "Bundle", "BundleEvent", "Dequeued", "bundle_wire", "dequeued_wire"]


class BundleEvent(ApiModel):
    """A DataAvailable in the bundle, at its sequence number in the actor's queue."""

    id: str
    recipient: str
    origin: str
    message_type: str
    weight: int
    bundleable: bool
    sequence: int
    batch_item_id: str | None = omitted_when_none()


class Bundle(ApiModel):
    bundle_id: str
    domain: str
    message_type: str
    weight: int
    count: int
    events: list[BundleEvent]


class Dequeued(ApiModel):
    """A dequeue's answer; asked to peek too (`peek=`), the next bundle when one is available."""

    bundle_id: str
    dequeued: bool
    next: Bundle | None = omitted_when_none()


def _wire_names(model: type[ApiModel]) -> dict[str, str]:
    return {name: field.alias or name for name, field in model.model_fields.items()}


_BUNDLE = _wire_names(Bundle)
_EVENT = _wire_names(BundleEvent)
_DEQUEUED = _wire_names(Dequeued)


def bundle_wire(bundle: PeekedBundle) -> dict[str, Any]:
    """The peek answer as `to_wire(Bundle(...))` gives it, built as plain dicts under the models'
    wire names: a bundle holds up to 51,200 events, and a validated model per event costs ~3 us
    more than the dict (tests/unit/hub/test_bundle_wire.py holds the two equal)."""
    ref = bundle.ref
    e = _EVENT
    events = []
    for s in bundle.events:
        event = s.event
        wire = {
            e["id"]: event.id,
            e["recipient"]: event.recipient,
            e["origin"]: event.origin,
            e["message_type"]: event.message_type,
            e["weight"]: event.weight,
            e["bundleable"]: event.bundleable,
            e["sequence"]: s.seq,
        }
        if event.batch_item_id is not None:  # omitted when none, as the model's field says
            wire[e["batch_item_id"]] = event.batch_item_id
        events.append(wire)
    b = _BUNDLE
    return {
        b["bundle_id"]: ref.bundle_id,
        b["domain"]: ref.cabinet.domain,
        b["message_type"]: ref.cabinet.message_type,
        b["weight"]: ref.weight,
        b["count"]: len(bundle.events),
        b["events"]: events,
    }


def dequeued_wire(bundle_id: str, following: PeekedBundle | None) -> dict[str, Any]:
    """The dequeue answer as `to_wire(Dequeued(...))` gives it, its next bundle by `bundle_wire`."""
    d = _DEQUEUED
    wire: dict[str, Any] = {d["bundle_id"]: bundle_id, d["dequeued"]: True}
    if following is not None:
        wire[d["next"]] = bundle_wire(following)
    return wire


TAG = "message hub"
BUNDLE_ID = query_param("bundleId", {"type": "string", "format": "uuid"}, description="bundle GUID")
NOTHING = {204: "Nothing to peek"}
PEEK_ERRORS = (400, 401, 503)

OPERATIONS = [
    Operation(
        "get",
        "/api/peek",
        "Peek the actor's next bundle (the same one again until dequeued)",
        TAG,
        Bundle,
        params=(BUNDLE_ID,),
        security=ACTOR,
        errors=PEEK_ERRORS,
        bodiless=NOTHING,
    ),
    Operation(
        "get",
        "/api/peek/{domain}",
        "Peek the actor's next bundle of one domain",
        TAG,
        Bundle,
        params=(path_param("domain", {"type": "string", "enum": sorted(DOMAINS)}), BUNDLE_ID),
        security=ACTOR,
        errors=PEEK_ERRORS,
        bodiless=NOTHING,
    ),
    Operation(
        "delete",
        "/api/dequeue",
        "Acknowledge (dequeue) a peeked bundle",
        TAG,
        Dequeued,
        params=(
            {**BUNDLE_ID, "required": True},
            query_param(
                "peek",
                {"type": "string", "enum": ["all", *sorted(DOMAINS)]},
                description="also peek the next bundle (of all domains, or of one) and answer it as"
                " `next` (left out when nothing is available): one call per bundle while draining",
            ),
        ),
        security=ACTOR,
        errors=(400, 401, 404, 409, 503),
    ),
]
