"""The schema of a pipeline definition: one pydantic model per reader (app.pipeline.reader_models),
writer and step kind, on the value types of app.pipeline.definition_types.

Every model refuses keys it does not know (`extra="forbid"`) and checks each value's type; the
defaults are the ones the readers and writers apply (`app/pipeline/readers.py`, `binlog.py`,
`changefeed.py`, `writers.py`, `mysql_sink.py`). Numbers and flags must be YAML numbers and
booleans (`"5"` and `"yes"` are refused); a name given as a number (`table: 2024`) is taken as text.
A single string where a list of columns or tables is expected is one column or table.

A transform reference is checked as text here; when the validation context holds `load_transform`
(a callable taking the reference), each reference is loaded through it and replaced by its result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from app.pipeline.builtin_transforms import SkipOperator
from app.pipeline.definition_types import (
    NAME_PATTERN,
    Columns,
    Model,
    Name,
    Regex,
    Seconds,
    TransformRef,
    callable_steps,
    one_or_list,
    top_level_path,
)
from app.pipeline.reader_models import (
    BinlogReader,
    CompositeReader,
    CosmosReader,
    JsonlReader,
    KafkaTopicReader,
    MysqlReader,
)
from app.pipeline.tolerance import ErrorsTolerance

__all__ = [
    "CHAIN_KEYS",
    "NAME_PATTERN",
    "READER_MODELS",
    "STEP_MODELS",
    "WRITER_MODELS",
    "NamespaceStepModel",
    "OmitStepModel",
    "PickStepModel",
    "PipelineModel",
    "RenameStepModel",
    "SkipStepModel",
    "StepModel",
    "TransformStepModel",
    "definition_schema",
]

# -- steps ---------------------------------------------------------------------------------------


class NamespaceStepModel(Model):
    """Passes the messages whose namespace the regex matches (searched)."""

    TAG: ClassVar[str] = "namespace"
    namespace: Regex


class TransformStepModel(Model):
    """A function Message -> Message | None (None drops the message)."""

    TAG: ClassVar[str] = "transform"
    transform: TransformRef


FieldName = Annotated[str, Field(min_length=1)]
Fields = Annotated[list[FieldName], Field(min_length=1)]


class PickStepModel(Model):
    """Keeps only these fields of each message's data."""

    TAG: ClassVar[str] = "pick"
    pick: Annotated[Fields, BeforeValidator(one_or_list, json_schema_input_type=str | list[str])]


class OmitStepModel(Model):
    """Drops these fields of each message's data."""

    TAG: ClassVar[str] = "omit"
    omit: Annotated[Fields, BeforeValidator(one_or_list, json_schema_input_type=str | list[str])]


class RenameStepModel(Model):
    """Renames fields of each message's data: {old: new}."""

    TAG: ClassVar[str] = "rename"
    rename: Annotated[dict[FieldName, FieldName], Field(min_length=1)]


class SkipRule(Model):
    field: FieldName
    operator: SkipOperator
    match: Any


class SkipStepModel(Model):
    """Passes a message only when `data[field] operator match` holds (Transporter's skip)."""

    TAG: ClassVar[str] = "skip"
    skip: SkipRule


def _step_tag(value: Any) -> str | None:
    if isinstance(value, Mapping):
        tags = [tag for tag in STEP_MODELS if tag in value]
        return tags[0] if len(tags) == 1 else None
    return next((m.TAG for m in STEP_MODELS.values() if isinstance(value, m)), None)


Step = Annotated[
    Annotated[NamespaceStepModel, Tag("namespace")]
    | Annotated[TransformStepModel, Tag("transform")]
    | Annotated[PickStepModel, Tag("pick")]
    | Annotated[OmitStepModel, Tag("omit")]
    | Annotated[RenameStepModel, Tag("rename")]
    | Annotated[SkipStepModel, Tag("skip")],
    Discriminator(
        _step_tag,
        custom_error_type="step",
        custom_error_message=(
            "expected {namespace: REGEX}, {transform: 'module:function'}, {pick: [FIELD]},"
            " {omit: [FIELD]}, {rename: {OLD: NEW}} or {skip: {field, operator, match}}"
        ),
    ),
]

# -- writers -------------------------------------------------------------------------------------


class WriteRetryModel(Model):
    """A failed write tried again record by record before errors_tolerance decides."""

    attempts: int = Field(3, strict=True, ge=1, le=100, description="tries of each record's write")
    min_backoff_s: Seconds = Field(0.5, description="wait after the first failed try, doubling")
    max_backoff_s: Seconds = Field(30.0, description="the longest wait between tries")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min_backoff_s > self.max_backoff_s:
            raise ValueError("min_backoff_s must not be above max_backoff_s")
        return self


class _Writer(Model):
    name: Name
    steps: Annotated[list[Step], BeforeValidator(callable_steps)] | None = Field(
        None, description="the ordered chain; or the shorthand namespace + transforms"
    )
    namespace: Regex | None = Field(None, description="shorthand: one filter first (default .*)")
    transforms: list[TransformRef] | None = Field(None, description="shorthand: after the filter")
    errors_tolerance: ErrorsTolerance = ErrorsTolerance.NONE
    retry: WriteRetryModel | None = None

    @model_validator(mode="after")
    def _one_chain(self) -> Self:
        if self.steps is not None and (self.namespace is not None or self.transforms is not None):
            raise ValueError("give steps, or the shorthand namespace and transforms, not both")
        return self


class MysqlWriter(_Writer):
    """Bulk upserts into a MySQL table; deletes by the key columns."""

    type: Literal["mysql"]
    table: str
    database: str | None = Field(None, description="default: MYSQL_URL's database")
    columns: Columns | None = Field(None, description="default: each message's data")
    key: Annotated[Columns, Field(min_length=1)] = ["id"]


class CosmosWriter(_Writer):
    """Idempotent upserts by id into a Cosmos DB container."""

    type: Literal["cosmos"]
    container: str
    database: str | None = Field(None, description="default: COSMOS_DATABASE")
    partition_key: Annotated[
        str, AfterValidator(top_level_path), Field(json_schema_extra={"pattern": "^/[^/]+$"})
    ] = "/id"
    id_field: str = "id"
    concurrency: int = Field(32, strict=True, ge=1)


class KafkaWriter(_Writer):
    """Each message's data as JSON to a Kafka topic (a delete is a tombstone)."""

    type: Literal["kafka"]
    topic: str
    key_field: str | None = Field(None, description="default: the namespace is the record key")
    partitions: int = Field(1, strict=True, ge=1)


class JsonlWriter(_Writer):
    """One JSON line per message, fsynced per batch."""

    type: Literal["jsonl"]
    path: str


READER_MODELS: dict[str, type[Model]] = {
    "binlog": BinlogReader,
    "composite": CompositeReader,
    "cosmos": CosmosReader,
    "jsonl": JsonlReader,
    "kafka": KafkaTopicReader,
    "mysql": MysqlReader,
}
WRITER_MODELS: dict[str, type[_Writer]] = {
    "cosmos": CosmosWriter,
    "jsonl": JsonlWriter,
    "kafka": KafkaWriter,
    "mysql": MysqlWriter,
}
StepModel = (
    NamespaceStepModel | TransformStepModel | PickStepModel | OmitStepModel | RenameStepModel | SkipStepModel
)
STEP_MODELS: dict[str, type[StepModel]] = {
    "namespace": NamespaceStepModel,
    "transform": TransformStepModel,
    "pick": PickStepModel,
    "omit": OmitStepModel,
    "rename": RenameStepModel,
    "skip": SkipStepModel,
}
CHAIN_KEYS = frozenset({"name", "steps", "namespace", "transforms", "errors_tolerance", "retry"})

Reader = Annotated[
    CompositeReader | KafkaTopicReader | MysqlReader | BinlogReader | CosmosReader | JsonlReader,
    Field(discriminator="type"),
]
Writer = Annotated[MysqlWriter | CosmosWriter | KafkaWriter | JsonlWriter, Field(discriminator="type")]


class PipelineModel(Model):
    """A pipeline (the Transporter design): one reader, a commit log, writers each behind its chain."""

    model_config = ConfigDict(title="hubstream pipeline definition")

    name: Name
    reader: Reader
    writers: list[Writer] = Field(min_length=1)
    batch_size: int = Field(1000, strict=True, ge=1, description="max messages per bulk write")
    batch_wait_s: Seconds = Field(0.2, description="how long a writer waits to fill a batch")
    flush_interval_s: Seconds | None = Field(
        None, description="offset flush; default OFFSET_FLUSH_INTERVAL_S"
    )
    shutdown_timeout_s: Seconds = Field(30.0, description="clean shutdown: writers get this long to commit")
    restart_after_s: Seconds = Field(0.0, description=">0: a stopped writer is restarted automatically")


def definition_schema() -> str:
    """The JSON schema of a definition, as text (what docs/pipeline.schema.json holds)."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **PipelineModel.model_json_schema()}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
