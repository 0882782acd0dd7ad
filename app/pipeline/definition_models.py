"""The schema of a pipeline definition: one pydantic model per reader, writer and step kind.

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
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from app.pipeline.builtin_transforms import SkipOperator
from app.pipeline.tolerance import ErrorsTolerance

__all__ = [
    "CHAIN_KEYS",
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

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$"
_NAME = re.compile(NAME_PATTERN)


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"must be 1-100 letters, digits, '_' or '-' (a letter or digit first), got {value!r:.60}"
        )
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"bad regex {value!r}: {exc}") from exc
    return value


def _partition_key(value: str) -> str:
    if not re.fullmatch(r"/[^/]+", value):
        raise ValueError(f"{value!r}: use a top-level path like /id")
    return value


def _one_or_list(value: Any) -> Any:
    """A single string is one column (or table), never its characters."""
    return [value] if isinstance(value, str) else value


def _tables(value: Any) -> Any:
    value = _one_or_list(value)
    if isinstance(value, list):
        return [{"name": item} if isinstance(item, str) else item for item in value]
    return value


def _transform_ref(value: Any, info: ValidationInfo) -> Any:
    if not callable(value) and not (isinstance(value, str) and ":" in value):
        raise ValueError(f"transform {value!r} must be 'module:function' or 'file.py:function'")
    context = info.context if isinstance(info.context, Mapping) else {}
    load: Callable[[Any], Any] | None = context.get("load_transform")
    return value if load is None else load(value)


def _callable_steps(value: Any) -> Any:
    """A Python definition may give a step as a bare callable: the transform it is."""
    if isinstance(value, list):
        return [{"transform": item} if callable(item) else item for item in value]
    return value


Name = Annotated[str, Field(strict=True, json_schema_extra={"pattern": NAME_PATTERN}), AfterValidator(_name)]
Regex = Annotated[str, AfterValidator(_regex)]
Seconds = Annotated[float, Field(strict=True, ge=0)]
Columns = Annotated[list[str], BeforeValidator(_one_or_list, json_schema_input_type=str | list[str])]
TransformRef = Annotated[
    Any,
    AfterValidator(_transform_ref),
    WithJsonSchema({"type": "string", "pattern": ":", "description": "module:function or file.py:function"}),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


# -- readers -------------------------------------------------------------------------------------


class CompositeReader(_Model):
    """Every storage topic of a composite topic."""

    type: Literal["composite"]
    topic: str
    namespace: str | None = Field(None, description="default: the topic")
    id_field: str = "id"
    group_field: str | None = None
    start: Literal["earliest", "latest"] = "earliest"


class KafkaTopicReader(_Model):
    """Every partition of a plain Kafka topic (not a composite one)."""

    type: Literal["kafka"]
    topic: str
    namespace: str | None = Field(None, description="default: the topic")
    id_field: str = "id"
    group_field: str | None = Field(None, description="the record key goes into this field of the data")
    start: Literal["earliest", "latest"] = "earliest"


class MysqlTable(_Model):
    name: str
    sync_column: str | None = None
    primary_key: Columns | None = Field(None, description="default: the table's primary key")


class MysqlReader(_Model):
    """Copy, then sync by a growing column, per table."""

    type: Literal["mysql"]
    tables: Annotated[
        list[MysqlTable], BeforeValidator(_tables, json_schema_input_type=str | list[str | MysqlTable])
    ]
    database: str | None = Field(None, description="default: MYSQL_URL's database")
    poll_s: Seconds = 1.0


class BinlogReader(_Model):
    """Change data capture from a MySQL/MariaDB binlog."""

    type: Literal["binlog"]
    tables: Annotated[Regex, Field(min_length=1, description="a regex over 'database.table' names")]
    url: str | None = Field(None, description="default: BINLOG_MYSQL_URL")
    snapshot: bool = Field(True, strict=True)
    server_id: int | None = Field(None, strict=True, ge=1, le=2**32 - 1, description="default: derived")


class CosmosReader(_Model):
    """A Cosmos DB container's change feed."""

    type: Literal["cosmos"]
    container: str
    database: str | None = Field(None, description="default: COSMOS_DATABASE")
    namespace: str | None = Field(None, description="default: the container")
    id_field: str = "id"
    start: Literal["beginning", "now"] = "beginning"
    poll_s: Seconds = 1.0
    deleted_field: str | None = None
    events: bool = Field(False, strict=True, description="an event store's container: one entry per event")
    category: str | None = Field(None, description="with events: only this category's streams")

    @model_validator(mode="after")
    def _category_with_events(self) -> Self:
        if self.category is not None and not self.events:
            raise ValueError("category needs events: true (an event store's container)")
        return self


class JsonlReader(_Model):
    """A JSON-lines file."""

    type: Literal["jsonl"]
    path: str
    namespace: str | None = Field(None, description="default: the file's stem")
    follow: bool = Field(False, strict=True)
    poll_s: Seconds = 1.0


# -- steps ---------------------------------------------------------------------------------------


class NamespaceStepModel(_Model):
    """Passes the messages whose namespace the regex matches (searched)."""

    TAG: ClassVar[str] = "namespace"
    namespace: Regex


class TransformStepModel(_Model):
    """A function Message -> Message | None (None drops the message)."""

    TAG: ClassVar[str] = "transform"
    transform: TransformRef


FieldName = Annotated[str, Field(min_length=1)]
Fields = Annotated[list[FieldName], Field(min_length=1)]


class PickStepModel(_Model):
    """Keeps only these fields of each message's data."""

    TAG: ClassVar[str] = "pick"
    pick: Annotated[Fields, BeforeValidator(_one_or_list, json_schema_input_type=str | list[str])]


class OmitStepModel(_Model):
    """Drops these fields of each message's data."""

    TAG: ClassVar[str] = "omit"
    omit: Annotated[Fields, BeforeValidator(_one_or_list, json_schema_input_type=str | list[str])]


class RenameStepModel(_Model):
    """Renames fields of each message's data: {old: new}."""

    TAG: ClassVar[str] = "rename"
    rename: Annotated[dict[FieldName, FieldName], Field(min_length=1)]


class SkipRule(_Model):
    field: FieldName
    operator: SkipOperator
    match: Any


class SkipStepModel(_Model):
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


class _Writer(_Model):
    name: Name
    steps: Annotated[list[Step], BeforeValidator(_callable_steps)] | None = Field(
        None, description="the ordered chain; or the shorthand namespace + transforms"
    )
    namespace: Regex | None = Field(None, description="shorthand: one filter first (default .*)")
    transforms: list[TransformRef] | None = Field(None, description="shorthand: after the filter")
    errors_tolerance: ErrorsTolerance = ErrorsTolerance.NONE

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
        str, AfterValidator(_partition_key), Field(json_schema_extra={"pattern": "^/[^/]+$"})
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


READER_MODELS: dict[str, type[_Model]] = {
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
CHAIN_KEYS = frozenset({"name", "steps", "namespace", "transforms", "errors_tolerance"})

Reader = Annotated[
    CompositeReader | KafkaTopicReader | MysqlReader | BinlogReader | CosmosReader | JsonlReader,
    Field(discriminator="type"),
]
Writer = Annotated[MysqlWriter | CosmosWriter | KafkaWriter | JsonlWriter, Field(discriminator="type")]


class PipelineModel(_Model):
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
