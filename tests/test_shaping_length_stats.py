"""Per-prompt length statistics: DARTS's std EMA and TIE's log-t model."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from rl.shaping.length_stats import LengthStats, LogT, fit_log_t, tie_beta
from scipy import stats as sps


def test_std_ema_per_prompt_and_fallbacks():
    stats = LengthStats(alpha=0.3)
    assert stats.std("p") is None  # nothing known yet
    stats.observe("a", [10, 20])
    first = np.std([10, 20], ddof=1)
    assert stats.std("a") == pytest.approx(first)  # first observation taken as is
    stats.observe("a", [10, 30])
    smoothed = 0.3 * np.std([10, 30], ddof=1) + 0.7 * first
    assert stats.std("a") == pytest.approx(smoothed)
    stats.observe("b", [100, 100, 100])
    assert stats.std("b") == 0.0
    assert stats.std("unseen") == pytest.approx((smoothed + 0.0) / 2)
    stats.observe("c", [7])  # a single length carries no spread
    assert stats.std("c") == pytest.approx((smoothed + 0.0) / 2)


def test_fit_matches_scipy_mle_and_recovers_parameters():
    rng = np.random.default_rng(0)
    law = LogT(mu=5.0, sigma=0.6)
    small = law.sample(rng, 40)
    fit = fit_log_t(small)
    df, loc, scale = sps.t.fit(np.log(small), fix_df=3.5)
    assert fit.nu == df == 3.5
    assert fit.mu == pytest.approx(loc, abs=1e-3)
    assert fit.sigma == pytest.approx(scale, abs=1e-3)
    big = fit_log_t(law.sample(rng, 20_000))
    assert big.mu == pytest.approx(5.0, abs=0.03)
    assert big.sigma == pytest.approx(0.6, abs=0.03)


def test_fit_of_identical_lengths_is_proper():
    fit = fit_log_t([100, 100, 100])
    assert fit.mu == pytest.approx(np.log(100))
    assert fit.sigma == pytest.approx(0.05)
    with pytest.raises(ValueError):
        fit_log_t([])


def test_censored_moments_match_monte_carlo():
    rng = np.random.default_rng(1)
    law, cap = LogT(mu=5.3, sigma=0.8), 2048
    draws = law.sample(rng, 400_000, cap=cap)
    assert law.mean(cap) == pytest.approx(draws.mean(), rel=0.01)
    worst = np.sort(draws)[int(0.9 * draws.size) :]
    assert law.cvar(cap) == pytest.approx(worst.mean(), rel=0.01)
    assert law.tail_prob(cap) == pytest.approx(np.mean(draws >= cap), rel=0.05)
    assert law.quantile(0.5) == pytest.approx(np.exp(5.3))
    assert law.quantile(0.9999, cap=cap) == cap
    assert law.tie(cap, beta=0.3) == pytest.approx(law.mean(cap) + 0.3 * law.cvar(cap))


def test_cvar_is_cap_when_the_tail_is_all_censored():
    law = LogT(mu=np.log(5000), sigma=0.1)
    assert law.cvar(1000) == pytest.approx(1000)
    assert law.mean(1000) == pytest.approx(1000, rel=1e-3)


def test_tie_ranks_a_heavier_tail_above_an_equal_median():
    cap = 4096
    narrow, wide = LogT(mu=5.0, sigma=0.2), LogT(mu=5.0, sigma=1.0)
    assert narrow.quantile(0.5) == pytest.approx(wide.quantile(0.5))
    assert wide.tail_prob(cap) > narrow.tail_prob(cap)
    assert wide.tie(cap, 0.1) > narrow.tie(cap, 0.1) + 50


def test_tie_beta_follows_queue_pressure():
    assert tie_beta(0, 8) == 0.1
    assert tie_beta(20, 8) == pytest.approx(0.25)
    assert tie_beta(1000, 8) == 0.5


def test_log_t_per_prompt_with_window_and_prior():
    stats = LengthStats(history=16)
    assert stats.log_t("x") is None
    for _ in range(4):
        stats.observe("a", [3000, 3200, 2900, 3100])
    for _ in range(4):
        stats.observe("a", [100, 120, 90, 110])  # the window now holds only these
    assert np.exp(stats.log_t("a").mu) == pytest.approx(105, rel=0.1)
    stats.observe("b", [1000, 1500, 800, 1200])
    a, b = stats.log_t("a"), stats.log_t("b")
    prior = stats.log_t("unseen")
    assert prior.mu == pytest.approx((a.mu + b.mu) / 2)
    assert prior.sigma == pytest.approx((a.sigma + b.sigma) / 2)


def test_fits_are_made_when_read_on_the_window_as_it_is_then():
    stats = LengthStats(history=8)
    stats.observe("a", [100, 120, 90, 110])
    stats.observe("b", [1000, 1500, 800, 1200])
    assert stats.log_t("a") == fit_log_t([100, 120, 90, 110])
    stats.observe("a", [300, 320, 290, 310])  # after a read: the next read refits on the new window
    stats.observe("a", [50, 60, 55, 65])  # the window keeps the last 8 lengths
    assert stats.log_t("a") == fit_log_t([300, 320, 290, 310, 50, 60, 55, 65])
    assert stats.log_t("b") == fit_log_t([1000, 1500, 800, 1200])
    a, b = stats.log_t("a"), stats.log_t("b")
    assert stats.log_t("unseen").mu == pytest.approx((a.mu + b.mu) / 2)


def test_statistics_pickled_with_fits_pending_or_before_lazy_fits_read_the_same():
    stats = LengthStats()
    stats.observe("a", [100, 120, 90, 110])
    stats.log_t("a")
    stats.observe("a", [200, 220])  # a fit pending at the checkpoint
    restored = pickle.loads(pickle.dumps(stats))
    assert restored.log_t("a") == stats.log_t("a") == fit_log_t([100, 120, 90, 110, 200, 220])

    older = LengthStats()  # a checkpoint written when every observe refitted: its fits are current, no pending set
    older.observe("b", [40, 50, 60])
    older.log_t("b")
    state = dict(older.__dict__)
    del state["_unfitted"]
    loaded = LengthStats.__new__(LengthStats)
    loaded.__setstate__(state)
    loaded.observe("b", [70, 80])
    assert loaded.log_t("b") == fit_log_t([40, 50, 60, 70, 80])
