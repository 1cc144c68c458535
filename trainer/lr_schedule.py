"""The learning rate of each step: a linear warmup, then constant, linear or cosine decay over the run.

The factor is a function of the step alone (no scheduler state), so a resumed run continues on the same curve:
``train.lr`` x ``lr_factor(step, ...)`` for the update of trainer step ``step`` (1-based; every update of a step,
with ``train.mini_batches`` or ``ppo_epochs`` above 1, takes that step's rate).
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def lr_factor(step: int, schedule: str, warmup_steps: int, total_steps: int) -> float:
    """The multiple of the base rate at ``step``: ``step / warmup_steps`` during the warmup (the first update is
    not a zero one), then 1 (constant), or decaying towards 0 (linear, cosine) from the first step after the warmup
    (1) to the last, ``total_steps`` (``1 / (total_steps - warmup_steps)`` of the way above 0 for linear), as
    transformers' schedules of the same names do. A step past ``total_steps`` (a run resumed with fewer steps)
    keeps the last step's rate."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {schedule!r}; one of {', '.join(SCHEDULES)}")
    if step <= warmup_steps:
        return step / warmup_steps
    if schedule == "constant":
        return 1.0
    decay = max(total_steps - warmup_steps, 1)
    progress = min(step - warmup_steps - 1, decay - 1) / decay  # 0 at the first step after the warmup
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))
