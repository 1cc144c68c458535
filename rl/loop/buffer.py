"""The streaming trajectory buffer: groups arrive when done, the trainer takes batches.

Bounded with back-pressure (``put`` waits while full, nothing is dropped for space). Groups older than
``max_staleness`` versions behind the trainer are dropped at ``get_batch`` with a reason. Counters
always satisfy ``produced == consumed + in_buffer + sum(dropped.values())``.
Usable in-process or as an async Ray actor (``ray.remote(TrajectoryBuffer)``).
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque

from rl.types import Group


class TrajectoryBuffer:
    def __init__(self, capacity: int, max_staleness: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.max_staleness = max_staleness
        self._groups: deque[Group] = deque()
        self._cond = asyncio.Condition()
        self._closed = False
        self.produced = 0
        self.consumed = 0
        self.dropped: Counter[str] = Counter()
        self._dropped_positions: list[int] = []  # stream positions of dropped groups not yet taken

    async def put(self, group: Group) -> None:
        """Add a finished group; waits while the buffer is full."""
        async with self._cond:
            await self._cond.wait_for(lambda: len(self._groups) < self.capacity or self._closed)
            if self._closed:
                raise RuntimeError("buffer is closed")
            self._groups.append(group)
            self.produced += 1
            self._cond.notify_all()

    async def get_batch(self, n: int, trainer_version: int = 0) -> list[Group]:
        """Take exactly ``n`` groups (oldest first), dropping those beyond the staleness bound."""
        async with self._cond:
            batch: list[Group] = []
            while len(batch) < n:
                await self._cond.wait_for(lambda: self._groups or self._closed)
                if not self._groups:
                    raise RuntimeError("buffer closed before a full batch arrived")
                group = self._groups.popleft()
                if self._is_stale(group, trainer_version):
                    self.dropped["stale"] += 1
                    self._dropped_positions.append(group.position)
                    continue
                batch.append(group)
                self.consumed += 1
            self._cond.notify_all()
            return batch

    def _is_stale(self, group: Group, trainer_version: int) -> bool:
        return self.max_staleness is not None and trainer_version - group.min_version > self.max_staleness

    async def close(self) -> None:
        """Wake every waiter; later puts fail, later gets drain what is left."""
        async with self._cond:
            self._closed = True
            self._cond.notify_all()

    async def take_dropped_positions(self) -> list[int]:
        """The stream positions of the groups dropped since the last call."""
        taken, self._dropped_positions = self._dropped_positions, []
        return taken

    async def stats(self) -> dict[str, int]:
        return {
            "produced": self.produced,
            "consumed": self.consumed,
            "in_buffer": len(self._groups),
            **{f"dropped_{k}": v for k, v in self.dropped.items()},
        }
