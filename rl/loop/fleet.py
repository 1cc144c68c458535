"""The run's actors as one object the driver takes.

``Fleet`` holds the rollout workers (a ``RolloutPool``), the trainer ranks, the trajectory buffer, SART's scorer and
the weight channel, and shuts them all down. ``RolloutPool`` knows which rollout workers are live, hands them out
round robin, and replaces one that died. ``rl.loop.actors.start_fleet`` builds a fleet of Ray actors from a config; a
test builds one from in-process stand-ins with the same async methods (tests/test_driver_fleet.py), so the driver's
logic runs without Ray or vLLM.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rl.loop.weight_channel import WeightChannel

log = logging.getLogger("rl.fleet")


class RestartCounters(Protocol):
    """Where the pool counts deaths and replacements (the driver's checkpointed counters)."""

    dead_workers: int
    restarted_workers: int


class RolloutPool:
    """The rollout workers of a run.

    Invariants: every worker ever started is in ``started`` (all are ended at the end); ``up`` holds those whose
    engine was built (they answered once) and only these are asked to shut down; ``live`` holds those still
    answering, in ``started``, and is never rebound (the weight channel sends to this very list); a worker that died
    is replaced while ``counters.dead_workers <= max_restarts`` and a replacement joins ``live`` only after loading
    the current weights.
    """

    def __init__(
        self,
        workers: list[Any],
        counters: RestartCounters,
        start_worker: Callable[[int], Any] | None = None,
        max_restarts: int = 0,
    ) -> None:
        self.started = list(workers)
        self.live = list(workers)
        self.up: list[Any] = []  # answered once: built, so a shutdown call is answered
        self.counters = counters
        self.start_worker = start_worker  # index -> a new worker in that slot (same CPU bind); None: no restarts
        self.max_restarts = max_restarts
        self.restarting = 0  # replacements being started
        self._turns = itertools.count()
        self._replacements: set[asyncio.Task] = set()

    async def wait_until_up(self) -> list[dict[str, float]]:
        """Wait until every started worker's engine is built (one dies: its error); their stats, in ``started``
        order."""

        async def answered(worker: Any) -> dict[str, float]:
            stats = await worker.stats.remote()
            self.up.append(worker)
            return stats

        return await asyncio.gather(*[answered(w) for w in self.started])

    def next(self) -> Any:
        """The next live worker, round robin (only while ``live`` is not empty)."""
        return self.live[next(self._turns) % len(self.live)]

    @property
    def exhausted(self) -> bool:
        """No worker is live and none is starting: no more rollouts can come."""
        return not self.live and not self.restarting

    async def wait_for_a_live_worker(self) -> bool:
        """Wait while every worker is dead and a replacement is starting; False once none is left for good."""
        while not self.live and self.restarting:
            await asyncio.sleep(0.2)
        return bool(self.live)

    def lost(
        self, worker: Any, load_current: Callable[[Any], Awaitable[int]], on_exhausted: Callable[[], None]
    ) -> None:
        """``worker`` died: take it out of the rotation, start a replacement while restarts are left
        (``load_current(new)`` loads the current weights into it and returns their version), and call
        ``on_exhausted`` once no worker is left and none is coming."""
        if worker in self.live:
            self.live.remove(worker)
            self.counters.dead_workers += 1
            log.error("a rollout worker died (its groups in flight count as rollout_errors); %d left", len(self.live))
            if self.start_worker is not None and self.counters.dead_workers <= self.max_restarts:
                self.restarting += 1
                task = asyncio.create_task(self._replace(self.started.index(worker), load_current, on_exhausted))
                self._replacements.add(task)
                task.add_done_callback(self._replacements.discard)
        if self.exhausted:
            on_exhausted()

    async def _replace(
        self, index: int, load_current: Callable[[Any], Awaitable[int]], on_exhausted: Callable[[], None]
    ) -> None:
        assert self.start_worker is not None
        try:
            worker = self.start_worker(index)
            self.started.append(worker)  # shut down with the others whatever happens next
            version = await load_current(worker)
            self.up.append(worker)
            self.live.append(worker)
            self.counters.restarted_workers += 1
            log.warning("a replacement rollout worker joined at version %d; %d live", version, len(self.live))
        except Exception as e:
            log.error("restarting a rollout worker failed: %s", e)
        finally:
            self.restarting -= 1
            if self.exhausted:
                on_exhausted()

    async def shutdown(self, wait_s: float | None = None) -> None:
        """Stop replacements still starting, then every engine that came up (a dead one's call just fails); with
        ``wait_s``, wait that long at most. An engine still being built would answer only once it is up: it is left
        to ``Fleet.shutdown``'s kill, which ends it and everything it holds."""
        for task in self._replacements:
            task.cancel()
        calls = asyncio.gather(*[w.shutdown.remote() for w in self.up], return_exceptions=True)
        try:
            await asyncio.wait_for(calls, wait_s)
        except TimeoutError:
            log.warning("engines did not shut down within %.0f s; ending their processes", wait_s)


def _ray_kill(actor: Any) -> None:
    import ray

    ray.kill(actor)


@dataclass
class Fleet:
    """Every actor of a run, and the channel that carries weights from the trainer ranks to the rollout pool."""

    rollout: RolloutPool
    trainers: list[Any]  # data-parallel ranks; rank 0 first
    buffer: Any  # the trajectory buffer (``rl.loop.buffer.TrajectoryBuffer``'s methods)
    channel: WeightChannel
    scorer: Any | None = None  # SART's scorer worker, when its scorer is a model
    kill: Callable[[Any], None] = _ray_kill  # ends an actor's process
    trainer_room: Any | None = None  # the trainer ranks' Ray placement group, given back at shutdown

    async def shutdown(self, wait_s: float | None = None) -> None:
        """Shut the engines down (waiting ``wait_s`` at most, if given), then end every actor and give the trainer
        ranks' reserved room back (a Ray instance that outlives the run can place other work there)."""
        await self.rollout.shutdown(wait_s)
        for actor in [*self.rollout.started, *self.trainers, self.buffer, *([self.scorer] if self.scorer else [])]:
            self.kill(actor)
        if self.trainer_room is not None:
            from rl.loop.placement import release

            release(self.trainer_room)
