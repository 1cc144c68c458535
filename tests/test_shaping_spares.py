"""The spare gate: exact order statistics, hand-derived values, and DARTS plans that drop spares without a tail."""

import numpy as np
import pytest
from rl.shaping.darts import DartsPolicy
from rl.shaping.order_stats import (
    expected_order_stat,
    expected_order_stats,
    expected_order_stats_by_n,
    mc_expected_order_stat,
)
from rl.shaping.spares import spare_value, spare_values, worthwhile_launch


def test_expected_order_stats_agree_with_the_scalar_formula_and_monte_carlo():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 400, size=50).tolist()
    got = expected_order_stats(lengths, 5, 9)
    assert got == pytest.approx([expected_order_stat(lengths, k, 9) for k in range(1, 6)], rel=1e-12)
    pool = np.asarray(lengths)
    mc = mc_expected_order_stat(lambda r, shape: r.choice(pool, size=shape), 5, 9, rng, trials=40_000)
    assert got[-1] == pytest.approx(mc, rel=0.01)


def test_order_statistics_for_several_launches_at_once_match_monte_carlo_row_by_row():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 400, size=40).tolist()
    pool = np.asarray(lengths)
    table = expected_order_stats_by_n(lengths, 4, [4, 6, 9])
    assert table.shape == (3, 4)
    for row, n in zip(table, [4, 6, 9], strict=True):
        for k in (1, 4):
            mc = mc_expected_order_stat(lambda r, shape: r.choice(pool, size=shape), k, n, rng, trials=40_000)
            assert row[k - 1] == pytest.approx(mc, rel=0.02)
    with pytest.raises(ValueError):
        expected_order_stats_by_n(lengths, 4, [6, 3])  # a launch below the kept count


def test_spare_values_of_a_range_are_each_launch_on_its_own():
    lengths = [12, 15, 14, 90, 16, 13, 200, 17]
    values = spare_values(lengths, 4, range(4, 9))
    assert values[4] == pytest.approx(0.0)
    assert values == pytest.approx({n: spare_value(lengths, 4, n) for n in range(4, 9)})
    assert max(values.values()) > 0  # a tail: some spares pay for themselves


def test_equal_lengths_make_every_spare_a_pure_cost():
    # no tail: the group is no shorter, and each spare adds one sample's tokens: value = -(n - m) / m
    for n in range(4, 9):
        assert spare_value([30] * 10, 4, n) == pytest.approx(-(n - 4) / 4)


def test_two_point_lengths_by_hand():
    # X = 10 or 100 with equal odds, keep 1 of 2: E[min] = 10 + 90/4 = 32.5 against E[X] = 55;
    # tokens: the kept one plus the stopped one, both 32.5 on average
    value = spare_value([10, 100], 1, 2)
    assert value == pytest.approx((1 - 32.5 / 55) - (65 / 55 - 1))


def test_worthwhile_launch_keeps_spares_for_a_tail_only():
    rng = np.random.default_rng(1)
    flat = rng.normal(17, 3, size=64).round().clip(1).astype(int).tolist()
    tail = np.minimum(np.exp(rng.normal(4.8, 0.8, size=64)), 512).round().astype(int).tolist()
    assert worthwhile_launch(flat, 8, 8, 12) == 8
    assert worthwhile_launch(flat, 8, 10, 12) == 10  # never below the user's floor
    assert worthwhile_launch(tail, 8, 8, 12) == 12
    assert worthwhile_launch([], 8, 8, 12) == 12  # nothing observed: the budget stands
    with pytest.raises(ValueError, match="floor"):
        worthwhile_launch(flat, 8, 7, 12)


def _policies(lengths_of) -> tuple[DartsPolicy, DartsPolicy]:
    """The gated policy and the paper's, both having seen ``lengths_of(p)`` for prompts q0..q7."""
    gated, paper = DartsPolicy(8), DartsPolicy(8, spare_gate=False)
    for p in range(8):
        lengths = lengths_of(p)
        gated.observe(f"q{p}", lengths)
        paper.observe(f"q{p}", lengths)
    return gated, paper


def test_darts_plans_no_spares_where_lengths_show_no_tail():
    rng = np.random.default_rng(2)
    prompts = [f"q{p}" for p in range(8)] + ["unseen"]
    gated, paper = _policies(lambda p: rng.integers(18 - p, 23 + p, size=8).tolist())  # bounded: no tail
    allocated = [pl.n_launch for pl in paper.plan(prompts)]
    launched = [pl.n_launch for pl in gated.plan(prompts)]
    assert sum(allocated) == round(1.5 * 8 * 9)  # DARTS spends its whole budget on flat prompts too
    assert launched[:8] == [8] * 8  # the gate spends none there
    assert launched[8] == 8  # an unseen prompt is judged by all prompts' lengths
    fresh = DartsPolicy(8, warmup_steps=0)
    assert [pl.n_launch for pl in fresh.plan(prompts)] == [12] * 9  # nothing seen: the budget stands


def test_darts_plans_keep_spares_for_a_tail():
    rng = np.random.default_rng(3)

    def lengths_of(p: int) -> list[int]:
        if p < 4:
            return rng.normal(20, 3, size=8).round().clip(1).astype(int).tolist()
        return np.minimum(np.exp(rng.normal(4.5, 1.0, size=8)), 512).round().astype(int).tolist()

    prompts = [f"q{p}" for p in range(8)]
    gated, paper = _policies(lengths_of)
    allocated = [pl.n_launch for pl in paper.plan(prompts)]
    launched = [pl.n_launch for pl in gated.plan(prompts)]
    assert all(n > 8 for n in allocated[4:])
    assert all(8 < n <= a for n, a in zip(launched[4:], allocated[4:], strict=True))  # tails keep spares
    assert launched[:4] == [8] * 4
