"""Stall warnings: a run in which nothing has finished for far longer than its steps take says so, and on what it
waits.

The driver names each wait as it enters it (``StallWatch.waiting_for``: the engines and trainers starting, the
evaluation before training or the restore of a checkpoint, then each step's batch and trainer step, weight sync,
checkpoint and evaluation) and reports each step's time (``step_took``); every group that ends (kept,
dropped or failed) is progress too (``progressed``). ``overdue`` says when nothing has finished for longer than the
limit, then again at each further multiple of it. The limit is ``STALL_FLOOR_S``, or ``STALL_STEPS`` times the
slowest step so far where that is longer: a large model's slow steps, and the checkpoint or evaluation that takes a
few of them, are not stalls. A hung engine, trainer rank or actor is: nothing else says so, since every wait on them
is unbounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("rl.stall")

STALL_FLOOR_S = 120.0  # never a warning sooner
STALL_STEPS = 5.0  # nor before this many of the slowest step so far
STALL_CHECK_S = 5.0  # how often the driver asks
ANSWER_S = 5.0  # how long a stall warning waits for each actor's state


@dataclass
class StallWatch:
    """What the training loop waits on, since when, and how long its steps take."""

    clock: Callable[[], float] = time.monotonic
    what: str = "the start"
    rollouts: bool = False  # whether the wait depends on the rollouts (a step's batch): the warning says how they stand
    since: float = field(init=False)
    slowest: float = 0.0  # the slowest step so far, seconds
    warnings: int = 0  # about the current wait

    def __post_init__(self) -> None:
        self.since = self.clock()

    def waiting_for(self, what: str, rollouts: bool = False) -> None:
        """The loop starts a new wait: on ``what``."""
        self.what, self.rollouts, self.since, self.warnings = what, rollouts, self.clock(), 0

    def progressed(self) -> None:
        """Something finished (a group): the wait goes on, the clock of no progress starts again."""
        self.since, self.warnings = self.clock(), 0

    def step_took(self, seconds: float) -> None:
        self.slowest = max(self.slowest, seconds)

    def limit(self) -> float:
        return max(STALL_FLOOR_S, STALL_STEPS * self.slowest)

    def overdue(self) -> float | None:
        """The seconds the current wait has lasted when a warning about it is due (once per multiple of the limit;
        ``warnings`` then counts it), else None."""
        waited = self.clock() - self.since
        if waited < (self.warnings + 1) * self.limit():
            return None
        self.warnings += 1
        return waited


async def warn_of_stalls(
    watch: StallWatch, rollout_state: Callable[[], Awaitable[str]], on_stall: Callable[[], None]
) -> None:
    """Until cancelled: every ``STALL_CHECK_S`` a WARNING when nothing has finished for too long, saying how the
    rollouts stand where the wait depends on them; ``on_stall`` once per stall (its first warning)."""
    while True:
        await asyncio.sleep(STALL_CHECK_S)
        waited = watch.overdue()
        if waited is None:
            continue
        if watch.warnings == 1:
            on_stall()
        state = f"; {await rollout_state()}" if watch.rollouts else ""
        log.warning(
            "stalled: nothing has finished for %.0f s (no group, no step) while waiting for %s%s",
            waited,
            watch.what,
            state,
        )


async def rollout_state(fleet: Any, admission: Any, batch_groups: int) -> str:
    """How the rollouts stand, for a stall warning: the buffer, the groups being sampled, the engines' unfinished
    requests (an actor that does not answer within ``ANSWER_S`` is said not to)."""
    from ray.exceptions import RayActorError

    async def ask(call: Any) -> Any:
        try:
            return await asyncio.wait_for(call, ANSWER_S)
        except (TimeoutError, RayActorError):
            return None

    live = list(fleet.rollout.live)  # as it is now: a replacement may join while the answers come
    calls = [fleet.buffer.stats.remote(), *[w.stats.remote() for w in live]]
    buffer, *engines = await asyncio.gather(*[ask(call) for call in calls])
    held = "does not answer" if buffer is None else f"holds {buffer['in_buffer']}"
    silent = sum(e is None for e in engines)
    requests = sum(e["unfinished"] for e in engines if e is not None)
    return (
        f"the buffer {held} of the {batch_groups} groups a step takes, {admission.in_flight} groups are being "
        f"sampled, the engines hold {requests} unfinished requests"
        + (f" ({silent} of {len(engines)} engines do not answer)" if silent else "")
    )
