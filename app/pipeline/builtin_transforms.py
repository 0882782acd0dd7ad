"""Built-in transforms the Transporter design's users know: pick, omit, rename and skip, as chain
steps beside Python callables. Pure: each works on a message's `data` (the row an update or delete
had before is left as it is) and returns a new message.

- `pick: [a, b]` keeps only those fields;
- `omit: [a, b]` drops those fields;
- `rename: {old: new}` renames fields (a field missing is no error; a new name that exists is
  overwritten, as in Transporter);
- `skip: {field: f, operator: op, match: v}` passes a message only when `data[f] op v` holds
  (Transporter's rule: true sends the message on, false skips it). A message without the field,
  or whose value cannot be compared with `match`, is skipped.
"""

from __future__ import annotations

import operator as op
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from app.pipeline.chain import TransformStep
from app.pipeline.model import Message

__all__ = ["SKIP_OPERATORS", "SkipOperator", "omit", "pick", "rename", "skip"]

SkipOperator = Literal[
    "==",
    "eq",
    "$eq",
    "!=",
    "ne",
    "$ne",
    ">",
    "gt",
    "$gt",
    ">=",
    "gte",
    "$gte",
    "<",
    "lt",
    "$lt",
    "<=",
    "lte",
    "$lte",
]

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {}
for _names, _function in (
    (("==", "eq", "$eq"), op.eq),
    (("!=", "ne", "$ne"), op.ne),
    ((">", "gt", "$gt"), op.gt),
    ((">=", "gte", "$gte"), op.ge),
    (("<", "lt", "$lt"), op.lt),
    (("<=", "lte", "$lte"), op.le),
):
    for _name in _names:
        _COMPARE[_name] = _function
SKIP_OPERATORS = tuple(_COMPARE)


def pick(fields: Sequence[str]) -> TransformStep:
    keep = tuple(dict.fromkeys(fields))

    def picked(message: Message) -> Message:
        data = message.data
        return message.with_data({f: data[f] for f in keep if f in data})

    return TransformStep(f"pick:{','.join(keep)}", picked)


def omit(fields: Sequence[str]) -> TransformStep:
    drop = frozenset(fields)

    def omitted(message: Message) -> Message:
        return message.with_data({k: v for k, v in message.data.items() if k not in drop})

    return TransformStep(f"omit:{','.join(sorted(drop))}", omitted)


def rename(field_map: Mapping[str, str]) -> TransformStep:
    mapping = dict(field_map)

    def renamed(message: Message) -> Message:
        data = {k: v for k, v in message.data.items() if k not in mapping}
        for old, new in mapping.items():
            if old in message.data:
                data[new] = message.data[old]
        return message.with_data(data)

    return TransformStep(f"rename:{','.join(f'{k}>{v}' for k, v in mapping.items())}", renamed)


def skip(field: str, operator: str, match: Any) -> TransformStep:
    compare = _COMPARE[operator]  # the definition's model allows only SKIP_OPERATORS

    def skipped(message: Message) -> Message | None:
        if field not in message.data:
            return None
        try:
            holds = bool(compare(message.data[field], match))
        except TypeError:  # e.g. a string against a number: not comparable, so it does not hold
            return None
        return message if holds else None

    return TransformStep(f"skip:{field}{operator}{match!r}", skipped)
