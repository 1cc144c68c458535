"""Steering DARTS's average redundancy by how idle the rollout side is.

Asynchronous training runs at the pace of its slower side. When the trainer is the bottleneck, admission
control holds the rollout side back and it idles: spare samples then cost no wall time, and with them more
prompts can keep their shorter samples, so the trainer gets fewer tokens per step. When the rollout side is
the bottleneck, every spare sample costs wall time. After each step the governor moves the average redundancy

    r <- clip(r + gain * (idle - target), low, high)

where ``idle`` is the fraction of the step the rollout side had no group in flight. It rises while the rollout
side idles more than ``target`` and falls, down to ``low``, while it idles less. Invariant:
``low <= value <= high`` always; a step with no idle measurement (NaN) leaves it unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GAIN = 1.0  # redundancy units per unit of idle fraction above target, per step


@dataclass
class IdleGovernor:
    value: float
    low: float
    high: float
    target: float

    def __post_init__(self) -> None:
        if not self.low <= self.value <= self.high:
            raise ValueError(f"need low <= value <= high, got {self.low}, {self.value}, {self.high}")
        if not 0 <= self.target < 1:
            raise ValueError(f"target idle fraction must be in [0, 1), got {self.target}")

    def update(self, idle_fraction: float) -> float:
        """The average redundancy for the next plans, given the last step's rollout idle fraction."""
        if not math.isnan(idle_fraction):
            self.value = min(self.high, max(self.low, self.value + GAIN * (idle_fraction - self.target)))
        return self.value
