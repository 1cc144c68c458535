"""Order statistics of response lengths and DARTS's rollout-time cost model.

Launching N samples and stopping once M have finished costs the M-th shortest of N lengths, X_(M).
Its CDF is SART's formula (papers.md §2.2)

    F_{X(M)}(x; N) = sum_{i=M..N} C(N, i) F(x)^i (1 - F(x))^(N-i) = I_{F(x)}(M, N - M + 1),

and for a non-negative X, E[X_(M)] = integral over x >= 0 of (1 - F_{X(M)}(x; N)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import integrate, special


def order_stat_cdf(p: ArrayLike, m: int | np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """P(X_(m) <= x) of n i.i.d. draws, given p = F(x) (``m`` and ``n`` may be arrays of ranks and draw counts,
    broadcast against ``p``; every rank must be at most every draw count)."""
    _check(int(np.min(m)), int(np.min(n)))
    _check(int(np.max(m)), int(np.min(n)))
    return special.betainc(m, n - m + 1, np.clip(np.asarray(p, dtype=float), 0.0, 1.0))


def expected_order_stat(lengths: ArrayLike, m: int, n: int) -> float:
    """E[X_(m)] of n draws from the empirical distribution of ``lengths`` (exact, lengths >= 0)."""
    return float(expected_order_stats(lengths, m, n)[-1])


def expected_order_stats(lengths: ArrayLike, m: int, n: int) -> np.ndarray:
    """E[X_(k)] for k = 1..m of n draws from the empirical distribution of ``lengths`` (exact, lengths >= 0)."""
    return expected_order_stats_by_n(lengths, m, [n])[0]


def expected_order_stats_by_n(lengths: ArrayLike, m: int, ns: Sequence[int]) -> np.ndarray:
    """``expected_order_stats(lengths, m, n)`` for each n of ``ns``, one row each, in one vectorized pass."""
    values, counts = np.unique(np.asarray(lengths, dtype=float), return_counts=True)
    if values.size == 0 or values[0] < 0:
        raise ValueError("lengths must be non-empty and non-negative")
    below = np.concatenate(([0.0], np.cumsum(counts)[:-1] / counts.sum()))  # F just below each distinct value
    # F is flat between distinct values: integrate the survival function of each X_(k) piece by piece.
    widths = np.diff(values, prepend=0.0)
    ranks = np.arange(1, m + 1)[None, :, None]
    draws = np.asarray(ns)[:, None, None]
    survival = 1.0 - order_stat_cdf(below[None, None, :], ranks, draws)
    return survival @ widths


def expected_order_stat_cdf(cdf: Callable[[np.ndarray], ArrayLike], m: int, n: int, cap: float) -> float:
    """E[min(X_(m), cap)] of n draws from a parametric length law with CDF ``cdf`` (numerical integral)."""
    _check(m, n)
    value, _ = integrate.quad(lambda x: 1.0 - float(order_stat_cdf(cdf(np.asarray(x)), m, n)), 0.0, cap, limit=200)
    return float(value)


def mc_expected_order_stat(
    draw: Callable[[np.random.Generator, tuple[int, int]], np.ndarray],
    m: int,
    n: int,
    rng: np.random.Generator,
    trials: int = 20_000,
) -> float:
    """Monte-Carlo E[X_(m)]: ``draw(rng, (trials, n))`` lengths, mean of each row's m-th smallest."""
    _check(m, n)
    samples = np.asarray(draw(rng, (trials, n)), dtype=float)
    return float(np.partition(samples, m - 1, axis=1)[:, m - 1].mean())


def rollout_time(lengths: ArrayLike, ptl: Callable[[int], float], stop_after: int | None = None) -> float:
    """DARTS's cost model ``T = sum_m (l_[m] - l_[m-1]) * PTL(N - m + 1)`` for one pool of N samples.

    ``l_[m]`` is the m-th shortest length (``l_[0] = 0``) and ``ptl(b)`` the per-token decode latency
    with ``b`` sequences still running. ``stop_after=M`` ends the sum at the M-th finish (early stop:
    the rest are aborted then).
    """
    sorted_lengths = np.sort(np.asarray(lengths, dtype=float))
    n = sorted_lengths.size
    last = n if stop_after is None else min(stop_after, n)
    steps = np.diff(sorted_lengths[:last], prepend=0.0)
    return float(sum(step * ptl(n - m) for m, step in enumerate(steps)))


def expected_rollout_time(
    lengths: ArrayLike, n: int, ptl: Callable[[int], float], stop_after: int | None = None
) -> float:
    """E[rollout_time] of n draws from the empirical distribution of ``lengths``.

    The cost is linear in the order statistics, so its expectation uses E[X_(m)] term by term.
    """
    last = n if stop_after is None else min(stop_after, n)
    means = [expected_order_stat(lengths, m, n) for m in range(1, last + 1)]
    steps = np.diff(means, prepend=0.0)
    return float(sum(step * ptl(n - m) for m, step in enumerate(steps)))


def _check(m: int, n: int) -> None:
    if not 1 <= m <= n:
        raise ValueError(f"need 1 <= m <= n, got m={m}, n={n}")
