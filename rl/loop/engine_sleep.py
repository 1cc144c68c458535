"""Synchronous runs on one GPU (``rollout.sleep_while_training``): the engines lend their GPU memory to the trainers
for each step, as TRL's colocate mode does with vLLM's sleep mode.

Each step, in order: the batch is taken (at ``train.max_staleness=0`` no group of the next one has started); every
engine sleeps; the trainers step, then free the blocks their allocator cached; every engine wakes its weights; the
sync loads the new version into them; the engines wake their KV cache; only then does admission learn the version,
so no group starts on a sleeping engine. Level 2 discards the weights, which the sync brings back whole; with a LoRA
adapter sync only the adapter comes, so the base weights wait in host memory (level 1).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

from ray.exceptions import RayActorError

from rl.config import RunConfig
from rl.loop.fleet import RolloutPool

log = logging.getLogger("rl.driver")


class EngineWakeFailed(RuntimeError):
    """A live engine could not take its memory back: it would never sample again, so the run stops on it."""


class EngineSleep:
    """Puts the ``pool``'s live rollout workers to sleep and wakes them; ``trainers`` free their cache between."""

    def __init__(self, cfg: RunConfig, pool: RolloutPool, trainers: list[Any]) -> None:
        lora = cfg.train.lora
        self.level = 1 if lora is not None and lora.sync == "adapter" else 2
        self.pool, self.trainers = pool, trainers
        self.seconds: dict[str, float] = {}  # the last step's: engine_sleep_s, engine_wake_s

    async def sleep(self) -> None:
        """Every live engine gives its memory back; one that cannot is logged and steps on awake."""
        t0 = time.monotonic()
        for error in await _each([w.sleep.remote(self.level) for w in self.pool.live]):
            log.warning("a rollout engine could not sleep, it stays awake through this step: %s", error)
        self.seconds = {"engine_sleep_s": time.monotonic() - t0}

    async def wake_weights(self) -> None:
        """The trainers free their cached blocks, then the engines take their weights' memory back."""
        t0 = time.monotonic()
        await asyncio.gather(*[t.release_memory.remote() for t in self.trainers])
        await self._wake(["weights"])
        self.seconds["engine_wake_s"] = time.monotonic() - t0

    async def wake_cache(self) -> None:
        """The engines take their KV cache back and schedule again."""
        t0 = time.monotonic()
        await self._wake(["kv_cache"])
        self.seconds["engine_wake_s"] = self.seconds.get("engine_wake_s", 0.0) + time.monotonic() - t0

    async def _wake(self, tags: list[str]) -> None:
        """Wake ``tags`` on every live engine; one that cannot would never sample again: the run stops on it."""
        for error in await _each([w.wake_up.remote(tags) for w in self.pool.live]):
            raise EngineWakeFailed(f"a rollout engine could not wake its {tags[0]}: {error}") from error


async def _each(calls: list[Awaitable[Any]]) -> list[BaseException]:
    """Await every call; the errors of those that failed, but for dead actors (the weight sync reports those)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    return [r for r in results if isinstance(r, BaseException) and not isinstance(r, RayActorError)]
