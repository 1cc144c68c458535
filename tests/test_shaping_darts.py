"""DARTS: dual-end selection, truncation, ties, shortfall, tail pruning, and planning."""

from __future__ import annotations

import numpy as np
import pytest
from rl.shaping.darts import DartsController, DartsPolicy
from rl.shaping.policy import FinishedSample, GroupPlan, RunningSample

STOP, LENGTH, ABORT = "stop", "length", "abort"


def finish(ctrl, index, length, reason=STOP):
    return ctrl.on_finish(FinishedSample(index, length, reason))


def run_group(ctrl, lengths, cap=10**9):
    """All members start together and finish in length order; aborted ones report "abort" at the end.

    Checks on the way that every abort names a sample still running and not already aborted.
    """
    order = sorted(range(len(lengths)), key=lambda i: (min(lengths[i], cap), i))
    finished, aborted = set(), []
    for i in order:
        if i in aborted:
            continue
        decision = finish(ctrl, i, min(lengths[i], cap), LENGTH if lengths[i] >= cap else STOP)
        finished.add(i)
        assert not set(decision.abort) & (finished | set(aborted))
        assert len(set(decision.abort)) == len(decision.abort)
        aborted.extend(decision.abort)
    for i in aborted:
        assert finish(ctrl, i, 0, ABORT).abort == []
    return aborted


def test_dual_end_keeps_k_shortest_and_l_longest():
    lengths = [50, 10, 80, 30, 70, 20, 60, 40]
    ctrl = DartsController(GroupPlan("p", n_launch=8, m_keep=4, long_slots=1))
    order = [1, 5, 3, 7, 0, 6, 4, 2]  # length order
    for step, i in enumerate(order):
        decision = finish(ctrl, i, lengths[i])
        assert decision.abort == []
        assert decision.done == (step == 7)
        if step == 2:
            assert ctrl.kept() == [1, 3, 5]  # the K short ones are accepted on arrival
    assert ctrl.kept() == [1, 2, 3, 5]
    assert ctrl.stats() == {
        "launched": 8,
        "kept": 4,
        "discarded": 4,
        "aborted": 0,
        "pruned": 0,
        "cut": 0,
        "shortfall": 0,
    }


def test_truncated_samples_never_take_the_long_slot():
    lengths = [100, 512, 300, 200, 512, 150, 250]  # 512 = cap: truncated
    ctrl = DartsController(GroupPlan("p", n_launch=7, m_keep=3, long_slots=1))
    assert run_group(ctrl, lengths, cap=512) == []
    assert ctrl.kept() == [0, 2, 5]  # 100, 150 short; 300 is the longest non-truncated
    assert ctrl.stats()["shortfall"] == 0
    assert ctrl.stats()["discarded"] == 4


def test_length_ties_go_by_finish_order_not_index():
    # indices 2 and 3 both 70 long; the later finisher counts as the longer one
    for first, second in ((2, 3), (3, 2)):
        ctrl = DartsController(GroupPlan("p", n_launch=5, m_keep=3, long_slots=1))
        for i, n in ((0, 10), (1, 20), (4, 40), (first, 70), (second, 70)):
            finish(ctrl, i, n)
        assert ctrl.kept() == sorted([0, 1, second])


def test_short_slots_are_taken_in_finish_order():
    ctrl = DartsController(GroupPlan("p", n_launch=4, m_keep=2, long_slots=0))
    finish(ctrl, 3, 50)
    decision = finish(ctrl, 0, 50)
    assert decision.done and decision.abort == [1, 2]
    assert ctrl.kept() == [0, 3]


def test_shortfall_fills_with_shortest_truncated_samples():
    ctrl = DartsController(GroupPlan("p", n_launch=6, m_keep=4, long_slots=1))
    for i, n, reason in ((0, 90, STOP), (1, 256, LENGTH), (2, 256, LENGTH), (3, 60, STOP), (4, 256, LENGTH)):
        assert not finish(ctrl, i, n, reason).done
    assert finish(ctrl, 5, 256, LENGTH).done
    assert ctrl.kept() == [0, 1, 2, 3]  # both non-truncated, then the first two truncated finishers
    stats = ctrl.stats()
    assert stats["shortfall"] == 2 and stats["kept"] == 4 and stats["discarded"] == 2


def test_aborted_samples_are_never_kept():
    ctrl = DartsController(GroupPlan("p", n_launch=3, m_keep=2, long_slots=0))
    finish(ctrl, 0, 5, ABORT)  # aborted from outside
    finish(ctrl, 1, 40)
    assert finish(ctrl, 2, 64, LENGTH).done
    assert ctrl.kept() == [1, 2]
    assert ctrl.stats() == {
        "launched": 3,
        "kept": 2,
        "discarded": 0,
        "aborted": 1,
        "pruned": 0,
        "cut": 0,
        "shortfall": 1,
    }


def test_group_that_cannot_fill_m_keeps_what_it_has():
    ctrl = DartsController(GroupPlan("p", n_launch=2, m_keep=2, long_slots=0))
    finish(ctrl, 1, 0, ABORT)
    assert finish(ctrl, 0, 30).done
    assert ctrl.kept() == [0]
    assert ctrl.stats()["shortfall"] == 1


def test_tail_pruning_aborts_exactly_the_running_rest_at_m():
    ctrl = DartsController(GroupPlan("p", n_launch=8, m_keep=3, long_slots=0))
    finish(ctrl, 4, 10)
    finish(ctrl, 6, 512, LENGTH)  # truncated: does not count towards M
    finish(ctrl, 1, 20)
    decision = finish(ctrl, 7, 30)
    assert decision.done and decision.abort == [0, 2, 3, 5]
    assert ctrl.kept() == [1, 4, 7]
    # a sample told to abort that finished anyway (race) changes nothing and triggers nothing
    assert finish(ctrl, 0, 31).abort == []
    assert finish(ctrl, 2, 0, ABORT).abort == []
    assert ctrl.kept() == [1, 4, 7]
    stats = ctrl.stats()
    assert stats == {"launched": 8, "kept": 3, "discarded": 1, "aborted": 4, "pruned": 0, "cut": 0, "shortfall": 0}
    with pytest.raises(ValueError):
        finish(ctrl, 0, 31)
    with pytest.raises(ValueError):
        finish(ctrl, 8, 1)


def test_on_progress_never_aborts_without_long_wait():
    ctrl = DartsController(GroupPlan("p", n_launch=4, m_keep=2, long_slots=1))
    finish(ctrl, 0, 5)
    assert not ctrl.prunable
    assert ctrl.on_progress([RunningSample(i, 500) for i in (1, 2, 3)]).abort == []


def progress(ctrl, length, indices):
    return ctrl.on_progress([RunningSample(i, length) for i in indices])


def test_long_wait_closes_the_long_slots_at_the_deadline():
    ctrl = DartsController(GroupPlan("p", n_launch=8, m_keep=4, long_slots=1), long_wait=2.0)
    for i, n in ((0, 10), (1, 12)):
        finish(ctrl, i, n)
    assert not ctrl.prunable  # no deadline before the K short slots are full
    finish(ctrl, 2, 15)  # K = 3 short slots full: deadline 30 tokens
    assert ctrl.prunable
    finish(ctrl, 3, 20)
    finish(ctrl, 4, 25)
    assert progress(ctrl, 29, (5, 6, 7)).abort == []
    decision = progress(ctrl, 30, (5, 6, 7))
    assert decision.abort == [5, 6, 7] and decision.done
    assert ctrl.kept() == [0, 1, 2, 4]  # 25 is the longest finished by the deadline; 20 is the middle
    assert ctrl.stats() == {
        "launched": 8,
        "kept": 4,
        "discarded": 1,
        "aborted": 3,
        "pruned": 0,
        "cut": 0,
        "shortfall": 0,
    }
    assert not ctrl.prunable


def test_long_wait_with_no_candidate_cuts_the_longest_running_sample():
    ctrl = DartsController(GroupPlan("p", n_launch=6, m_keep=3, long_slots=1), long_wait=1.5)
    finish(ctrl, 0, 10)
    finish(ctrl, 1, 20)  # deadline 30
    decision = ctrl.on_progress([RunningSample(2, 28), RunningSample(3, 30), RunningSample(4, 30), RunningSample(5, 9)])
    assert decision.abort == [2, 3, 4, 5] and decision.done and not ctrl.prunable
    assert ctrl.kept() == [0, 1, 3]  # 3 and 4 are the longest: the lower index is cut, kept truncated
    for i in (2, 3, 4, 5):  # the engine reports the stopped ones as aborted; the cut one stays kept
        finish(ctrl, i, 31, ABORT)
    assert ctrl.kept() == [0, 1, 3]
    assert ctrl.stats() == {
        "launched": 6,
        "kept": 3,
        "discarded": 0,
        "aborted": 3,
        "pruned": 0,
        "cut": 1,
        "shortfall": 1,
    }


def test_long_wait_cuts_only_the_long_slots_no_finisher_fills():
    ctrl = DartsController(GroupPlan("p", n_launch=8, m_keep=4, long_slots=2), long_wait=2.0)
    finish(ctrl, 0, 10)
    finish(ctrl, 1, 12)  # K = 2 short slots full: deadline 24
    finish(ctrl, 2, 18)  # a long candidate
    decision = progress(ctrl, 24, (3, 4, 5, 6, 7))
    assert decision.done and decision.abort == [3, 4, 5, 6, 7]
    assert ctrl.kept() == [0, 1, 2, 3]
    assert ctrl.stats()["cut"] == 1 and ctrl.stats()["shortfall"] == 1


def test_long_wait_past_the_cap_keeps_the_darts_rule():
    lengths = [100, 512, 300, 200, 512, 150, 250]
    ctrl = DartsController(GroupPlan("p", n_launch=7, m_keep=3, long_slots=1), long_wait=4.0)  # deadline 600
    assert run_group(ctrl, lengths, cap=512) == []
    assert ctrl.kept() == [0, 2, 5]


def test_long_wait_below_one_is_refused():
    with pytest.raises(ValueError, match="long_wait"):
        DartsController(GroupPlan("p", n_launch=4, m_keep=2, long_slots=1), long_wait=0.5)
    with pytest.raises(ValueError, match="long_wait"):
        DartsPolicy(8, long_wait=0.9)


def run_ticked(ctrl, lengths, cap):
    """Decode step by step: after step t the samples of length t finish (by index), then a progress report
    shows the rest at length t. Returns the step at which the group was done and the aborted indices."""
    running, aborted, done_at = set(range(len(lengths))), [], None
    for t in range(1, cap + 1):
        for i in sorted(running):
            if i in running and min(lengths[i], cap) == t:
                running.discard(i)
                decision = finish(ctrl, i, t, LENGTH if lengths[i] >= cap else STOP)
                running -= set(decision.abort)
                aborted += decision.abort
        if running and ctrl.prunable:
            decision = progress(ctrl, t, sorted(running))
            running -= set(decision.abort)
            aborted += decision.abort
        if ctrl.done and done_at is None:
            done_at = t
        if not running:
            break
    for i in aborted:
        finish(ctrl, i, 0, ABORT)
    return done_at, aborted


def random_group(rng, min_long_slots: int) -> tuple[int, int, int, list[int]]:
    """M in [1 + min_long_slots, 8], N in [M, 2M], long slots in [min_long_slots, 2], heavy-tailed lengths."""
    m = int(rng.integers(1 + min_long_slots, 9))
    n = int(rng.integers(m, 2 * m + 1))
    long_slots = int(rng.integers(min_long_slots, min(2, m - min_long_slots) + 1))
    lengths = [int(x) for x in np.round(np.exp(rng.standard_t(3.5, size=n) * 0.8 + 5.5)).clip(1)]
    return m, n, long_slots, lengths


def assert_accounted(ctrl, m: int, n: int, aborted: list[int]) -> None:
    """M kept, every launched sample counted once, the aborted ones counted and not kept unless cut."""
    kept, stats = ctrl.kept(), ctrl.stats()
    cut = set(kept) & set(aborted)
    assert len(kept) == m
    assert stats["kept"] + stats["discarded"] + stats["aborted"] + stats["pruned"] == n
    assert stats["aborted"] == len(aborted) - len(cut) and stats["cut"] == len(cut)


def test_simulated_long_wait_keeps_the_k_shortest_and_bounds_the_wait():
    rng = np.random.default_rng(1)
    cap = 1024
    for _ in range(300):
        m, n, long_slots, lengths = random_group(rng, min_long_slots=1)
        wait = float(rng.choice([1.0, 1.5, 2.0, 4.0]))
        ctrl = DartsController(GroupPlan("p", n, m, long_slots), long_wait=wait)
        done_at, aborted = run_ticked(ctrl, lengths, cap)
        assert_accounted(ctrl, m, n, aborted)
        kept = ctrl.kept()
        stopped = sorted((i for i in range(n) if lengths[i] < cap), key=lambda i: (lengths[i], i))
        if len(stopped) < m:
            continue
        k = m - long_slots
        short, rest = stopped[:k], stopped[k:]
        deadline = int(np.ceil(wait * lengths[short[-1]]))
        by_deadline = [i for i in rest if lengths[i] <= deadline]
        running = [i for i in range(n) if min(lengths[i], cap) > deadline]  # at the deadline, by index
        if len(by_deadline) >= long_slots or not running:  # finishers fill every long slot, or no deadline comes
            long = by_deadline[len(by_deadline) - long_slots :] if len(by_deadline) >= long_slots else rest[:long_slots]
            assert sorted(kept) == sorted(short + long) and ctrl.stats()["cut"] == 0
        else:  # long slots no finisher filled take running samples (all shown at the deadline's length), cut there
            cut = running[: long_slots - len(by_deadline)]
            assert ctrl.stats()["cut"] == len(cut) == ctrl.stats()["shortfall"]
            assert sorted(kept) == sorted(short + by_deadline + cut)
        assert done_at <= deadline  # never waits past the deadline


def test_simulated_groups_keep_m_and_account_for_every_sample():
    rng = np.random.default_rng(0)
    cap = 1024
    for _ in range(300):
        m, n, long_slots, lengths = random_group(rng, min_long_slots=0)
        ctrl = DartsController(GroupPlan("p", n, m, long_slots))
        aborted = run_group(ctrl, lengths, cap=cap)
        assert_accounted(ctrl, m, n, aborted)
        kept, stats = ctrl.kept(), ctrl.stats()
        stopped = sorted(i for i in range(n) if lengths[i] < cap and i not in aborted)
        truncated_kept = [i for i in kept if lengths[i] >= cap]
        assert stats["shortfall"] == len(truncated_kept) == max(0, m - len(stopped))
        if long_slots == 0:
            # shortest-M (ties by index here): exactly the first non-truncated finishers
            expected = sorted(sorted(stopped, key=lambda i: (lengths[i], i))[:m])
            assert sorted(set(kept) - set(truncated_kept)) == expected
        elif stats["shortfall"] == 0:
            by_len = sorted(stopped, key=lambda i: (lengths[i], i))
            k = m - long_slots
            assert sorted(kept) == sorted(by_len[:k] + by_len[len(by_len) - long_slots :])


def _policy_with_history(**kwargs):
    """DARTS as the paper has it (no spare gate), with 16 prompts' length histories."""
    policy = DartsPolicy(8, spare_gate=False, **kwargs)
    rng = np.random.default_rng(3)
    for p in range(16):
        policy.observe(f"q{p}", list(rng.normal(500, 10 + 40 * p, size=8).clip(1).astype(int)))
    return policy


def test_darts_policy_warmup_is_uniform_without_long_slots():
    policy = _policy_with_history(warmup_steps=2)
    prompts = [f"q{p}" for p in range(16)]
    for _ in range(2):
        plans = policy.plan(prompts)
        assert [pl.n_launch for pl in plans] == [12] * 16
        assert all(pl.long_slots == 0 and pl.m_keep == 8 for pl in plans)
    plans = policy.plan(prompts)
    budgets = [pl.n_launch for pl in plans]
    assert sum(budgets) == 12 * 16 and len(set(budgets)) > 1


def test_darts_policy_allocates_by_variance_and_prunes_the_tail_at_the_cap():
    policy = _policy_with_history(warmup_steps=0, long_slots=2)
    prompts = [f"q{p}" for p in range(16)] + ["new"]
    plans = policy.plan(prompts)
    budgets = [pl.n_launch for pl in plans]
    assert sum(budgets) == round(1.5 * 8 * 17)
    assert all(8 <= b <= 16 for b in budgets)
    stds = [policy.lengths.std(p) for p in prompts]
    ranked = np.array(budgets)[np.argsort(stds)]
    assert np.all(np.diff(ranked) >= 0) and ranked[-1] > ranked[0]  # more for a wider spread
    assert 16 in budgets
    for pl in plans:
        assert pl.long_slots == (0 if pl.n_launch == 16 else 2)
    # the unseen prompt is given the mean std of the known ones
    assert stds[16] == pytest.approx(np.mean(stds[:16]))


def test_no_tail_pruning_when_budgets_are_fixed():
    policy = DartsPolicy(8, avg_redundancy=1.25, n_min=10, n_max=10, warmup_steps=0)
    plans = policy.plan(["a", "b"])
    assert [(pl.n_launch, pl.long_slots) for pl in plans] == [(10, 1), (10, 1)]
    assert policy.plan([]) == []
    with pytest.raises(ValueError):
        DartsPolicy(8, n_min=7)


def test_tie_priority_orders_long_prompts_first():
    policy = DartsPolicy(4, warmup_steps=0, priority="longest_first", max_tokens=2048)
    assert [pl.priority for pl in policy.plan(["a", "b"])] == [0, 0]  # no history yet
    policy.observe("short", [50, 60, 55, 70])
    policy.observe("long", [900, 1500, 700, 2048])
    short, long, new = policy.plan(["short", "long", "new"])
    assert long.priority < new.priority < short.priority < 0
    flipped = DartsPolicy(4, priority="shortest_first", max_tokens=2048)
    flipped.observe("short", [50, 60, 55, 70])
    assert flipped.plan(["short"])[0].priority == -short.priority
    with pytest.raises(ValueError):
        DartsPolicy(4, priority="longest_first")
