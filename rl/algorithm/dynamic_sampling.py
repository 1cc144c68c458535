"""DAPO dynamic sampling (Yu et al. 2025): a group whose rewards are all equal has no signal and is dropped; its
slot goes to a new prompt. With ``dynamic_sampling_min_std`` a group whose rewards' (population) standard deviation
is at most that is dropped too: continuous rewards seldom tie exactly, yet a group of near-equal ones teaches little.

At most ``dynamic_sampling_max_factor * batch_groups`` groups are dropped per step, so a run whose prompts are all
solved (or all failed) keeps training instead of sampling forever; the groups past the cap are trained on.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from rl.config import AlgorithmConfig

Verdict = Literal["keep", "drop", "over_cap"]  # over_cap: no signal, but this step's drops are at the cap


class DynamicSampling:
    """The verdicts of one run; ``end_step`` starts the next step's count of drops."""

    def __init__(self, algo: AlgorithmConfig, batch_groups: int) -> None:
        self.enabled = algo.dynamic_sampling
        self.cap = algo.dynamic_sampling_max_factor * batch_groups
        self.min_std = algo.dynamic_sampling_min_std
        self.dropped = 0  # this step's

    def verdict(self, rewards: list[float]) -> Verdict:
        """``keep`` a group whose ``rewards`` differ, by more than ``min_std`` where it is set (or every group when
        dynamic sampling is off), else ``drop`` it, or keep it ``over_cap``."""
        varies = float(np.std(rewards)) > self.min_std if self.min_std > 0 else len(set(rewards)) > 1
        if not self.enabled or varies:
            return "keep"
        if self.dropped >= self.cap:
            return "over_cap"
        self.dropped += 1
        return "drop"

    def end_step(self) -> int:
        """The groups dropped since the last call (this step's), and a new count."""
        dropped, self.dropped = self.dropped, 0
        return dropped
