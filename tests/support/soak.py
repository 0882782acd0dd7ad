"""Parameters of which only the first few run in every suite; the rest run under `-m soak`.

For crash-point loops whose points are each covered in-process elsewhere (the crash-point
suites of each component): every suite still kills a real process at some of them, and the
soak run kills it at all of them, within `make test`'s time budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

__all__ = ["first_in_every_suite"]


def first_in_every_suite(values: Sequence[Any], keep: int) -> list[Any]:
    """`values` for `pytest.mark.parametrize`, the ones after the first `keep` marked soak."""
    out: list[Any] = []
    for i, value in enumerate(values):
        if i < keep:
            out.append(value)
            continue
        args = value if isinstance(value, tuple) else (value,)
        out.append(pytest.param(*args, marks=pytest.mark.soak, id=_id(value)))
    return out


def _id(value: Any) -> str:
    if isinstance(value, tuple):
        return "-".join(str(v) for v in value)
    return str(value)
