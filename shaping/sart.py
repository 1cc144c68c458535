"""SART: redundant sampling with early stop plus two-phase pruning of running samples (papers.md §2).

Early stop is DARTS's tail-pruning rule (launch N, keep the first M non-truncated finishers, abort the
rest), so ``SartController`` wraps a ``DartsController`` and adds pruning on progress reports:

* Phase 1, until the first sample completes with ``"stop"``: prune running samples scoring below
  ``alpha``, at most ``beta`` over the whole phase (protects diversity while nothing is known).
* Phase 2, from then on: prune running samples scoring below ``alpha'``, the score of that first
  completed sample. SART puts no cap on this phase; none is applied here. With an absolute scorer (a loop
  detector, ``Scorer.absolute``) the threshold stays ``alpha``: a completed sample's score is no bar there.
* In both phases the lowest scores go first (ties: lower index), and pruning never leaves fewer than M
  samples that can still complete (finished with ``"stop"`` plus still running).
* Scores given with the samples (a scorer worker's, ``RunningSample.score``) take precedence over the
  controller's own ``Scorer``; a sample with no score at all is never pruned, and a completion with none
  does not start phase 2.

A first finisher that is truncated or aborted does not end phase 1: it is no completed answer to compare
with. The wrapped controller may have long slots (DARTS + SART composition, ``compose.py``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from rl.shaping import defaults
from rl.shaping.darts import DartsController
from rl.shaping.policy import Decision, FinishedSample, GroupPlan, RunningSample
from rl.shaping.scorers import Scorer


class SartController:
    """Two-phase pruning on top of a ``DartsController``'s keep/abort decisions."""

    def __init__(self, base: DartsController, scorer: Scorer, alpha: float, beta: int, prompt: str = "") -> None:
        if beta < 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        self.base = base
        self.plan = base.plan
        self.scorer = scorer
        self.alpha = alpha
        self.beta = beta
        self.prompt = prompt
        self.alpha_prime: float | None = None  # the first (scored) completion's score: phase 2 from then on
        self._phase1_pruned = 0

    @property
    def done(self) -> bool:
        return self.base.done

    @property
    def prunable(self) -> bool:
        return not self.done and (self._rule()[1] > 0 or self.base.prunable)

    @property
    def reads_text(self) -> bool:
        """Its scorer reads partial texts (running samples) and the first completion's."""
        return True

    def on_finish(self, sample: FinishedSample) -> Decision:
        first = self.alpha_prime is None and sample.finish_reason == "stop" and self.base.is_running(sample.index)
        decision = self.base.on_finish(sample)
        if first and not decision.done:
            self.alpha_prime = self._score(sample)  # None: still phase 1, the next scored completion decides
        return decision

    def on_progress(self, running: list[RunningSample]) -> Decision:
        if self.done:
            return Decision(done=True)
        deadline = self.base.on_progress(running)  # the wrapped controller's long-slot deadline, if any
        threshold, cap = self._rule()
        if deadline.done or cap <= 0:
            return deadline
        scores = {r.index: self._score(r) for r in running if self.base.is_running(r.index)}
        ranked = sorted((s, i) for i, s in scores.items() if s is not None)
        chosen = [i for s, i in ranked if s < threshold][:cap]
        pruned = self.base.prune(chosen)
        if self.alpha_prime is None:
            self._phase1_pruned += len(pruned)
        return Decision(abort=deadline.abort + pruned, done=self.done)

    def kept(self) -> list[int]:
        return self.base.kept()

    def stats(self) -> dict[str, int]:
        return self.base.stats()

    def _rule(self) -> tuple[float, int]:
        """This phase's threshold and how many running samples may be pruned now."""
        if self.alpha_prime is None:
            return self.alpha, min(self.beta - self._phase1_pruned, self.base.spare())
        return (self.alpha if self.scorer.absolute else self.alpha_prime), self.base.spare()

    def _score(self, sample: RunningSample | FinishedSample) -> float | None:
        """The rollout side's score if it gave one, else this controller's scorer's."""
        return sample.score if sample.score is not None else self.scorer.score(self.prompt, sample.text)


class SartPolicy:
    """Every prompt launches ``round(redundancy * M)`` samples; keep the first M, prune by ``scorer``.

    SART's defaults for alpha and beta are unknown (papers.md §2.3); ``alpha=0.5`` suits the built-in
    repetition scorer (a loop whose period is under half the window scores below it), ``beta=2``.
    ``scorer=None`` turns pruning off (early stop only).
    """

    def __init__(
        self,
        m_keep: int,
        redundancy: float = defaults.AVG_REDUNDANCY,
        scorer: Scorer | None = None,
        alpha: float = defaults.PRUNE_ALPHA,
        beta: int = defaults.PRUNE_BETA,
    ) -> None:
        self.m_keep = m_keep
        self.n_launch = max(m_keep, math.floor(redundancy * m_keep + 0.5))
        self.scorer = scorer
        self.alpha = alpha
        self.beta = beta

    def plan(self, prompt_ids: list[str]) -> list[GroupPlan]:
        return [GroupPlan(p, self.n_launch, self.m_keep) for p in prompt_ids]

    def controller(self, plan: GroupPlan, prompt: str = "") -> SartController | DartsController:
        base = DartsController(replace(plan, long_slots=0))
        if self.scorer is None:
            return base
        return SartController(base, self.scorer, self.alpha, self.beta, prompt)

    def observe(self, prompt_id: str, kept_lengths: list[int]) -> None:
        return None
