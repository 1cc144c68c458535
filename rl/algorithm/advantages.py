"""Advantage estimators for outcome rewards: one scalar per response, broadcast over its tokens by the loss.

- ``grpo``: ``(r - group mean) / (group std + eps)`` (Shao et al. 2024, DeepSeekMath).
- ``drgrpo``: ``r - group mean``, no std division (Liu et al. 2025, "Understanding R1-Zero-Like Training").
- ``rloo``: ``r_i - mean of the other rewards of the group`` (Ahmadian et al. 2024, leave-one-out baseline).
- ``reinforce++``: ``(r - batch mean) / (batch std + eps)`` over every response of the batch (Hu 2025).
- ``reinforce++-baseline``: subtract the group mean, then divide by the batch std of those centred values.
- ``grpo-batch``: subtract the group mean, then divide by the batch std of the rewards themselves (TRL's
  ``scale_rewards="batch"``; ScaleRL's batch-level normalization, Khatri et al. 2025, arXiv 2510.13786).

Standard deviations are population ones (``ddof=0``). A group whose rewards are all equal gets exact zeros
from every estimator that subtracts a group baseline.
"""

from __future__ import annotations

import numpy as np

ESTIMATORS: tuple[str, ...] = ("grpo", "drgrpo", "rloo", "reinforce++", "reinforce++-baseline", "grpo-batch")


def group_advantages(rewards: list[float], normalize_std: bool = True, eps: float = 1e-6) -> list[float]:
    """``(r - mean(r)) / (std(r) + eps)``; all zeros when every reward in the group is equal."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.size == 0:
        return []
    centered = _centered(r)
    if normalize_std:
        centered = centered / (r.std() + eps)
    return centered.tolist()


def is_group_local(estimator: str) -> bool:
    """True when a group's advantages depend only on that group's rewards (not on the rest of the batch)."""
    _check(estimator)
    return estimator in ("grpo", "drgrpo", "rloo")


def compute_advantages(estimator: str, group_rewards: list[list[float]], eps: float = 1e-6) -> list[list[float]]:
    """Advantages for a whole batch of groups, same nesting as ``group_rewards``."""
    _check(estimator)
    if not group_rewards:
        return []
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


def _centered(r: np.ndarray) -> np.ndarray:
    """``r - mean(r)``, exactly zero when all entries are equal (the float mean may be off by an ulp)."""
    if r.size == 0 or np.all(r == r[0]):
        return np.zeros_like(r)
    return r - r.mean()


def _check(estimator: str) -> None:
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; expected one of {', '.join(ESTIMATORS)}")
