"""Entropy of the next-token distribution at every position: differentiable for the entropy bonus, in blocks of
rows without gradient for the metric alone (no ``[..., V]`` float32 temporary of the whole batch)."""

from __future__ import annotations

import torch
from rl.kernels.token_logprobs import BLOCK_ELEMENTS, row_blocks


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """``logits [..., V]`` -> ``H = logsumexp(z) - sum(softmax(z) * z)`` in float32, shape ``[...]``."""
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)


@torch.no_grad()
def token_entropy_metric(logits: torch.Tensor, block_elements: int = BLOCK_ELEMENTS) -> torch.Tensor:
    """``token_entropy`` without gradient, about ``block_elements`` float32 temporaries at a time."""
    out = torch.empty(logits.shape[:-1], dtype=torch.float32, device=logits.device)
    for rows in row_blocks(logits.shape, block_elements):
        out[rows] = token_entropy(logits[rows])
    return out
