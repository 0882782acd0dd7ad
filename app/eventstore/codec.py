"""Codec: event dataclass <-> (case name, JSON data).

The case name is the class name (or a ``case: ClassVar[str]`` on the class). Data is the
dataclass's fields as JSON; nested dataclasses, tuples, lists, dicts, optionals and datetimes
are rebuilt from the field type hints on decode. An unknown case raises UnknownEventCase, data
that does not fit raises EventDecodeError naming the case and field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

import orjson

from app.eventstore.errors import EventDecodeError, UnknownEventCase
from app.eventstore.model import EncodedEvent

__all__ = ["Codec"]

E = TypeVar("E")
_PRIMITIVES: tuple[type, ...] = (str, int, float, bool)


def _to_json(value: Any) -> Any:
    """The value as JSON data. orjson walks dataclasses, tuples and datetimes in C (the Python
    walk below was a twentieth of a hub worker's CPU while actors drained, on every tip write);
    what it refuses (sets, other mappings, integers beyond 64 bits) takes the Python walk."""
    try:
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
    except orjson.JSONEncodeError:
        return _walk(value)


def _walk(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _walk(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list | frozenset | set):
        return [_walk(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _walk(v) for k, v in value.items()}
    return value


def _fail(path: str, expected: str, value: Any) -> EventDecodeError:
    return EventDecodeError(f"{path}: expected {expected}, got {type(value).__name__} {value!r:.80}")


def _from_json(tp: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _from_json(arg, value, path)
            except EventDecodeError as exc:
                errors.append(str(exc))
        raise EventDecodeError("; ".join(errors) or f"{path}: null not allowed")
    if origin is typing.Literal:
        if value not in args:
            raise _fail(path, f"one of {args}", value)
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise _fail(path, f"object for {tp.__name__}", value)
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            if f.name in value:
                kwargs[f.name] = _from_json(hints[f.name], value[f.name], f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise EventDecodeError(f"{path}: missing field {f.name!r}")
        return tp(**kwargs)
    if origin in (tuple, list, set, frozenset):
        if not isinstance(value, list):
            raise _fail(path, "array", value)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise _fail(path, f"array of {len(args)}", value)
            return tuple(
                _from_json(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        item = args[0] if args else Any
        return origin(_from_json(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise _fail(path, "object", value)
        item = args[1] if len(args) == 2 else Any
        return {str(k): _from_json(item, v, f"{path}.{k}") for k, v in value.items()}
    if tp is datetime:
        if not isinstance(value, str):
            raise _fail(path, "ISO-8601 datetime string", value)
        try:
            return datetime.fromisoformat(value)
        except ValueError as exc:
            raise _fail(path, "ISO-8601 datetime string", value) from exc
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in _PRIMITIVES:
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise _fail(path, tp.__name__, value)
        return value
    if tp is type(None):
        if value is not None:
            raise _fail(path, "null", value)
        return None
    raise EventDecodeError(f"{path}: unsupported field type {tp!r}")


class Codec(Generic[E]):
    """Maps a closed set of event dataclasses to case names and JSON data, and back.

    With ``skip_unknown`` (Equinox's tryDecode answering None), a load folds past events of a case
    this codec does not know (written by a newer version, say), counting them in ``skipped``;
    without it, such an event fails the load with UnknownEventCase."""

    def __init__(self, *event_types: type[Any], skip_unknown: bool = False) -> None:
        self.skip_unknown = skip_unknown
        self.skipped = 0  # events of unknown cases folded past (skip_unknown)
        self._by_case: dict[str, type[Any]] = {}
        self._by_type: dict[type[Any], str] = {}
        for cls in event_types:
            if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
                raise TypeError(f"{cls!r} is not a dataclass type")
            case = getattr(cls, "case", None) or cls.__name__
            if case in self._by_case:
                raise TypeError(f"case {case!r} is registered twice")
            self._by_case[case] = cls
            self._by_type[cls] = case

    @property
    def cases(self) -> tuple[str, ...]:
        return tuple(self._by_case)

    def knows(self, case: str) -> bool:
        return case in self._by_case

    def encode(self, event: E, meta: Mapping[str, Any] | None = None) -> EncodedEvent:
        case = self._by_type.get(type(event))
        if case is None:
            raise UnknownEventCase(f"{type(event).__name__} is not an event type of this codec {self.cases}")
        return EncodedEvent(case=case, data=_to_json(event), meta=meta)

    def decode_all(self, events: Iterable[EncodedEvent]) -> Iterator[E]:
        """The events decoded, in order; with ``skip_unknown`` less those of unknown cases."""
        for event in events:
            if self.skip_unknown and event.case not in self._by_case:
                self.skipped += 1
                continue
            yield self.decode(event)

    def decode(self, event: EncodedEvent) -> E:
        cls = self._by_case.get(event.case)
        if cls is None:
            raise UnknownEventCase(f"unknown event case {event.case!r}; this codec knows {self.cases}")
        decoded: E = _from_json(cls, event.data, event.case)
        return decoded
