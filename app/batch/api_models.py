"""The batch API's bodies (Carlyle's camelCase on the wire) and its OpenAPI operations."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, StrictInt, StrictStr, WithJsonSchema
from pydantic.alias_generators import to_camel

from app.batch.model import EstimatedBatch, ExactBatch
from app.web.models import ApiModel, RequestModel, omitted_when_none
from app.web.openapi import ADMIN, MUTATING_ERRORS, Method, Operation, Schema, path_param, query_param

__all__ = [
    "MAX_USER_KEY_CHARS",
    "OPERATIONS",
    "AckItems",
    "AckedItems",
    "AddItems",
    "AddedItems",
    "BatchCompletion",
    "BatchStatus",
    "Closed",
    "CreateEstimated",
    "CreateExact",
    "Created",
    "CreatedEstimated",
    "DecrEstimated",
    "Decremented",
    "DeletedEstimated",
    "EstimatedAck",
    "EstimatedBatchView",
    "EstimatedResult",
    "ExactBatchView",
    "ItemGroup",
    "RefusedItem",
    "Removed",
    "estimated_view",
    "exact_view",
]

MAX_USER_KEY_CHARS = 1024
UserKey = StrictStr | None
# Ids are documented as strings but checked by app.batch.ids, whose MalformedItemId names the bad one.
ItemId = Annotated[Any, WithJsonSchema({"type": "string"})]


class BatchStatus(ApiModel):
    partitions_served: list[int]
    partitions: int
    owners: dict[str, str]  # table partition -> URL of the worker serving it


class CreateExact(RequestModel):
    user_key: UserKey = Field(default=None, max_length=MAX_USER_KEY_CHARS)


class Created(ApiModel):
    batch_id: int


class AddItems(RequestModel):
    batch_id: StrictInt | StrictStr  # digits either way (checked by the view)
    items: StrictInt


class ItemGroup(ApiModel):
    id: str
    upto: int


class AddedItems(ApiModel):
    batch_item_group_ids: list[ItemGroup]


class AckItems(RequestModel):
    batch_item_ids: list[ItemId]


class BatchCompletion(ApiModel):
    batch_id: int
    user_key: str | None


class RefusedItem(ApiModel):
    item_id: str
    error: str  # BatchNotFound (no such batch, or it is gone) or ItemNotFound (the batch has no such item)
    reason: str


class AckedItems(ApiModel):
    batch_completions: list[BatchCompletion]
    # ids that were not applied, each with why (the others of the request were); absent when none
    refused_item_ids: list[RefusedItem] | None = omitted_when_none()


class Removed(ApiModel):
    batches_removed: int
    items_removed: int


class Closed(ApiModel):
    is_complete: bool


class ExactBatchView(ApiModel):
    batch_id: int
    is_complete: bool
    is_closed: bool
    user_key: str | None
    pending_items: int
    total_items: int


class CreateEstimated(RequestModel):
    batch_size: StrictInt
    user_key: UserKey = Field(default=None, max_length=MAX_USER_KEY_CHARS)


class CreatedEstimated(ApiModel):
    batch_id: str


class EstimatedAck(RequestModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        strict=True,
        json_schema_extra={
            "required": ["batchId"]
        },  # a missing one is a MalformedItemId, not a 400 of its own
    )

    batch_id: ItemId = None
    by: StrictInt = 1


class DecrEstimated(RequestModel):
    acks: list[EstimatedAck]


class EstimatedResult(ApiModel):
    batch_id: str
    user_key: str | None
    is_complete: bool


class Decremented(ApiModel):
    results: list[EstimatedResult]


class EstimatedBatchView(ApiModel):
    batch_id: str
    is_complete: bool
    is_closed: bool
    user_key: str | None
    pending: int


def exact_view(batch: ExactBatch) -> ExactBatchView:
    return ExactBatchView(
        batch_id=batch.batch_id,
        is_complete=batch.is_complete,
        is_closed=batch.is_closed,
        user_key=batch.user_key,
        pending_items=batch.pending_items,
        total_items=batch.total_items,
    )


def estimated_view(batch: EstimatedBatch) -> EstimatedBatchView:
    return EstimatedBatchView(
        batch_id=batch.batch_id,
        is_complete=batch.is_complete,
        is_closed=batch.is_closed,
        user_key=batch.user_key,
        pending=batch.pending,
    )


class DeletedEstimated(ApiModel):
    batch_id: str
    deleted: bool


EXACT = "/api/v1/batch/exact"
ESTIMATED = "/api/v1/batch/estimated"
TAG = "batches"
EXACT_ID = path_param("batchId", {"type": "string", "pattern": "^[0-9]+$"}, "exact batch id")
ESTIMATED_ID = path_param("batchId", {"type": "string", "format": "uuid"}, "estimated batch id")
SINCE = query_param("since", {"type": "string", "format": "date-time"}, True, "ISO 8601 time")
READ_ERRORS = (400, 404, 503)


def _change(
    method: Method,
    path: str,
    summary: str,
    response: type[ApiModel],
    *,
    request: type[RequestModel] | None = None,
    request_required: bool = True,
    params: tuple[Schema, ...] = (),
) -> Operation:
    return Operation(
        method,
        path,
        summary,
        TAG,
        response,
        request=request,
        request_required=request_required,
        params=params,
        security=ADMIN,
        errors=MUTATING_ERRORS,
    )


OPERATIONS = [
    Operation(
        "get",
        "/api/v1/batch/status",
        "Batch-table partitions this worker serves and who serves the others",
        TAG,
        BatchStatus,
    ),
    _change("post", EXACT, "Open an exact batch", Created, request=CreateExact, request_required=False),
    _change(
        "post",
        f"{EXACT}/items",
        "Add items to an open exact batch; returns item groups (item ids batchId:group:index)",
        AddedItems,
        request=AddItems,
    ),
    _change(
        "post",
        f"{EXACT}/items/ack",
        "Acknowledge items; returns the batches this completed",
        AckedItems,
        request=AckItems,
    ),
    _change(
        "delete", f"{EXACT}/open", "Delete open batches not updated since a time", Removed, params=(SINCE,)
    ),
    _change(
        "delete",
        f"{EXACT}/closed",
        "Delete closed batches not updated since a time",
        Removed,
        params=(SINCE,),
    ),
    _change("post", f"{EXACT}/close/{{batchId}}", "Close an exact batch", Closed, params=(EXACT_ID,)),
    Operation(
        "get",
        f"{EXACT}/{{batchId}}",
        "An exact batch",
        TAG,
        ExactBatchView,
        params=(EXACT_ID,),
        errors=READ_ERRORS,
    ),
    _change(
        "delete",
        f"{EXACT}/{{batchId}}",
        "Close an exact batch (Carlyle's DELETE)",
        Closed,
        params=(EXACT_ID,),
    ),
    _change(
        "post",
        ESTIMATED,
        "Open an estimated batch of batchSize items",
        CreatedEstimated,
        request=CreateEstimated,
    ),
    _change("post", f"{ESTIMATED}/decr", "Count down estimated batches", Decremented, request=DecrEstimated),
    Operation(
        "get",
        f"{ESTIMATED}/{{batchId}}",
        "An estimated batch",
        TAG,
        EstimatedBatchView,
        params=(ESTIMATED_ID,),
        errors=READ_ERRORS,
    ),
    _change(
        "delete",
        f"{ESTIMATED}/{{batchId}}",
        "Delete an estimated batch",
        DeletedEstimated,
        params=(ESTIMATED_ID,),
    ),
    _change(
        "post",
        f"{ESTIMATED}/{{batchId}}/incr",
        "Count up an estimated batch",
        EstimatedBatchView,
        params=(ESTIMATED_ID, query_param("by", {"type": "integer"}, description="default 1")),
    ),
    _change(
        "post",
        f"{ESTIMATED}/{{batchId}}/close",
        "Close an estimated batch",
        Closed,
        params=(ESTIMATED_ID,),
    ),
]
