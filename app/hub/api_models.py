"""The actor API's bodies (GET /api/peek, DELETE /api/dequeue) and its OpenAPI operations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.dataavailable import DOMAINS
from app.web.models import ApiModel, omitted_when_none
from app.web.openapi import ACTOR, Operation, path_param, query_param

if TYPE_CHECKING:
    from app.hub.service import PeekedBundle

__all__ = ["OPERATIONS", "Bundle", "BundleEvent", "Dequeued", "bundle_answer"]


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
    bundle_id: str
    dequeued: bool


def bundle_answer(bundle: PeekedBundle) -> Bundle:
    ref = bundle.ref
    return Bundle(
        bundle_id=ref.bundle_id,
        domain=ref.cabinet.domain,
        message_type=ref.cabinet.message_type,
        weight=ref.weight,
        count=len(bundle.events),
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
        params=({**BUNDLE_ID, "required": True},),
        security=ACTOR,
        errors=(400, 401, 404, 409, 503),
    ),
]
