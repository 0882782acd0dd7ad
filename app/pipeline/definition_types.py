"""The value types and base model of a pipeline definition's schema (app.pipeline.definition_models):
names, regexes, seconds, column lists and transform references, each checked as it is read."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
)

__all__ = [
    "NAME_PATTERN",
    "Columns",
    "Model",
    "Name",
    "Regex",
    "Seconds",
    "TransformRef",
    "callable_steps",
    "one_or_list",
    "tables",
    "top_level_path",
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


def top_level_path(value: str) -> str:
    if not re.fullmatch(r"/[^/]+", value):
        raise ValueError(f"{value!r}: use a top-level path like /id")
    return value


def one_or_list(value: Any) -> Any:
    """A single string is one column (or table), never its characters."""
    return [value] if isinstance(value, str) else value


def tables(value: Any) -> Any:
    value = one_or_list(value)
    if isinstance(value, list):
        return [{"name": item} if isinstance(item, str) else item for item in value]
    return value


def _transform_ref(value: Any, info: ValidationInfo) -> Any:
    if not callable(value) and not (isinstance(value, str) and ":" in value):
        raise ValueError(f"transform {value!r} must be 'module:function' or 'file.py:function'")
    context = info.context if isinstance(info.context, Mapping) else {}
    load: Callable[[Any], Any] | None = context.get("load_transform")
    return value if load is None else load(value)


def callable_steps(value: Any) -> Any:
    """A Python definition may give a step as a bare callable: the transform it is."""
    if isinstance(value, list):
        return [{"transform": item} if callable(item) else item for item in value]
    return value


Name = Annotated[str, Field(strict=True, json_schema_extra={"pattern": NAME_PATTERN}), AfterValidator(_name)]
Regex = Annotated[str, AfterValidator(_regex)]
Seconds = Annotated[float, Field(strict=True, ge=0)]
Columns = Annotated[list[str], BeforeValidator(one_or_list, json_schema_input_type=str | list[str])]
TransformRef = Annotated[
    Any,
    AfterValidator(_transform_ref),
    WithJsonSchema({"type": "string", "pattern": ":", "description": "module:function or file.py:function"}),
]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)
