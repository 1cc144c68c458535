"""DAPO dynamic sampling (Yu et al. 2025): a group whose rewards are all equal has no signal and is dropped; its
slot goes to a new prompt. With ``dynamic_sampling_min_std`` a group whose rewards' (population) standard deviation
is at most that is dropped too: continuous rewards seldom tie exactly, yet a group of near-equal ones teaches little.
With ``dynamic_sampling_pass_rate`` (low, high) a group whose share of correct samples lies outside the band is
dropped as well (online difficulty filtering: prompts the policy nearly always, or nearly never, solves).

At most ``dynamic_sampling_max_factor * batch_groups`` groups are dropped per step, so a run whose prompts are all
solved (or all failed) keeps training instead of sampling forever; the groups past the cap are trained on.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import numpy as np

from rl.config import AlgorithmConfig

# a drop names its reason; over_cap: a drop is due, but this step's drops are at the cap
Verdict = Literal["keep", "zero_variance", "pass_rate", "over_cap"]


class DynamicSampling:
    """The verdicts of one run; ``end_step`` starts the next step's count of drops."""

    def __init__(self, algo: AlgorithmConfig, batch_groups: int) -> None:
        self.enabled = algo.dynamic_sampling
        self.cap = algo.dynamic_sampling_max_factor * batch_groups
        self.min_std = algo.dynamic_sampling_min_std
        self.pass_rate = algo.dynamic_sampling_pass_rate
        self.dropped: Counter[str] = Counter()  # this step's, by reason

    def verdict(self, rewards: list[float], correct: list[bool]) -> Verdict:
        """``keep`` a group (every group when dynamic sampling is off) unless it is due a drop (``_reason``), which
        it gets, naming the reason, or is kept ``over_cap`` when this step dropped its cap's worth already."""
        reason = self._reason(rewards, correct) if self.enabled else None
        if reason is None:
            return "keep"
        if self.dropped.total() >= self.cap:
            return "over_cap"
        self.dropped[reason] += 1
        return reason

    def _reason(self, rewards: list[float], correct: list[bool]) -> Literal["zero_variance", "pass_rate"] | None:
        """Why a group with these ``rewards`` (and per sample ``correct``) has too little signal, or None: rewards
        all equal (within ``min_std`` where it is set), or a share correct outside the ``pass_rate`` band."""
        varies = float(np.std(rewards)) > self.min_std if self.min_std > 0 else len(set(rewards)) > 1
        if not varies:
            return "zero_variance"
        if self.pass_rate is not None and not self.pass_rate[0] <= float(np.mean(correct)) <= self.pass_rate[1]:
            return "pass_rate"
        return None

    def end_step(self) -> dict[str, int]:
        """The groups dropped since the last call (this step's) by reason, and a new count."""
        dropped, self.dropped = dict(self.dropped), Counter()
        return dropped
