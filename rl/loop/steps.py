"""One training step on the trainer ranks, from groups taken out of the buffer: a whole batch at once
(``batch_step``), or each group accumulated as it arrives (``streamed_step``, periodic asynchrony)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from rl.algorithm.advantages import compute_advantages
from rl.algorithm.balance import balanced_shards, round_robin_shards
from rl.config import RunConfig
from rl.loop.fleet import Fleet
from rl.types import Group

Step = tuple[list[Group], list[dict[str, float]]]  # the step's groups, each rank's metrics


class RunStopped(Exception):
    """The run is stopping (e.g. no rollout worker left) while the trainer waits for data."""


async def unless_stopping(stopping: asyncio.Event, ref: Any) -> Any:
    """Await ``ref``, unless the run is ``stopping`` first (then raise ``RunStopped``)."""
    get, stop = asyncio.ensure_future(ref), asyncio.ensure_future(stopping.wait())
    await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    if get.done():
        return get.result()
    get.cancel()
    raise RunStopped


def assign_advantages(estimator: str, groups: list[Group], weights: list[float]) -> None:
    """Fill every group's ``advantages`` with ``estimator`` computed over ``groups`` together; ``weights``: the reward
    functions', for estimators that read each function's values (``gdpo``)."""
    rewards = [[s.reward for s in g.samples] for g in groups]
    functions = [list(g.reward_log.functions.values()) for g in groups]
    values = compute_advantages(estimator, rewards, function_rewards=functions, weights=weights)
    for group, advantages in zip(groups, values, strict=True):
        group.advantages = advantages


def reward_weights(cfg: RunConfig) -> list[float]:
    """The reward functions' weights, in ``reward.functions`` order (that of ``RewardLog.functions``)."""
    return [f.weight for f in cfg.reward.functions]


async def batch_step(
    cfg: RunConfig,
    fleet: Fleet,
    version: int,
    stopping: asyncio.Event,
    before_training: Callable[[], Awaitable[None]] | None = None,
) -> Step:
    """Take a whole batch, compute its advantages, one ``train_step`` per data-parallel rank; ``before_training``
    (the engines' sleep) is awaited once the batch is taken."""
    groups = await unless_stopping(stopping, fleet.buffer.get_batch.remote(cfg.train.batch_groups, version))
    if before_training is not None:
        await before_training()
    assign_advantages(cfg.algorithm.advantage, groups, reward_weights(cfg))
    split = balanced_shards if cfg.train.dp_balance == "tokens" else round_robin_shards
    trainers = fleet.trainers
    shards = split(groups, len(trainers))
    results = await asyncio.gather(*[t.train_step.remote(shard) for t, shard in zip(trainers, shards, strict=True)])
    return groups, results


async def streamed_step(cfg: RunConfig, fleet: Fleet, version: int, stopping: asyncio.Event) -> Step:
    """Periodic asynchrony: each group is accumulated as soon as it arrives, the step waits for the last one.

    Every group of the step was sampled with the current weights (``max_staleness=0``) and the trainer divides the
    summed gradient by the step's global loss units, so the update equals ``batch_step``'s.
    """
    groups: list[Group] = []
    pending = []
    weights = reward_weights(cfg)
    for i in range(cfg.train.batch_groups):
        group = (await unless_stopping(stopping, fleet.buffer.get_batch.remote(1, version)))[0]
        assign_advantages(cfg.algorithm.advantage, [group], weights)  # group-local estimators only (config check)
        groups.append(group)
        pending.append(fleet.trainers[i % len(fleet.trainers)].accumulate.remote([group]))
    await asyncio.gather(*pending)
    results = await asyncio.gather(*[t.finish_step.remote() for t in fleet.trainers])
    return groups, results
