"""SART: early stop at M, two-phase pruning, the beta cap, the "M can still finish" guard, provided scores."""

from __future__ import annotations

import pytest
from rl.shaping.darts import DartsController
from rl.shaping.factory import make_policy
from rl.shaping.plain import PlainController
from rl.shaping.policy import FinishedSample, GroupPlan, RunningSample
from rl.shaping.sart import SartController, SartPolicy
from rl.shaping.scorers import ExternalScorer, RepetitionScorer


class TableScorer:
    """Scores a text that spells a number as that number; records every call."""

    absolute = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    def score(self, prompt: str, partial_text: str) -> float:
        self.calls.append(partial_text)
        return float(partial_text)


def sart(n, m, alpha=0.3, beta=2, long_slots=0):
    return SartController(DartsController(GroupPlan("p", n, m, long_slots)), TableScorer(), alpha, beta)


def running(scores: dict[int, float]) -> list[RunningSample]:
    return [RunningSample(i, 100, str(s)) for i, s in scores.items()]


def test_phase1_prunes_below_alpha_at_most_beta_lowest_first():
    ctrl = sart(8, 4, alpha=0.3, beta=2)
    scores = {0: 0.1, 1: 0.05, 2: 0.9, 3: 0.2, 4: 0.95, 5: 0.8, 6: 0.7, 7: 0.6}
    decision = ctrl.on_progress(running(scores))
    assert decision.abort == [0, 1] and not decision.done
    # beta is spent for the whole phase: 3 (0.2 < alpha) stays
    del scores[0], scores[1]
    assert ctrl.on_progress(running(scores)).abort == []
    assert ctrl.stats()["pruned"] == 2


def test_phase2_threshold_is_the_first_completed_score():
    ctrl = sart(8, 3, alpha=0.3, beta=1)
    scores = {0: 0.1, 1: 0.05, 2: 0.9, 3: 0.2, 4: 0.95, 5: 0.8, 6: 0.7, 7: 0.6}
    assert ctrl.on_progress(running(scores)).abort == [1]
    del scores[1]
    assert ctrl.alpha_prime is None
    ctrl.on_finish(FinishedSample(5, 120, "stop", text="0.75"))
    assert ctrl.alpha_prime == 0.75
    del scores[5]
    # below 0.75: 0 (0.1), 3 (0.2), 7 (0.6), 6 (0.7); spare = 1 completed + 6 running - 3 = 4
    decision = ctrl.on_progress(running(scores))
    assert decision.abort == [0, 3, 6, 7]
    assert ctrl.on_progress(running({2: 0.9, 4: 0.95})).abort == []
    assert ctrl.stats()["pruned"] == 5


def test_truncated_first_finish_does_not_start_phase2():
    ctrl = sart(6, 2, alpha=0.3, beta=1)
    ctrl.on_finish(FinishedSample(0, 512, "length", text="0.99"))
    assert ctrl.alpha_prime is None
    decision = ctrl.on_progress(running({1: 0.5, 2: 0.4, 3: 0.2, 4: 0.1, 5: 0.9}))
    assert decision.abort == [4]  # phase 1 rule: below alpha, beta = 1


def test_pruning_never_leaves_fewer_than_m_able_to_finish():
    ctrl = sart(5, 4, alpha=1.0, beta=10)
    decision = ctrl.on_progress(running({i: 0.1 * i for i in range(5)}))
    assert decision.abort == [0]
    assert ctrl.on_progress(running({i: 0.1 for i in range(1, 5)})).abort == []
    # a truncated finish lowers what can still complete: nothing more may go
    ctrl2 = sart(6, 4, alpha=1.0, beta=10)
    ctrl2.on_finish(FinishedSample(0, 512, "length"))
    assert ctrl2.on_progress(running({i: 0.0 for i in range(1, 6)})).abort == [1]


def test_progress_ignores_samples_no_longer_running():
    ctrl = sart(6, 2, alpha=0.5, beta=3)
    ctrl.on_finish(FinishedSample(0, 512, "length"))
    decision = ctrl.on_progress(running({0: 0.0, 1: 0.1, 2: 0.9}))
    assert decision.abort == [1]


def test_early_stop_aborts_the_rest_but_not_the_pruned():
    ctrl = sart(8, 3, alpha=0.3, beta=2)
    assert ctrl.on_progress(running({i: (0.1 if i in (2, 5) else 0.9) for i in range(8)})).abort == [2, 5]
    ctrl.on_finish(FinishedSample(0, 10, "stop", text="0.9"))
    ctrl.on_finish(FinishedSample(1, 12, "stop", text="0.9"))
    decision = ctrl.on_finish(FinishedSample(3, 15, "stop", text="0.9"))
    assert decision.done and decision.abort == [4, 6, 7]
    assert ctrl.kept() == [0, 1, 3]
    assert ctrl.on_progress(running({4: 0.0})).abort == []
    assert ctrl.stats() == {
        "launched": 8,
        "kept": 3,
        "discarded": 0,
        "aborted": 3,
        "pruned": 2,
        "cut": 0,
        "shortfall": 0,
    }


def test_scorer_not_called_when_nothing_may_be_pruned():
    ctrl = sart(4, 4, alpha=1.0, beta=5)
    ctrl.on_progress(running({i: 0.0 for i in range(4)}))
    assert ctrl.scorer.calls == []


def test_pruning_with_long_slots_keeps_dual_end_selection():
    ctrl = sart(6, 3, alpha=0.5, beta=2, long_slots=1)
    assert ctrl.on_progress(running({0: 0.9, 1: 0.9, 2: 0.1, 3: 0.9, 4: 0.9, 5: 0.9})).abort == [2]
    for i, n in ((0, 10), (1, 20), (3, 30), (4, 40)):
        assert not ctrl.on_finish(FinishedSample(i, n, "stop", text="0.9")).done
    assert ctrl.on_finish(FinishedSample(5, 90, "stop", text="0.9")).done
    assert ctrl.kept() == [0, 1, 5]
    stats = ctrl.stats()
    assert stats["pruned"] == 1 and stats["discarded"] == 2
    assert sum(stats[k] for k in ("kept", "discarded", "aborted", "pruned")) == 6


def test_sart_policy_plans_fixed_redundancy_and_wires_the_scorer():
    policy = SartPolicy(8, redundancy=1.5, scorer=RepetitionScorer())
    plans = policy.plan(["a", "b"])
    assert [(pl.n_launch, pl.m_keep, pl.long_slots) for pl in plans] == [(12, 8, 0), (12, 8, 0)]
    ctrl = policy.controller(plans[0], prompt="Solve x")
    assert isinstance(ctrl, SartController) and ctrl.prompt == "Solve x"
    assert isinstance(SartPolicy(8, scorer=None).controller(plans[0]), DartsController)
    # a DARTS plan with long slots is run as pure early stop
    assert policy.controller(GroupPlan("c", 12, 8, long_slots=2)).plan.long_slots == 0


def test_repetition_scorer():
    scorer = RepetitionScorer(ngram=4, window=200)
    prose = " ".join(f"word{i}" for i in range(300))
    assert scorer.score("", prose) == 1.0
    loop = "so the answer is 5 and " * 50
    assert scorer.score("", loop) < 0.05
    assert scorer.score("", "too short") == 1.0
    assert scorer.score("", "a b c d e f") == 1.0
    budgeted = RepetitionScorer(length_budget=100)
    assert budgeted.score("", prose) == pytest.approx(100 / 300)
    with pytest.raises(ValueError):
        RepetitionScorer(ngram=5, window=4)


def test_an_absolute_scorer_keeps_alpha_as_the_phase2_threshold():
    ctrl = SartController(DartsController(GroupPlan("p", 8, 2)), RepetitionScorer(), alpha=0.3, beta=0)
    ctrl.on_finish(FinishedSample(0, 5, "stop", text="The result is 7"))  # scores 1.0: phase 2 starts
    assert ctrl.alpha_prime == 1.0 and ctrl.prunable  # phase 2 is capped by the spare alone, not by beta
    prose = " ".join(f"w{i % 90}" for i in range(100))  # a repeated 4-gram or so: scores ~0.9, below the 1.0 answer
    loop = "so the answer is 5 and " * 20
    samples = {1: prose, 2: loop, 3: loop + "x", 4: "short", 5: prose + " y", 6: "z", 7: "q"}
    scorer = RepetitionScorer()
    assert 0.3 < scorer.score("", prose) < 1.0 and scorer.score("", loop) < 0.3
    decision = ctrl.on_progress([RunningSample(i, 50, t) for i, t in samples.items()])
    assert decision.abort == [2, 3]  # only the loops: the prose that scores below the completed answer stays


def external(n, m, alpha=-1.0, beta=2):
    return SartController(DartsController(GroupPlan("p", n, m)), ExternalScorer(), alpha, beta)


def scored(scores: dict[int, float | None]) -> list[RunningSample]:
    return [RunningSample(i, 100, "", s) for i, s in scores.items()]


def test_provided_scores_take_precedence_over_the_controllers_scorer():
    ctrl = sart(6, 2, alpha=0.3, beta=2)
    # the texts would score 0.9 in-process; the provided scores decide, and the scorer is not asked
    samples = [RunningSample(i, 100, "0.9", s) for i, s in {0: 0.1, 1: 0.9, 2: 0.2, 3: 0.9}.items()]
    assert ctrl.on_progress(samples).abort == [0, 2]
    ctrl.on_finish(FinishedSample(1, 120, "stop", text="0.1", score=0.95))
    assert ctrl.alpha_prime == 0.95 and ctrl.scorer.calls == []
    # a sample without a provided score falls back to the in-process scorer
    assert ctrl.on_progress([RunningSample(3, 130, "0.5"), RunningSample(4, 130, "0.99", 0.99)]).abort == [3]
    assert ctrl.scorer.calls == ["0.5"]


def test_external_scores_prune_in_both_phases_and_unscored_samples_stay():
    ctrl = external(8, 3, alpha=-1.0, beta=2)
    # phase 1: below alpha, lowest first, at most beta; no score (nothing generated yet) is never pruned
    assert ctrl.on_progress(scored({0: -3.0, 1: None, 2: -0.5, 3: -2.0, 4: -1.5, 5: -0.2})).abort == [0, 3]
    assert ctrl.on_progress(scored({1: -9.0, 4: -1.5})).abort == []  # beta spent
    # a completion the scorer could not rate leaves phase 1 on; the next scored one starts phase 2
    ctrl.on_finish(FinishedSample(6, 50, "stop", text="x"))
    assert ctrl.alpha_prime is None
    ctrl.on_finish(FinishedSample(7, 60, "stop", text="y", score=-0.6))
    assert ctrl.alpha_prime == -0.6
    # phase 2: below -0.6, capped by spare = 2 completed + 4 running - 3 = 3
    assert ctrl.on_progress(scored({1: -9.0, 2: -0.5, 4: -1.5, 5: -0.7})).abort == [1, 4, 5]
    assert ctrl.stats()["pruned"] == 5


def test_prunable_says_when_a_progress_report_could_abort_anything():
    ctrl = external(6, 2, alpha=-1.0, beta=1)
    assert ctrl.prunable
    ctrl.on_progress(scored({0: -2.0}))
    assert not ctrl.prunable  # beta spent in phase 1
    ctrl.on_finish(FinishedSample(1, 40, "stop", score=-0.5))
    assert ctrl.prunable  # phase 2 has no cap
    ctrl.on_finish(FinishedSample(2, 41, "stop", score=-0.5))
    assert ctrl.done and not ctrl.prunable
    assert not DartsController(GroupPlan("d", 4, 2)).prunable
    assert not PlainController(GroupPlan("p", 2, 2)).prunable


def test_external_scorer_by_name():
    policy = make_policy("sart", 4, scorer="external", alpha=-2.0)
    ctrl = policy.controller(policy.plan(["a"])[0])
    assert isinstance(ctrl, SartController) and isinstance(ctrl.scorer, ExternalScorer)
    assert ctrl.on_progress([RunningSample(0, 10, "anything")]).abort == []


def test_a_darts_long_wait_deadline_closes_the_group_through_sart():
    base = DartsController(GroupPlan("p", 6, 3, long_slots=1), long_wait=2.0)
    ctrl = SartController(base, TableScorer(), alpha=0.3, beta=0)
    assert not ctrl.prunable  # beta 0: phase 1 prunes nothing, and no deadline yet
    ctrl.on_finish(FinishedSample(0, 10, "stop", text="0.9"))  # phase 2 at 0.9
    ctrl.on_finish(FinishedSample(1, 15, "stop", text="0.9"))  # K = 2 short: deadline 30
    ctrl.on_finish(FinishedSample(2, 22, "stop", text="0.9"))
    assert base.prunable
    decision = ctrl.on_progress([RunningSample(i, 30, "0.95") for i in (3, 4, 5)])
    assert decision.abort == [3, 4, 5] and decision.done
    assert ctrl.kept() == [0, 1, 2]
    assert ctrl.stats()["aborted"] == 3 and ctrl.stats()["pruned"] == 0


def test_pruning_and_the_deadline_abort_together():
    base = DartsController(GroupPlan("p", 7, 3, long_slots=1), long_wait=1.0)
    ctrl = SartController(base, TableScorer(), alpha=0.3, beta=2)
    ctrl.on_finish(FinishedSample(0, 10, "stop", text="0.2"))  # phase 2 from here: threshold 0.2
    ctrl.on_finish(FinishedSample(1, 12, "stop", text="0.5"))  # deadline 12
    decision = ctrl.on_progress([RunningSample(i, 11, "0.1" if i == 6 else "0.9") for i in range(2, 7)])
    assert decision.abort == [6] and not decision.done  # below the deadline: only the pruned one
    ctrl.on_finish(FinishedSample(2, 12, "stop", text="0.9"))
    decision = ctrl.on_progress([RunningSample(i, 12, "0.9") for i in (3, 4, 5)])
    assert decision.abort == [3, 4, 5] and decision.done
    assert ctrl.kept() == [0, 1, 2]
    assert ctrl.stats() == {
        "launched": 7,
        "kept": 3,
        "discarded": 0,
        "aborted": 3,
        "pruned": 1,
        "cut": 0,
        "shortfall": 0,
    }
