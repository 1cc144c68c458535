"""Off-policy importance weights and the effective sample size (ESS) they leave.

VCPO (Variance-Controlled Off-Policy RL, arXiv 2602.17616) watches the sequence-level weights
``w_i = exp(sum_t log pi_prox(y_t) - log pi_behav(y_t))``: a sharp drop of the ESS ratio
``(sum w)^2 / (n sum w^2)`` precedes collapse, and scaling the learning rate by ``sqrt(ESS ratio)`` keeps
AdamW-style updates stable.
"""

from __future__ import annotations

import math

import torch

# Log-weights are clamped to +-MAX_LOG_WEIGHT so that w and w^2 stay finite in float64 (exp(709) is the limit).
MAX_LOG_WEIGHT = 300.0


def token_weights(proximal: torch.Tensor, behaviour: torch.Tensor) -> torch.Tensor:
    """Per-token weights ``exp(proximal - behaviour)`` in float64, detached, shape ``[B, T]``."""
    log_w = (proximal.detach().double() - behaviour.detach().double()).clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)
    return torch.exp(log_w)


def sequence_weights(proximal: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence weights ``exp(sum over masked tokens of proximal - behaviour)`` in float64, detached, ``[B]``.

    A row without masked tokens gets weight 1.
    """
    gap = torch.where(mask.bool(), proximal.detach().double() - behaviour.detach().double(), 0.0)
    return torch.exp(gap.sum(-1).clamp(-MAX_LOG_WEIGHT, MAX_LOG_WEIGHT))


def ess_ratio(sum_w: float, sum_w2: float, n: float) -> float:
    """ESS over sample count, ``(sum w)^2 / (n * sum w^2)`` in ``(0, 1]``; 1.0 when there are no samples."""
    if n <= 0:
        return 1.0
    if sum_w2 <= 0:
        return 0.0
    return sum_w * sum_w / (n * sum_w2)


def ess_lr_scale(ess: float, floor: float = 0.0) -> float:
    """Learning-rate multiplier ``max(sqrt(ess), floor)``: VCPO's sqrt scaling for AdamW (arXiv 2602.17616)."""
    return max(math.sqrt(max(ess, 0.0)), floor)
