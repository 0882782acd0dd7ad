"""The reader models of a pipeline definition (one per reader kind; app.pipeline.definition_models)."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BeforeValidator, Field, model_validator

from app.pipeline.definition_types import Columns, Model, Regex, Seconds, tables

__all__ = [
    "BinlogReader",
    "CompositeReader",
    "CosmosReader",
    "JsonlReader",
    "KafkaTopicReader",
    "MysqlReader",
    "MysqlTable",
]


class CompositeReader(Model):
    """Every storage topic of a composite topic."""

    type: Literal["composite"]
    topic: str
    namespace: str | None = Field(None, description="default: the topic")
    id_field: str = "id"
    group_field: str | None = None
    start: Literal["earliest", "latest"] = "earliest"


class KafkaTopicReader(Model):
    """Every partition of a plain Kafka topic (not a composite one)."""

    type: Literal["kafka"]
    topic: str
    namespace: str | None = Field(None, description="default: the topic")
    id_field: str = "id"
    group_field: str | None = Field(None, description="the record key goes into this field of the data")
    start: Literal["earliest", "latest"] = "earliest"


class MysqlTable(Model):
    name: str
    sync_column: str | None = None
    primary_key: Columns | None = Field(None, description="default: the table's primary key")


class MysqlReader(Model):
    """Copy, then sync by a growing column, per table."""

    type: Literal["mysql"]
    tables: Annotated[
        list[MysqlTable], BeforeValidator(tables, json_schema_input_type=str | list[str | MysqlTable])
    ]
    database: str | None = Field(None, description="default: MYSQL_URL's database")
    poll_s: Seconds = 1.0


class BinlogReader(Model):
    """Change data capture from a MySQL/MariaDB binlog."""

    type: Literal["binlog"]
    tables: Annotated[Regex, Field(min_length=1, description="a regex over 'database.table' names")]
    url: str | None = Field(None, description="default: BINLOG_MYSQL_URL")
    snapshot: bool = Field(True, strict=True)
    server_id: int | None = Field(None, strict=True, ge=1, le=2**32 - 1, description="default: derived")


class CosmosReader(Model):
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


class JsonlReader(Model):
    """A JSON-lines file."""

    type: Literal["jsonl"]
    path: str
    namespace: str | None = Field(None, description="default: the file's stem")
    follow: bool = Field(False, strict=True)
    poll_s: Seconds = 1.0
