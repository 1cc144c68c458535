"""DARTS + SART: DARTS plans the budgets and long slots, SART prunes running samples within each group."""

from __future__ import annotations

from rl.shaping import defaults
from rl.shaping.darts import DartsPolicy
from rl.shaping.policy import GroupPlan
from rl.shaping.sart import SartController
from rl.shaping.scorers import Scorer


class DartsSartPolicy:
    """DARTS's plans and dual-end selection, with SART's two-phase pruning on progress reports.

    Pruning never leaves fewer than M samples that can still complete, so the dual-end rule still
    fills its K short and L long slots; it only has fewer middle samples to discard. DARTS's ``long_wait``
    deadline, when set, is checked on the same progress reports.
    """

    def __init__(
        self, darts: DartsPolicy, scorer: Scorer, alpha: float = defaults.PRUNE_ALPHA, beta: int = defaults.PRUNE_BETA
    ) -> None:
        self.darts = darts
        self.scorer = scorer
        self.alpha = alpha
        self.beta = beta

    @property
    def avg_redundancy(self) -> float:
        return self.darts.avg_redundancy

    @avg_redundancy.setter
    def avg_redundancy(self, value: float) -> None:
        self.darts.avg_redundancy = value

    def plan(self, prompt_ids: list[str]) -> list[GroupPlan]:
        return self.darts.plan(prompt_ids)

    def controller(self, plan: GroupPlan, prompt: str = "") -> SartController:
        return SartController(self.darts.controller(plan), self.scorer, self.alpha, self.beta, prompt)

    def observe(self, prompt_id: str, kept_lengths: list[int]) -> None:
        self.darts.observe(prompt_id, kept_lengths)
