"""A definition's validation errors as lines a user can act on: the path in the file, then what is wrong.

Paths follow the file (`writers.mirror.columns`, `reader.tables[1].name`; a writer by its name when it
has a unique one, else by its index); an unknown key comes with the closest known key, if any.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from app.pipeline.definition_models import NAME_PATTERN, STEP_MODELS, PipelineModel

__all__ = ["problems", "unknown_key"]

_WORDING = (  # pydantic's phrasing -> ours
    ("Input should be ", "must be "),
    ("a valid integer", "an integer"),
    ("a valid number", "a number"),
    ("a valid boolean", "true or false"),
    ("a valid string", "a string"),
    ("a valid list", "a list"),
    ("a valid dictionary", "a mapping"),
    ("Value error, ", ""),
)


def unknown_key(key: object, known: Sequence[str]) -> str:
    """ "unknown key 'colunms' (did you mean 'columns'?)", or the known keys when none is close."""
    close = difflib.get_close_matches(str(key), list(known), n=1)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    return f"unknown key {key!r}; known keys: {', '.join(sorted(known))}"


def problems(error: ValidationError, raw: Any) -> list[str]:
    return [_problem(detail, raw) for detail in error.errors()]


def _problem(detail: ErrorDetails, raw: Any) -> str:
    kind, loc, given = detail["type"], detail["loc"], detail.get("input")
    path, parent, node = _locate(loc, raw)
    if kind == "extra_forbidden":
        message = unknown_key(loc[-1], list(parent.model_fields) if parent else [])
    elif kind == "invalid_key":  # YAML reads an unquoted on, yes, no or 1 as a boolean or number
        path = _path_of(loc[:-1], raw)
        message = f"unknown key {given!r} (keys are text: quote it in YAML)"
    elif kind == "missing":
        path = _path_of(loc[:-1], raw)
        message = f"missing key {loc[-1]!r}"
    elif kind in {"union_tag_invalid", "union_tag_not_found"}:
        tags = sorted(t for t in (_tag(m) for m in get_args(node)) if t)
        if kind == "union_tag_not_found":
            message = f"missing key 'type' (one of {', '.join(tags)})"
        else:
            tag = (detail.get("ctx") or {}).get("tag")
            close = difflib.get_close_matches(str(tag), tags, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            message = f"unknown type {tag!r}{hint}; one of {', '.join(tags)}"
    elif kind == "step":
        message = "expected {namespace: REGEX} or {transform: 'module:function'}"
        if isinstance(given, Mapping):
            extra = [k for k in given if k not in STEP_MODELS]
            message += "".join(f"; {unknown_key(k, list(STEP_MODELS))}" for k in extra)
    elif kind in {"model_type", "model_attributes_type", "dict_type"}:
        message = f"expected a mapping, got {given!r:.60}"
        if not loc:
            message = f"a pipeline definition is a mapping with name, reader and writers, got {given!r:.60}"
    elif kind == "too_short" and (detail.get("ctx") or {}).get("min_length") == 1:
        message = "must not be empty"
    else:
        message = detail["msg"]
        for theirs, ours in _WORDING:
            message = message.replace(theirs, ours)
        message = message.replace(f"'{NAME_PATTERN}'", "of letters, digits, '_' or '-'")
        if kind != "value_error" and not isinstance(given, Mapping | list):
            message += f", got {given!r:.60}"
    return f"{path}: {message}" if path else message


def _unwrap(node: Any) -> Any:
    """Annotated[X, ...] -> X; X | None -> X (a union of several models stays)."""
    while True:
        origin = get_origin(node)
        if origin is Annotated:
            node = get_args(node)[0]
        elif origin in (Union, types.UnionType):
            members = [m for m in get_args(node) if m is not type(None)]
            if len(members) != 1:
                return node
            node = members[0]
        else:
            return node


def _tag(member: Any) -> str | None:
    """A union member's tag: its `type` literal (readers, writers) or its TAG (steps)."""
    model = _unwrap(member)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    if "type" in model.model_fields:
        literal = get_args(model.model_fields["type"].annotation)
        return str(literal[0]) if literal else None
    tag = getattr(model, "TAG", None)
    return tag if isinstance(tag, str) else None


def _locate(loc: tuple[int | str, ...], raw: Any) -> tuple[str, type[BaseModel] | None, Any]:
    """The path of `loc` in the file, the model holding its last key, and the type found there."""
    node: Any = PipelineModel
    value, path, parent = raw, "", None
    for part in loc:
        node = _unwrap(node)
        model = node if isinstance(node, type) and issubclass(node, BaseModel) else None
        parent = model
        if get_origin(node) in (Union, types.UnionType):
            member = next((m for m in get_args(node) if _tag(m) == part), None)
            if member is not None:  # the tag pydantic puts in the path: no key of the file
                node = member
                continue
        if isinstance(part, int):
            items = value if isinstance(value, Sequence) and not isinstance(value, str) else []
            item = items[part] if part < len(items) else None
            path += _index(path, part, item, items)
            node = get_args(node)[0] if get_origin(node) is list else None
            value = item
            continue
        path += f".{part}" if path else str(part)
        node = model.model_fields[part].annotation if model and part in model.model_fields else None
        value = value.get(part) if isinstance(value, Mapping) else None
    return path, parent, _unwrap(node)


def _index(path: str, index: int, item: Any, items: Sequence[Any]) -> str:
    """`.NAME` for a writer with a name no other writer has, else `[INDEX]`."""
    name = item.get("name") if isinstance(item, Mapping) else None
    if path == "writers" and isinstance(name, str) and re.fullmatch(NAME_PATTERN, name):
        names = [w.get("name") for w in items if isinstance(w, Mapping)]
        if names.count(name) == 1:
            return f".{name}"
    return f"[{index}]"


def _path_of(loc: tuple[int | str, ...], raw: Any) -> str:
    return _locate(loc, raw)[0]
