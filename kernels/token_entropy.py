"""Entropy of the next-token distribution at every position (for the entropy bonus and its metric)."""

from __future__ import annotations

import torch


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """``logits [..., V]`` -> ``H = logsumexp(z) - sum(softmax(z) * z)`` in float32, shape ``[...]``."""
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)
