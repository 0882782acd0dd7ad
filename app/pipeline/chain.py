"""Namespace filters and transform functions: the per-writer chain of the Transporter design."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from app.pipeline.errors import TransformFailed
from app.pipeline.model import Message

__all__ = ["Branch", "NamespaceFilter", "Step", "Transform", "TransformStep"]

# A transform returns the (possibly changed) message, or None to drop it.
Transform = Callable[[Message], Message | None]


@dataclass(frozen=True, slots=True)
class NamespaceFilter:
    """Passes messages whose namespace the regex matches (searched, like Go's MatchString)."""

    pattern: str = ".*"
    _search: Callable[[str], object] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        compiled = re.compile(self.pattern)
        # The catch-all filter (the default) passes everything without running the regex.
        object.__setattr__(self, "_search", None if self.pattern in {".*", ""} else compiled.search)

    @property
    def passes_all(self) -> bool:
        return self._search is None

    @property
    def name(self) -> str:
        return f"namespace:{self.pattern}"

    def __call__(self, message: Message) -> Message | None:
        if self._search is None or self._search(message.namespace):
            return message
        return None


@dataclass(frozen=True, slots=True)
class TransformStep:
    name: str
    function: Transform

    def __call__(self, message: Message) -> Message | None:
        result = self.function(message)
        if result is not None and not isinstance(result, Message):
            raise TypeError(f"transform {self.name} returned {type(result).__name__}, not Message or None")
        return result


Step = NamespaceFilter | TransformStep


@dataclass(frozen=True, slots=True)
class Branch:
    """One fan-out branch: ordered steps, then the writer named `writer`."""

    writer: str
    steps: tuple[Step, ...] = (NamespaceFilter(),)
    # Only catch-all filters and no transforms: every message reaches the writer unchanged.
    passes_all: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        passes_all = all(isinstance(s, NamespaceFilter) and s.passes_all for s in self.steps)
        object.__setattr__(self, "passes_all", passes_all)

    @property
    def transforms(self) -> bool:
        """Whether a transform step runs (it may change the message it is given)."""
        return any(isinstance(step, TransformStep) for step in self.steps)

    def apply(self, message: Message) -> Message | None:
        """The message the writer receives, or None when a step filtered or dropped it (counts as acked)."""
        current: Message | None = message
        for step in self.steps:
            if current is None:
                return None
            current = step(current)
        return current

    def apply_naming_step(self, message: Message) -> Message | None:
        """As `apply`, but a step that raises becomes TransformFailed naming the step."""
        current: Message | None = message
        for step in self.steps:
            if current is None:
                return None
            try:
                current = step(current)
            except Exception as exc:
                raise TransformFailed(step.name, exc) from exc
        return current
