"""Every interleaving of concurrent saves to one recipient's hub ledger, up to a bound, checked with
the pure rules the repository runs (app/hub/model.py, app/hub/saving.py) in the order it runs them
(app/hub/save.py `_save_recipient`):

  lookup the event-id index -> plan + claim sequence numbers (ledger compare-and-swap) -> write
  the index (create, or take a voided save's entry over under If-Match; any refusal abandons the
  claim and starts again) -> write the event documents one by one -> release the claim (a save
  whose claim was voided meanwhile fails, and its caller delivers it again).

Around them: a writer may crash at any step (its claim stays until its lease expires) and its
caller delivers the same events again; any claim's lease may expire (the oldest first, as time
does), by a reader's reap or the next save's.

Checked in every reachable state, with a reader reading after every step (the strongest reader):
what is visible (written, at or below the fence, not void) never changes below a fence read
before, and no event id is visible twice. Where nothing is left to do: every event is visible
exactly once and no claim is left.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from app.dataavailable import DataAvailable
from app.hub.errors import SaveInProgress
from app.hub.model import Claim, Ledger, abandon, allocate, content_hash, release
from app.hub.saving import IndexEntry, plan_save
from tests.unit.modelcheck.bfs import explore

RECIPIENT = "5790000000005"
LEASE_S = 1_000.0  # leases expire only through the model's explicit expiry step


def event(name: str) -> DataAvailable:
    return DataAvailable(str(uuid.uuid5(uuid.NAMESPACE_OID, name)), RECIPIENT, "charges", "t", 1)


@dataclass(frozen=True)
class Phase:
    step: str  # lookup | claim | index | write | release | abandon | done
    token: str = ""
    snapshot: tuple[tuple[str, IndexEntry], ...] = ()
    to_place: tuple[str, ...] = ()  # event ids this attempt places
    docs: tuple[tuple[int, str], ...] = ()  # (seq, id) still to write, in order
    attempt: int = 0


@dataclass(frozen=True)
class World:
    next_seq: int
    claims: tuple[Claim, ...]
    voids: tuple[tuple[int, int, float], ...]
    index: tuple[tuple[str, IndexEntry], ...]
    written: frozenset[tuple[int, str]]
    writers: tuple[Phase, ...]
    dead: frozenset[str]  # tokens of crashed attempts
    crashes: int
    slow_expiries: int  # expiries of a live writer's claim
    clock: int
    seen_fence: int
    seen: frozenset[tuple[int, str]]

    def ledger(self) -> Ledger:
        return Ledger(RECIPIENT, self.next_seq, self.claims, self.voids)

    def with_ledger(self, ledger: Ledger) -> World:
        return replace(self, next_seq=ledger.next_seq, claims=ledger.claims, voids=ledger.voids)

    def visible(self) -> frozenset[tuple[int, str]]:
        ledger = self.ledger()
        fence = ledger.fence
        return frozenset((s, i) for s, i in self.written if s <= fence and not ledger.is_void(s))


@dataclass(frozen=True)
class Bound:
    saves: tuple[tuple[str, ...], ...]  # each writer's events, in order
    crashes: int
    slow_expiries: int

    def __str__(self) -> str:
        shown = " ".join("[" + ",".join(s) + "]" for s in self.saves)
        expiries = f"{self.slow_expiries} lease expiry(ies) of live saves"
        return f"saves {shown}, up to {self.crashes} crash(es), {expiries}"


class Recipient:
    def __init__(self, bound: Bound) -> None:
        self.bound = bound
        self.events = {name: event(name) for save in bound.saves for name in save}
        self.names = {e.id: name for name, e in self.events.items()}

    def roots(self) -> list[World]:
        writers = tuple(Phase("lookup") for _ in self.bound.saves)
        return [World(1, (), (), (), frozenset(), writers, frozenset(), 0, 0, 0, 0, frozenset())]

    def successors(self, w: World) -> Iterator[tuple[str, World]]:
        for n, phase in enumerate(w.writers):
            yield from self._step(w, n, phase)
            if (
                phase.step in ("claim", "index", "write", "release", "abandon")
                and w.crashes < self.bound.crashes
            ):
                dead = w.dead | {phase.token} if phase.token else w.dead
                again = Phase("lookup", attempt=phase.attempt + 1)
                yield f"w{n}:crash", self._observe(self._set(w, n, again), dead=dead, crashes=w.crashes + 1)
        if w.claims:
            oldest = min(w.claims, key=lambda c: c.lease_until_s)
            live = oldest.token not in w.dead
            if not live or w.slow_expiries < self.bound.slow_expiries:
                reaped = w.ledger().reap(oldest.lease_until_s + 0.5)
                after = w.with_ledger(reaped)
                yield f"expire:{oldest.token}", self._observe(after, slow=w.slow_expiries + live)

    def _step(self, w: World, n: int, phase: Phase) -> Iterator[tuple[str, World]]:
        label = f"w{n}:{phase.step}"
        ids = [self.events[name].id for name in self.bound.saves[n]]
        index = dict(w.index)
        if phase.step == "lookup":
            snapshot = tuple(sorted((i, index[i]) for i in set(ids) if i in index))
            yield label, self._observe(self._set(w, n, replace(phase, step="claim", snapshot=snapshot)))
        elif phase.step == "claim":
            ledger = w.ledger()
            try:
                plan = plan_save(
                    [self.events[name] for name in self.bound.saves[n]], dict(phase.snapshot), ledger
                )
            except SaveInProgress:
                return  # the caller tries again later: nothing to do until the ledger changes
            if not plan.to_place:
                yield label + ":duplicates", self._observe(self._set(w, n, Phase("done")))
                return
            token = f"w{n}a{phase.attempt}"
            updated, allocation = allocate(
                ledger,
                plan.to_place,
                token=token,
                capacity=100,
                now_s=float(w.clock),
                lease_s=LEASE_S,
                new_drawer_id=lambda: "drawer",
            )
            docs = tuple((s.seq, s.event.id) for p in allocation.placements for s in p.events)
            to_place = tuple(e.id for e in plan.to_place)
            after = replace(w.with_ledger(updated), clock=w.clock + 1)
            yield (
                label,
                self._observe(
                    self._set(
                        after, n, replace(phase, step="index", token=token, to_place=to_place, docs=docs)
                    )
                ),
            )
        elif phase.step == "index":
            known = dict(phase.snapshot)
            seqs = dict((i, s) for s, i in phase.docs)
            refused = False
            for event_id in phase.to_place:
                expected = known.get(event_id)
                if index.get(event_id) != expected:  # create found one, or If-Match failed
                    refused = True
                    continue
                digest = content_hash(self.events[self.names[event_id]])
                index[event_id] = IndexEntry(digest, seqs[event_id], phase.token)
            after = replace(w, index=tuple(sorted(index.items())))
            following = replace(phase, step="abandon" if refused else "write")
            yield label + (":refused" if refused else ""), self._observe(self._set(after, n, following))
        elif phase.step == "write":
            first, rest = phase.docs[0], phase.docs[1:]
            after = replace(w, written=w.written | {first})
            yield (
                label,
                self._observe(
                    self._set(after, n, replace(phase, step="write" if rest else "release", docs=rest))
                ),
            )
        elif phase.step == "release":
            released = release(w.ledger(), phase.token)
            if released is None:  # SaveLeaseLost: the caller delivers the events again
                again = Phase("lookup", attempt=phase.attempt + 1)
                yield label + ":lost", self._observe(self._set(w, n, again))
            else:
                yield label, self._observe(self._set(w.with_ledger(released), n, Phase("done")))
        elif phase.step == "abandon":
            abandoned = abandon(w.ledger(), phase.token, now_s=0.0)
            after = w if abandoned is None else w.with_ledger(abandoned)
            yield label, self._observe(self._set(after, n, Phase("lookup", attempt=phase.attempt + 1)))

    @staticmethod
    def _set(w: World, n: int, phase: Phase) -> World:
        return replace(w, writers=(*w.writers[:n], phase, *w.writers[n + 1 :]))

    def _observe(
        self,
        w: World,
        *,
        dead: frozenset[str] | None = None,
        crashes: int | None = None,
        slow: int | None = None,
    ) -> World:
        """The reader reads after the step; its checks run in `invariant`, here it remembers."""
        fence = w.ledger().fence
        visible = w.visible()
        below = {(s, i) for s, i in visible if s <= w.seen_fence}
        gone_or_new = below ^ w.seen
        if gone_or_new:
            raise AssertionError(
                f"below the fence {w.seen_fence} read before, visible changed: {sorted(gone_or_new)}"
            )
        return replace(
            w,
            dead=w.dead if dead is None else dead,
            crashes=w.crashes if crashes is None else crashes,
            slow_expiries=w.slow_expiries if slow is None else slow,
            seen_fence=max(w.seen_fence, fence),
            seen=frozenset(x for x in visible if x[0] <= max(w.seen_fence, fence)),
        )

    def invariant(self, w: World) -> None:
        ids = [i for _, i in w.visible()]
        twice = {self.names[i] for i in ids if ids.count(i) > 1}
        assert not twice, f"visible twice: {sorted(twice)}"

    def at_end(self, w: World) -> None:
        pending = [n for n, p in enumerate(w.writers) if p.step != "done"]
        assert not pending, f"writers {pending} can never finish: {w.writers}"
        assert not w.claims, f"claims left: {w.claims}"
        visible = sorted(self.names[i] for _, i in w.visible())
        assert visible == sorted(self.events), (
            f"visible {visible}, expected each of {sorted(self.events)} once"
        )


BOUNDS = [
    Bound((("a", "b"), ("a", "b")), crashes=1, slow_expiries=1),  # a batch and its redelivery
    Bound((("a", "b"), ("b", "c")), crashes=1, slow_expiries=1),  # overlapping batches
    Bound((("a",), ("a",)), crashes=1, slow_expiries=1),
]


@pytest.mark.parametrize("bound", BOUNDS, ids=str)
def test_every_interleaving_of_saves_shows_each_event_once_behind_a_fence(bound: Bound) -> None:
    model = Recipient(bound)
    seen = explore(model.roots(), model.successors, model.invariant, model.at_end)
    print(f"hub ledger: {bound}: {seen.states} states, {seen.terminal} final, 0 violations")
    assert seen.terminal > 0


def test_the_check_finds_a_release_that_ignores_a_voided_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker has teeth: a release that succeeds after the claim was voided (a slow writer
    finishing past its lease) leaves an event nobody can see, and the search says how."""

    def release_anyway(ledger: Ledger, token: str) -> Ledger:
        return replace(ledger, claims=tuple(c for c in ledger.claims if c.token != token))

    monkeypatch.setattr(sys.modules[__name__], "release", release_anyway)
    model = Recipient(Bound((("a",),), crashes=0, slow_expiries=1))
    with pytest.raises(AssertionError, match="expected each of"):
        explore(model.roots(), model.successors, model.invariant, model.at_end)
