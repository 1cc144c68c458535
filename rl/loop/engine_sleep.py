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
import time
from typing import Any

from rl.config import RunConfig
from rl.loop.fleet import RolloutPool


class EngineSleep:
    """Puts the ``pool``'s live rollout workers to sleep and wakes them; ``trainers`` free their cache between."""

    def __init__(self, cfg: RunConfig, pool: RolloutPool, trainers: list[Any]) -> None:
        lora = cfg.train.lora
        self.level = 1 if lora is not None and lora.sync == "adapter" else 2
        self.pool, self.trainers = pool, trainers
        self.seconds: dict[str, float] = {}  # the last step's: engine_sleep_s, engine_wake_s

    async def sleep(self) -> None:
        """Every live engine gives its memory back (a dead one is the weight sync's to report)."""
        t0 = time.monotonic()
        await asyncio.gather(*[w.sleep.remote(self.level) for w in self.pool.live], return_exceptions=True)
        self.seconds = {"engine_sleep_s": time.monotonic() - t0}

    async def wake_weights(self) -> None:
        """The trainers free their cached blocks, then the engines take their weights' memory back."""
        t0 = time.monotonic()
        await asyncio.gather(*[t.release_memory.remote() for t in self.trainers])
        await asyncio.gather(*[w.wake_up.remote(["weights"]) for w in self.pool.live], return_exceptions=True)
        self.seconds["engine_wake_s"] = time.monotonic() - t0

    async def wake_cache(self) -> None:
        """The engines take their KV cache back and schedule again."""
        t0 = time.monotonic()
        await asyncio.gather(*[w.wake_up.remote(["kv_cache"]) for w in self.pool.live], return_exceptions=True)
        self.seconds["engine_wake_s"] = self.seconds.get("engine_wake_s", 0.0) + time.monotonic() - t0
