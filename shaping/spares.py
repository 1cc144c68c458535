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
are exact over the empirical distribution of the prompt's observed lengths (``order_stats.expected_order_stats_by_n``);
they are of the early-stop group, so long slots and the ``long_wait`` deadline are left out of the estimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rl.shaping.order_stats import expected_order_stats_by_n


def spare_values(lengths: Sequence[int], m: int, launches: Iterable[int]) -> dict[int, float]:
    """``time_gain - token_cost`` of launching each n of ``launches`` instead of m (module docstring); 0 for n == m."""
    launches = list(launches)
    table = expected_order_stats_by_n(lengths, m, [m, *launches])
    alone = table[0]  # the group without spares: the same for every n
    if alone[-1] <= 0:
        return {n: 0.0 for n in launches}
    values = {}
    for n, spread in zip(launches, table[1:], strict=True):
        time_gain = 1.0 - spread[-1] / alone[-1]
        token_cost = (spread.sum() + (n - m) * spread[-1]) / alone.sum() - 1.0
        values[n] = float(time_gain - token_cost)
    return values


def spare_value(lengths: Sequence[int], m: int, n: int) -> float:
    """``spare_values`` of one launch."""
    return spare_values(lengths, m, [n])[n]


def worthwhile_launch(lengths: Sequence[int], m: int, floor: int, budget: int) -> int:
    """The launch in ``[floor, budget]`` with the highest ``spare_value`` (the smallest on ties).

    ``floor`` (>= m) is the user's minimum; without observed lengths the budget stands.
    """
    if not m <= floor <= budget:
        raise ValueError(f"need m <= floor <= budget, got {m}, {floor}, {budget}")
    if not lengths or floor == budget:
        return budget
    values = spare_values(lengths, m, range(floor, budget + 1))
    return max(values, key=lambda n: (values[n], -n))
