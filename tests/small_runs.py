"""The arith_tiny recipe shrunk for integration tests: 4 groups of 4, a small eval, no CPU pinning; and runs served
from the session's warm engine (``on_the_warm_engine``), so an in-process run does not start one of its own."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rl.cli.common import recipe_path
from rl.config import RunConfig, load_config
from rl.loop.fleet import Fleet

SMALL = [
    "train.batch_groups=4",
    "shaping.m_keep=4",
    "eval.num_problems=8",
    "eval.every=0",
    "rollout.cpu_threads_bind=null",
    "train.save_checkpoint=false",
]


def small_run(tmp_path: Path, name: str, *overrides: str) -> RunConfig:
    """arith_tiny written under ``tmp_path/name`` with ``SMALL`` then ``overrides`` applied (later ones win)."""
    return load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", f"name={name}", *SMALL, *overrides])


class Lent:
    """The session's warm rollout worker lent to one run: calls go through to it, but the run's shutdown only waits
    until the requests the run left in flight have ended, so the engine stays up and idle (the next run's start, or
    the next test's ``rollout_worker`` fixture, gives it the base weights again)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    @property
    def shutdown(self) -> Any:
        async def drained() -> None:
            deadline = time.monotonic() + 60
            while (await self.handle.stats.remote())["unfinished"] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

        return SimpleNamespace(remote=lambda: asyncio.ensure_future(drained()))


def on_the_warm_engine(rollout_worker: Any) -> Callable[..., Fleet]:
    """An actor starter (``Driver(start_actors=...)``) that serves the run from the session's warm engine (the
    ``rollout_worker`` fixture) instead of starting one: the engine is given the base weights as version 0 first;
    trainers, buffer and weight channel are the run's own real actors, as ``rl.loop.actors.start_fleet`` makes them.
    With ``rollout.num_workers`` > 1 the others are real engines of the run's own, started after the warm one (a
    dead-worker test kills one of those); nothing is restarted."""
    import ray

    from rl.loop.actors import place_trainers, start_buffer, start_rollout_workers
    from rl.loop.fleet import RolloutPool
    from rl.loop.weight_channel import make_weight_channel

    def start(cfg: RunConfig, model_dir: str, counters: Any) -> Fleet:
        r, s = cfg.rollout, cfg.shaping
        assert s.priority == "none" and not s.scorer_worker and cfg.train.lora is None, "plain workers only"
        assert r.num_workers == 1 or r.max_restarts == 0, "a run with engines of its own restarts none"
        ray.get(rollout_worker.load_weights.remote(base_weights(model_dir), 0))
        trainers, room = place_trainers(cfg, model_dir)  # the driver's start-up joins them
        engine = Lent(rollout_worker)
        own = start_rollout_workers(cfg, model_dir, range(1, r.num_workers))
        pool = RolloutPool([engine, *own], counters)  # no restarts: test_e2e_dead_worker's replacement starts its own
        channel = make_weight_channel(cfg.weight_sync.transport, trainers, pool.live, r.partial_rollouts == "resubmit")
        return Fleet(
            pool, trainers, start_buffer(cfg), channel, kill=lambda a: a is engine or ray.kill(a), trainer_room=room
        )

    return start


def live_placement_groups() -> set[str]:
    """Ids of the placement groups Ray still holds (not removed)."""
    import ray

    return {pg_id for pg_id, pg in ray.util.placement_group_table().items() if pg["state"] != "REMOVED"}


@functools.cache
def base_weights(model_dir: str) -> bytes:
    """The model's initial weights as a weight sync sends them."""
    from rl.trainer.engine import TrainerSpec
    from rl.trainer.worker import TrainerWorker

    return TrainerWorker(TrainerSpec(model=model_dir)).weights_for_sync()
