"""The baseline policy: launch exactly M samples per prompt and keep them all."""

from __future__ import annotations

from rl.shaping.policy import Decision, FinishedSample, GroupPlan, RunningSample


class PlainController:
    """Keeps every sample; the group is done when all M have finished."""

    def __init__(self, plan: GroupPlan) -> None:
        self.plan = plan
        self._finished: list[FinishedSample] = []

    @property
    def prunable(self) -> bool:
        return False

    @property
    def reads_text(self) -> bool:
        return False

    def on_finish(self, sample: FinishedSample) -> Decision:
        self._finished.append(sample)
        return Decision(done=len(self._finished) == self.plan.n_launch)

    def on_progress(self, running: list[RunningSample]) -> Decision:
        return Decision(done=len(self._finished) == self.plan.n_launch)

    def kept(self) -> list[int]:
        return sorted(s.index for s in self._finished)

    def stats(self) -> dict[str, int]:
        n = len(self._finished)
        return {
            "launched": self.plan.n_launch,
            "kept": n,
            "discarded": 0,
            "aborted": 0,
            "pruned": 0,
            "shortfall": 0,
        }


class PlainPolicy:
    """N = M, keep all: the baseline every shaping speed-up is measured against."""

    def __init__(self, m_keep: int) -> None:
        self.m_keep = m_keep

    def plan(self, prompt_ids: list[str]) -> list[GroupPlan]:
        return [GroupPlan(prompt_id=p, n_launch=self.m_keep, m_keep=self.m_keep) for p in prompt_ids]

    def controller(self, plan: GroupPlan) -> PlainController:
        return PlainController(plan)

    def observe(self, prompt_id: str, kept_lengths: list[int]) -> None:
        return None
