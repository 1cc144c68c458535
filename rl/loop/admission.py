"""Admission control that bounds staleness without throwing finished work away (AReaL's rule).

A new group may start only while
``accepted + in_flight < (max_staleness + trainer_version + 1) * batch_groups``.
``max_staleness=0`` is exact synchronous on-policy training.
"""

from __future__ import annotations

import asyncio
import time


class AdmissionControl:
    def __init__(self, batch_groups: int, max_staleness: int) -> None:
        self.batch_groups = batch_groups
        self.max_staleness = max_staleness
        self.accepted = 0
        self.in_flight = 0
        self.rejected = 0  # groups that finished but were not accepted (e.g. reward drop)
        self.forgotten = 0  # accepted groups the buffer later dropped as too stale
        self.trainer_version = 0
        self._cond = asyncio.Condition()
        self._idle_since: float | None = time.monotonic()
        self._idle_total = 0.0

    def idle_seconds(self) -> float:
        """Total time with no group in flight (the rollout side had nothing to do)."""
        open_idle = time.monotonic() - self._idle_since if self._idle_since is not None else 0.0
        return self._idle_total + open_idle

    def _set_in_flight(self, n: int) -> None:
        if self.in_flight == 0 and n > 0 and self._idle_since is not None:
            self._idle_total += time.monotonic() - self._idle_since
            self._idle_since = None
        elif n == 0:
            self._idle_since = time.monotonic()
        self.in_flight = n

    def capacity(self) -> int:
        return (self.max_staleness + self.trainer_version + 1) * self.batch_groups

    def can_start(self) -> bool:
        return self.accepted + self.in_flight < self.capacity()

    async def acquire(self) -> None:
        """Wait for a slot, then count one group in flight."""
        async with self._cond:
            await self._cond.wait_for(self.can_start)
            self._set_in_flight(self.in_flight + 1)

    async def finish(self, accepted: bool) -> None:
        """A group left flight: accepted into the buffer, or not (its slot frees up)."""
        async with self._cond:
            self._set_in_flight(self.in_flight - 1)
            if accepted:
                self.accepted += 1
            else:
                self.rejected += 1
            self._cond.notify_all()

    async def forget(self, n: int) -> None:
        """Give back the slots of ``n`` accepted groups that were dropped before training."""
        if n > 0:
            async with self._cond:
                self.accepted -= n
                self.forgotten += n
                self._cond.notify_all()

    async def set_trainer_version(self, version: int) -> None:
        async with self._cond:
            self.trainer_version = version
            self._cond.notify_all()
