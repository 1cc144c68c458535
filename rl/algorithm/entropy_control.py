"""Adaptive entropy control (Skywork-OR1, He et al. 2025, arXiv 2505.22312; TRL's ``use_adaptive_entropy``): the
entropy bonus's coefficient moves step by step to hold the policy's mean token entropy near a target, and the bonus
applies only while the entropy is at or below it, so it lifts a collapsing policy and leaves an exploring one alone.

Invariants: the coefficient stays within ``[0, max_coef]``; an update's bonus depends only on updates before it (the
last update's entropy and the coefficient it left), so every micro-batch of an update, on every rank, applies the
same coefficient; before the first update no entropy is known and no bonus applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EntropyControl:
    """The controller's state: ``coef`` (starts at ``algorithm.entropy_coef``) and the last update's mean token
    entropy, in nats."""

    coef: float
    target: float
    delta: float
    max_coef: float
    last_entropy: float = math.inf

    def applied(self) -> float:
        """The coefficient of the next update's bonus: ``coef`` while the last entropy was at most the target."""
        return self.coef if self.last_entropy <= self.target else 0.0

    def update(self, entropy: float) -> None:
        """After an update whose mean token entropy (over every rank's tokens) was ``entropy``: raise the
        coefficient by ``delta`` when it was at most the target, lower it otherwise; a non-finite entropy (a skipped
        update) changes nothing."""
        if not math.isfinite(entropy):
            return
        step = self.delta if entropy <= self.target else -self.delta
        self.coef = min(max(self.coef + step, 0.0), self.max_coef)
        self.last_entropy = entropy
