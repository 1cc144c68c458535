"""Whether spare samples pay for themselves: the launch that the prompt's own lengths say is worth it.

A group launches n samples and stops once its M-th finishes (SART's early stop). Against launching M, its spares

- shorten the group, in tokens of its last kept sample: ``time_gain = 1 - E[X_(M:n)] / E[X_(M:M)]``;
- add generated tokens, the M finished ones plus the n - M stopped at X_(M:n):
  ``token_cost = (sum_{k<=M} E[X_(k:n)] + (n - M) E[X_(M:n)]) / (M E[X]) - 1`` (negative when cutting the tail
  saves more tokens than the spares spend).

On an engine bound by its decode steps (a GPU, a small model) time follows the longest sample; on one bound by
throughput (the CPU) it follows the tokens. Spares are worth launching where they gain more of the first than they
cost of the second: ``value(n) = time_gain - token_cost``, with ``value(M) = 0``. A prompt whose lengths have no
tail (every sample about as long as the others) gets no spares; one with a long tail keeps them. The expectations
are exact over the empirical distribution of the prompt's observed lengths (``order_stats``); they are of the
early-stop group, so long slots and the ``long_wait`` deadline are left out of the estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import special


def expected_order_stats(lengths: Sequence[int], m: int, n: int) -> np.ndarray:
    """``E[X_(k:n)]`` for k = 1..m, of n draws from the empirical distribution of ``lengths`` (non-negative)."""
    if not 1 <= m <= n:
        raise ValueError(f"need 1 <= m <= n, got m={m}, n={n}")
    values, counts = np.unique(np.asarray(lengths, dtype=float), return_counts=True)
    if values.size == 0 or values[0] < 0:
        raise ValueError("lengths must be non-empty and non-negative")
    below = np.concatenate(([0.0], np.cumsum(counts)[:-1] / counts.sum()))  # F just below each value
    widths = np.diff(values, prepend=0.0)
    k = np.arange(1, m + 1)[:, None]
    survival = 1.0 - special.betainc(k, n - k + 1, below[None, :])
    return survival @ widths


def spare_value(lengths: Sequence[int], m: int, n: int) -> float:
    """``time_gain - token_cost`` of launching n instead of m (module docstring); 0 for n == m."""
    spread = expected_order_stats(lengths, m, n)
    alone = expected_order_stats(lengths, m, m)
    if alone[-1] <= 0:
        return 0.0
    time_gain = 1.0 - spread[-1] / alone[-1]
    token_cost = (spread.sum() + (n - m) * spread[-1]) / alone.sum() - 1.0
    return float(time_gain - token_cost)


def worthwhile_launch(lengths: Sequence[int], m: int, floor: int, budget: int) -> int:
    """The launch in ``[floor, budget]`` with the highest ``spare_value`` (the smallest on ties).

    ``floor`` (>= m) is the user's minimum; without observed lengths the budget stands.
    """
    if not m <= floor <= budget:
        raise ValueError(f"need m <= floor <= budget, got {m}, {floor}, {budget}")
    if not lengths or floor == budget:
        return budget
    values = {n: spare_value(lengths, m, n) for n in range(floor, budget + 1)}
    return max(values, key=lambda n: (values[n], -n))
