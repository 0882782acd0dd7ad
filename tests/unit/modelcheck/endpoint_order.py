"""The order rule on what an endpoint saw of one group, for the models: a delivery of main position
m is allowed if m is higher than every position delivered before, or if it restarts a run: m was
delivered before, and the deliveries that follow repeat, in order, every position delivered
before above m (a restart may itself be restarted from such a position). A new position while a
restart has not caught up, or a run not repeated by the end, is stale (`... 41, 42, 43, 16`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["Seen"]


@dataclass(frozen=True)
class Seen:
    """What the endpoint took of one group, as far as the order rule needs it: the positions
    delivered and what a restarted run has still to repeat (`expect`), or the first violation."""

    delivered: frozenset[int] = frozenset()
    expect: tuple[int, ...] = ()
    last: int | None = None
    broken: str | None = None

    def took(self, m: int) -> Seen:
        if self.broken is not None:
            return replace(self, delivered=self.delivered | {m}, last=m)
        top = max(self.delivered, default=-1)
        expect = self.expect
        if expect and m == expect[0]:
            expect = expect[1:]
        elif m > top:
            if expect:
                why = f"{m} delivered while a restarted run had yet to repeat {list(expect)}"
                return replace(self, delivered=self.delivered | {m}, last=m, broken=why)
        elif m in self.delivered:
            expect = tuple(sorted(p for p in self.delivered if p > m))
        else:
            return replace(self, delivered=self.delivered | {m}, last=m, broken=f"{m} first after {top}")
        return Seen(self.delivered | {m}, expect, m)

    def at_end(self) -> str | None:
        if self.broken is None and self.expect:
            return f"ended on the stale {self.last}: the restarted run never repeated {list(self.expect)}"
        return self.broken
