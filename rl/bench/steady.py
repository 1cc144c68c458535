"""Steady-state rollout throughput: groups stream through the engine as an async trainer would draw them.

One batch's time to the last group is the wrong figure for an asynchronous trainer, which never waits for a whole
batch: ``steady_metrics`` keeps ``prompts`` groups in flight, starting the next group as soon as one finishes, for
``steady_batches`` x ``prompts`` groups (the batch's prompts over and over), and reports kept groups per second.
The shaping policy is a fresh one (DARTS plans each batch's worth of groups with the history observed so far); the
clock includes the ramp-up and the drain of the last groups, so more batches weigh them less.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rl.bench.rollout import Batch, RolloutBench
    from rl.rollout.engine import InferenceEngine
    from rl.shaping.policy import GroupPlan


async def steady_metrics(bench: RolloutBench, engine: InferenceEngine, mode: str, batch: Batch, tag: str) -> dict:
    """``steady_kept_groups_per_s`` and ``steady_s`` of ``mode`` over ``bench.cfg.steady_batches`` batches."""
    from rl.bench.rollout import mode_shaping

    cfg = bench.cfg
    policy = None if mode == "raw" else bench.policy(mode)  # raw: one n=M request per group
    progress = mode_shaping(cfg, mode).progress_tokens
    slots = asyncio.Semaphore(cfg.prompts)

    async def group(g: int, plan: GroupPlan | None, group_id: str) -> None:
        """One group of prompt ``g`` to its end (its kept samples in); then its slot goes to the next group."""
        try:
            tokens = batch.tokens[g]
            if policy is None or plan is None:
                await engine.generate_n(group_id, tokens, bench.sampling, cfg.m_keep)
                return
            result, _ = await bench.sample_group(engine, group_id, batch, g, policy.controller(plan), progress)
            policy.observe(batch.rows[g].prompt_id, result.lengths(result.samples))
        finally:
            slots.release()

    tasks: list[asyncio.Task] = []
    t0 = time.monotonic()
    for chunk in range(cfg.steady_batches):
        plans = policy.plan([row.prompt_id for row in batch.rows]) if policy else [None] * cfg.prompts
        for g, plan in enumerate(plans):
            await slots.acquire()
            tasks.append(asyncio.create_task(group(g, plan, f"{tag}-{chunk * cfg.prompts + g}")))
    await asyncio.gather(*tasks)
    seconds = time.monotonic() - t0
    return {"steady_kept_groups_per_s": cfg.steady_batches * cfg.prompts / seconds, "steady_s": seconds}
