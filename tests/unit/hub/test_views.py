"""CabinetBoard: which cabinet the next peek reads, and what a dequeue leaves of the board."""

from __future__ import annotations

from app.dataavailable import DataAvailable
from app.hub.model import CabinetKey, CatalogEntry, DrawerState, StoredEvent
from app.hub.views import CabinetBoard

TS = CabinetKey("actor", "timeseries", "a")
AG = CabinetKey("actor", "aggregations", "b")


def drawer(cabinet: CabinetKey, name: str, unacked_from: int | None, ack_seq: int = 0) -> DrawerState:
    return DrawerState(name, cabinet, 0, last_seq=99, ack_seq=ack_seq, unacked_from=unacked_from, used=9)


def board() -> CabinetBoard:
    entries = [CatalogEntry(TS, "d1", 4), CatalogEntry(TS, "d0", 1), CatalogEntry(AG, "d2", 2)]
    return CabinetBoard.from_catalog(("timeseries", "aggregations"), 10, entries)


def test_the_catalog_orders_cabinets_by_their_oldest_entry_up_to_the_fence() -> None:
    assert board().next_cabinet(10) == TS
    assert board().next_cabinet(1) == TS
    assert board().next_cabinet(0) is None
    later = CabinetBoard.from_catalog(("timeseries",), 10, [CatalogEntry(TS, "d1", 12)])
    assert later.next_cabinet(10) is None


def test_reading_a_cabinets_drawers_replaces_its_catalog_guess() -> None:
    checked = board().checked(TS, ((drawer(TS, "d1", 5), "e1"),), 5)
    assert checked.next_cabinet(10) == AG
    assert checked.open_drawers(TS, 10) == [drawer(TS, "d1", 5)]
    assert checked.open_drawers(TS, 4) == []
    assert board().checked(TS, (), None).next_cabinet(10) == AG
    assert board().emptied(AG).next_cabinet(10) == TS


def test_a_dequeue_keeps_the_drawers_as_written_and_the_new_oldest() -> None:
    start = board().checked(TS, ((drawer(TS, "d0", 1), "e0"), (drawer(TS, "d1", 4), "e1")), 1)
    run = (StoredEvent(DataAvailable("e5", "actor", "timeseries", "a", 1024), 5, "d1"),)
    peeked = start.peeked("bundle", TS, {"d1": run, "elsewhere": run})
    assert peeked.runs == {"d1": run}  # only the drawers of the cabinet read
    assert not peeked.serves(("timeseries", "aggregations"), 1)  # not dequeued here yet
    written = {"d0": None, "d1": (drawer(TS, "d1", 7, ack_seq=6), "e1b")}
    after = peeked.dequeued(TS, written, 1)
    assert after.serves(("timeseries", "aggregations"), 1)
    assert not after.serves(("timeseries", "aggregations"), 2)  # a dequeue elsewhere
    assert not after.serves(("timeseries",), 1)  # other domains
    assert after.drawers[TS] == ((drawer(TS, "d1", 7, ack_seq=6), "e1b"),)
    assert after.oldest[TS] == 7
    assert after.next_cabinet(10) == AG
    assert after.runs == {"d1": run}
    drained = peeked.dequeued(TS, {"d0": (drawer(TS, "d0", None), "x"), "d1": None}, 1)
    assert TS not in drained.oldest
    assert peeked.peeked("next", TS, {}).runs == {}  # a read that left nothing: nothing kept
