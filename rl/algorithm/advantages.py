"""Advantage estimators for outcome rewards: one scalar per response, broadcast over its tokens by the loss.

- ``grpo``: ``(r - group mean) / (group std + eps)`` (Shao et al. 2024, DeepSeekMath).
- ``drgrpo``: ``r - group mean``, no std division (Liu et al. 2025, "Understanding R1-Zero-Like Training").
- ``rloo``: ``r_i - mean of the other rewards of the group`` (Ahmadian et al. 2024, leave-one-out baseline).
- ``reinforce++``: ``(r - batch mean) / (batch std + eps)`` over every response of the batch (Hu 2025).
- ``reinforce++-baseline``: subtract the group mean, then divide by the batch std of those centred values.
- ``grpo-batch``: subtract the group mean, then divide by the batch std of the rewards themselves (TRL's
  ``scale_rewards="batch"``; ScaleRL's batch-level normalization, Khatri et al. 2025, arXiv 2510.13786).
- ``gdpo``: each reward function's values normalized within their group (``(r_k - group mean) / (group std + eps)``),
  the weighted sum of those, then ``(sum - batch mean) / (batch std + eps)`` (GDPO, Liu et al. 2026, arXiv
  2601.05242; TRL's ``multi_objective_aggregation="normalize_then_sum"``): a function whose values vary little in a
  group still moves the advantage as much as one that varies a lot. A function's missing values (``None``: it did not
  score the sample, or failed) are left out of its group's statistics and add nothing; a sample no function scored
  gets 0 and is left out of the batch's.

Standard deviations are population ones (``ddof=0``). A group whose rewards are all equal gets exact zeros
from every estimator that subtracts a group baseline.
"""

from __future__ import annotations

import numpy as np

ESTIMATORS: tuple[str, ...] = ("grpo", "drgrpo", "rloo", "reinforce++", "reinforce++-baseline", "grpo-batch", "gdpo")


def is_group_local(estimator: str) -> bool:
    """True when a group's advantages depend only on that group's rewards (not on the rest of the batch)."""
    _check(estimator)
    return estimator in ("grpo", "drgrpo", "rloo")


def compute_advantages(
    estimator: str,
    group_rewards: list[list[float]],
    eps: float = 1e-6,
    function_rewards: list[list[list[float | None]]] | None = None,
    weights: list[float] | None = None,
) -> list[list[float]]:
    """Advantages for a whole batch of groups, same nesting as ``group_rewards``; ``gdpo`` reads each group's
    ``function_rewards`` (one list per reward function, one value per sample) and the functions' ``weights``."""
    _check(estimator)
    if not group_rewards:
        return []
    if estimator == "gdpo":
        if function_rewards is None or weights is None:
            raise ValueError("gdpo needs each reward function's values and weights")
        return _gdpo(function_rewards, weights, eps)
    groups = [np.asarray(g, dtype=np.float64) for g in group_rewards]
    if estimator == "grpo":
        out = [_centered(g) / (g.std() + eps) if g.size else g for g in groups]
    elif estimator == "drgrpo":
        out = [_centered(g) for g in groups]
    elif estimator == "rloo":
        # r_i - (sum - r_i) / (n - 1)  ==  n / (n - 1) * (r_i - mean)
        out = [_centered(g) * (g.size / (g.size - 1)) if g.size > 1 else np.zeros_like(g) for g in groups]
    else:
        if estimator == "reinforce++":
            flat = _centered(np.concatenate(groups) if groups else np.zeros(0))
            out = np.split(flat, np.cumsum([g.size for g in groups])[:-1])
        else:
            out = [_centered(g) for g in groups]
        scaled_by = np.concatenate(groups if estimator == "grpo-batch" else out)
        std = scaled_by.std() if scaled_by.size else 0.0
        out = [a / (std + eps) for a in out]
    return [a.tolist() for a in out]


def _gdpo(function_rewards: list[list[list[float | None]]], weights: list[float], eps: float) -> list[list[float]]:
    sums, scored = [], []
    for values in function_rewards:
        r = np.array([[np.nan if v is None else v for v in f] for f in values], dtype=np.float64)
        r = r.reshape(len(weights), -1)
        total = np.zeros(r.shape[1])
        for weight, f in zip(weights, r, strict=True):
            valid = ~np.isnan(f)
            if valid.any():
                total[valid] += weight * _centered(f[valid]) / (f[valid].std() + eps)
        sums.append(total)
        scored.append(~np.isnan(r).all(axis=0))
    kept = np.concatenate([total[m] for total, m in zip(sums, scored, strict=True)])
    normalized = iter(_centered(kept) / (kept.std() + eps) if kept.size else kept)
    return [[float(next(normalized)) if m else 0.0 for m in mask] for mask in scored]


def _centered(r: np.ndarray) -> np.ndarray:
    """``r - mean(r)``, exactly zero when all entries are equal (the float mean may be off by an ulp)."""
    if r.size == 0 or np.all(r == r[0]):
        return np.zeros_like(r)
    return r - r.mean()


def _check(estimator: str) -> None:
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; expected one of {', '.join(ESTIMATORS)}")
