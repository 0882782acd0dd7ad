"""The leases one process holds (`app.ordered.lease`), kept confirmed by one reader of the owner
log: `acquire` claims a lane and returns once the lease may act, `release` hands it back, and
`run` re-reads the log every quarter of the lease duration so that each lease stays confirmed
while its claim is the latest and ends at the first read that finds a later one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable

from app.errors import HubstreamError
from app.ordered.lease import LaneLost, Lease, OwnerView, takeover_at
from app.ordered.ports import OwnerLog

__all__ = ["LaneOwnership"]

log = logging.getLogger(__name__)


class LaneOwnership:
    def __init__(
        self,
        owner_log: OwnerLog,
        owner: str,
        duration_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`clock` and `sleep` are the monotonic clock and the wait (tests give their own)."""
        self.owner = owner
        self.duration_s = duration_s
        self.view = OwnerView()
        self.leases: dict[str, Lease] = {}
        self._log = owner_log
        self._clock = clock
        self._sleep = sleep
        self._reading = threading.Lock()  # one read of the log at a time, in whichever thread
        # Reads of the log in a thread of their own: a pool busy with other blocking calls must
        # not hold a confirmation back until the leases run out.
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="owner-log")

    @property
    def interval_s(self) -> float:
        return self.duration_s / 4

    def refresh(self) -> float:
        """Read what the log gained and confirm (or end) every lease by it; returns when the read
        started. Blocking: call it in a thread."""
        with self._reading:
            started = self._clock()
            for record in self._log.read_new():
                self.view.apply(record)
            for lease in list(self.leases.values()):
                lease.confirm(self.view, started)
            return started

    async def _refreshed(self) -> float:
        return await asyncio.get_running_loop().run_in_executor(self._reader, self.refresh)

    def close(self) -> None:
        self._reader.shutdown(wait=False, cancel_futures=True)

    async def acquire(self, lane: str) -> Lease:
        """Claim `lane` and wait until this process may act for it; LaneLost when a later claim
        came first. The claim stands from the moment the log confirmed it."""
        nonce = f"{self.owner}/{uuid.uuid4().hex[:12]}"
        await asyncio.to_thread(self._log.claim, lane, self.owner, nonce, self.duration_s)
        confirmed_at = self._clock()
        while True:
            started = await self._refreshed()
            if lane in self.view.claims and self.view.claims[lane].nonce == nonce:
                break
            if any(c.nonce == nonce for c in self.view.previous.values() if c is not None):
                raise LaneLost(f"lane {lane}: a later claim came right after this one")
            await self._sleep(self.interval_s / 4)  # the log has not shown the claim yet
        claim = self.view.claims[lane]
        previous = self.view.previous.get(lane)
        lease = Lease(
            lane,
            nonce,
            claim.epoch,
            self.duration_s,
            acts_from=takeover_at(previous, confirmed_at, self.duration_s),
            valid_until=started + self.duration_s,
        )
        self.leases[lane] = lease
        if lease.wait_s(self._clock()) > 0:
            assert previous is not None
            log.warning(
                "lane %s: epoch %d waits up to %.1f s for the lease of %s (epoch %d, not released)",
                lane,
                claim.epoch,
                lease.wait_s(self._clock()),
                previous.owner,
                previous.epoch,
            )
        while (wait := lease.wait_s(self._clock())) > 0:
            await self._sleep(min(wait, self.interval_s))
            await self._confirmed(lease)
        if not lease.may_act(self._clock()):
            # the wait ended past the last read that confirmed the claim (this process ran late):
            # one more read confirms it, or finds the later claim that ended it
            await self._confirmed(lease)
        return lease

    async def _confirmed(self, lease: Lease) -> None:
        await self._refreshed()
        if lease.lost:
            self.leases.pop(lease.lane, None)
            raise LaneLost(f"lane {lease.lane}: a later claim took it over during the takeover wait")

    async def release(self, lease: Lease) -> None:
        """Hand the lane back: the next owner need not wait. Nothing is written for a lease that
        was lost (its claim is no longer the latest)."""
        if self.leases.get(lease.lane) is lease:
            del self.leases[lease.lane]
        if lease.lost or self._clock() >= lease.valid_until:
            return
        await asyncio.to_thread(self._log.release, lease.lane, lease.epoch)

    def held(self, lanes: Callable[[str], bool]) -> list[str]:
        """The lanes (of those `lanes` accepts) whose latest claim is not released, as of the last
        `refresh`: an owner may still act for them, or was killed holding them."""
        return sorted(lane for lane, claim in self.view.claims.items() if lanes(lane) and not claim.released)

    async def fence(self, lanes: list[str]) -> None:
        """Make sure no earlier owner of `lanes` acts again: claim each here, wait out the claims
        it replaced (`takeover_at`), then release. An owner killed holding a lane is fenced as
        surely as one paused or still running: neither can act once its lease has run out."""
        leases = await asyncio.gather(*(self.acquire(lane) for lane in lanes))
        for lease in leases:
            await self.release(lease)

    async def run(self) -> None:
        """Keep the leases confirmed; a failed read leaves them to run out (their owners stop)."""
        while True:
            try:
                await self._refreshed()
            except HubstreamError as exc:
                log.warning("owner log not read (leases run out unless a read succeeds): %s", exc)
            await self._sleep(self.interval_s)
