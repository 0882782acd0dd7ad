"""The actor's bundle decider and the idempotent-save plan."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from app.dataavailable import DataAvailable
from app.errors import InvalidInput, ServiceUnavailable
from app.hub.actor import (
    ActorBundles,
    BundleDequeued,
    BundlePeeked,
    NextAfterDequeue,
    decide_dequeue,
    decide_dequeue_then_peek,
    decide_peek,
    evolve,
    open_bundle_for,
)
from app.hub.bundling import BundleRef, DrawerSlice
from app.hub.errors import BundleIdConflict, DuplicateEventConflict, SaveInProgress
from app.hub.model import CabinetKey, Claim, DrawerState, Ledger, content_hash
from app.hub.saving import IndexEntry, plan_save


def ref(domain: str = "timeseries", bundle_id: str | None = None) -> BundleRef:
    return BundleRef(
        bundle_id or str(uuid.uuid4()),
        CabinetKey("r", domain, "mt"),
        (DrawerSlice("d", 1, 2, None, DrawerState("d", CabinetKey("r", domain, "mt"), 0)),),
        2,
        2048,
    )


def test_peek_again_returns_the_open_bundle_for_its_domain() -> None:
    bundle = ref("timeseries")
    state = evolve(ActorBundles(), BundlePeeked(bundle))
    assert open_bundle_for(state, ("timeseries",), None) == bundle
    assert open_bundle_for(state, ("timeseries", "masterdata"), bundle.bundle_id) == bundle
    assert open_bundle_for(state, ("masterdata",), None) is None


def test_a_new_bundle_id_while_one_is_open_conflicts() -> None:
    state = evolve(ActorBundles(), BundlePeeked(ref("timeseries")))
    with pytest.raises(BundleIdConflict):
        open_bundle_for(state, ("timeseries",), str(uuid.uuid4()))


def test_a_dequeued_bundle_id_cannot_be_reused() -> None:
    bundle = ref()
    state = evolve(evolve(ActorBundles(), BundlePeeked(bundle)), BundleDequeued(bundle.bundle_id))
    assert state.open == ()
    with pytest.raises(BundleIdConflict):
        open_bundle_for(state, ("timeseries",), bundle.bundle_id)


def test_concurrent_peek_keeps_the_first_recorded_bundle() -> None:
    first, second = ref(), ref()
    state = evolve(ActorBundles(), BundlePeeked(first))
    chosen, events = decide_peek(second, ("timeseries",), 0)(state)
    assert chosen == first and events == []
    chosen, events = decide_peek(second, ("timeseries",), 0)(ActorBundles())
    assert chosen == second and events == [BundlePeeked(second)]


def test_a_peek_read_before_a_dequeue_is_not_recorded() -> None:
    """A slow peek read its events; meanwhile another peek's bundle was dequeued: the slow
    candidate may hold acknowledged events, so it is refused (None) and the peek reads again."""
    first, slow = ref(), ref()
    before = ActorBundles()
    after = evolve(evolve(before, BundlePeeked(first)), BundleDequeued(first.bundle_id))
    assert after.dequeues == before.dequeues + 1
    chosen, events = decide_peek(slow, ("timeseries",), before.dequeues)(after)
    assert chosen is None and events == []
    chosen, events = decide_peek(slow, ("timeseries",), after.dequeues)(after)
    assert chosen == slow and events == [BundlePeeked(slow)]


def test_dequeue_decision_only_for_open_bundles() -> None:
    bundle = ref()
    state = evolve(ActorBundles(), BundlePeeked(bundle))
    closed = BundleDequeued(bundle.bundle_id)
    assert decide_dequeue(closed)(state) == (True, [closed])
    assert decide_dequeue(BundleDequeued(str(uuid.uuid4())))(state) == (False, [])


def test_a_dequeue_that_peeks_records_both_with_one_append() -> None:
    bundle, following = ref(), ref()
    state = evolve(ActorBundles(), BundlePeeked(bundle))
    decide = decide_dequeue_then_peek(
        BundleDequeued(bundle.bundle_id), following, ("timeseries",), state.dequeues + 1
    )
    outcome, events = decide(state)
    assert outcome == NextAfterDequeue(dequeued=True, settled=True, bundle=following)
    assert events == [BundleDequeued(bundle.bundle_id), BundlePeeked(following)]
    nothing = decide_dequeue_then_peek(
        BundleDequeued(bundle.bundle_id), None, ("timeseries",), state.dequeues + 1
    )
    assert nothing(state) == (NextAfterDequeue(True, True, None), [BundleDequeued(bundle.bundle_id)])


def test_a_dequeue_that_peeks_leaves_the_peek_to_the_stream_as_it_is() -> None:
    """Whatever happened on the stream since the candidate was formed, the dequeue is recorded
    (when the bundle is still open) and the candidate only when nothing else changed."""
    bundle, following, other = ref("timeseries"), ref("timeseries"), ref("masterdata")
    opened = evolve(ActorBundles(), BundlePeeked(bundle))
    seen = opened.dequeues + 1
    closed = [BundleDequeued(bundle.bundle_id)]
    # Dequeued through another worker already: nothing to record, the peek is an ordinary one.
    gone = evolve(opened, BundleDequeued(bundle.bundle_id))
    decide = decide_dequeue_then_peek(closed[0], following, ("timeseries",), seen)
    assert decide(gone) == (NextAfterDequeue(dequeued=False), [])
    # Another dequeue counted since: the candidate may hold events acknowledged since.
    busier = evolve(evolve(opened, BundlePeeked(other)), BundleDequeued(other.bundle_id))
    assert decide(busier) == (NextAfterDequeue(dequeued=True), closed)
    # A bundle of another domain opened meanwhile is what a peek of every domain answers.
    both = evolve(opened, BundlePeeked(other))
    wide = decide_dequeue_then_peek(closed[0], following, ("timeseries", "masterdata"), seen)
    assert wide(both) == (NextAfterDequeue(True, True, other), closed)
    # ... and not what a peek of the dequeued bundle's domain answers.
    assert decide(both) == (NextAfterDequeue(True, True, following), [*closed, BundlePeeked(following)])


def ev(event_id: str | None = None, weight: int = 10) -> DataAvailable:
    return DataAvailable(event_id or str(uuid.uuid4()), "r", "timeseries", "mt", weight)


def test_plan_skips_committed_duplicates_and_in_request_repeats() -> None:
    a, b = ev(), ev()
    index = {a.id: IndexEntry(content_hash(a), 1, "t")}
    plan = plan_save([a, b, b], index, Ledger("r", next_seq=2))
    assert plan.to_place == (b,) and plan.duplicates == 2


def test_plan_rejects_same_id_other_content_naming_it() -> None:
    a = ev()
    changed = ev(a.id, weight=99)
    with pytest.raises(DuplicateEventConflict, match=a.id) as info:
        plan_save([changed], {a.id: IndexEntry(content_hash(a), 1, "t")}, Ledger("r", next_seq=2))
    assert isinstance(info.value, InvalidInput) and not info.value.retriable
    with pytest.raises(DuplicateEventConflict):
        plan_save([a, changed], {}, Ledger("r"))


def test_a_rerun_under_another_batch_item_is_a_duplicate_not_a_conflict() -> None:
    a = replace(ev(), batch_item_id="1:group:0")
    rerun = replace(a, batch_item_id="2:group:0")
    plan = plan_save([rerun], {a.id: IndexEntry(content_hash(a), 1, "t")}, Ledger("r", next_seq=2))
    assert plan.to_place == () and plan.duplicates == 1


def test_plan_waits_for_a_pending_save_and_replaces_a_voided_one() -> None:
    a = ev()
    index = {a.id: IndexEntry(content_hash(a), 3, "t")}
    pending = Ledger("r", next_seq=5, claims=(Claim("t", 3, 4, 100.0),))
    with pytest.raises(SaveInProgress) as info:
        plan_save([a], index, pending)
    assert isinstance(info.value, ServiceUnavailable) and info.value.retriable
    voided = pending.reap(now_s=200.0)
    plan = plan_save([a], index, voided)
    assert plan.to_place == (a,)
    # once placed again, the entry (taken over under If-Match) points at the new sequence number
    again = {a.id: IndexEntry(content_hash(a), 9, "u")}
    assert plan_save([a], again, Ledger("r", next_seq=10, voids=((3, 4, 0.0),))).duplicates == 1
