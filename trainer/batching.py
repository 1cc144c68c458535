"""Turns groups into padded tensors for the policy: one row per sample, prompt + response."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl.types import Group


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, T] prompt + response, right-padded
    attention_mask: torch.Tensor  # [B, T]
    response_mask: torch.Tensor  # [B, T-1] 1 where position t predicts a response token
    old_logprobs: torch.Tensor  # [B, T-1] behaviour log-probs aligned with response_mask
    advantages: torch.Tensor  # [B]

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum())


Row = tuple[list[int], list[int], list[float], float]  # prompt tokens, response tokens, behaviour log-probs, advantage


def rows_of(groups: list[Group]) -> list[Row]:
    """(prompt tokens, response tokens, behaviour log-probs, advantage) for every kept sample."""
    return [
        (g.prompt_tokens, s.tokens, s.logprobs, a)
        for g in groups
        for s, a in zip(g.samples, g.advantages, strict=True)
        if s.tokens
    ]


def collate(rows: list[Row], pad_id: int) -> TokenBatch:
    """Right-pad rows into a ``TokenBatch``."""
    width = max(len(p) + len(r) for p, r, _, _ in rows)
    n = len(rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    resp = torch.zeros((n, width - 1))
    old = torch.zeros((n, width - 1))
    for i, (p, r, lp, _) in enumerate(rows):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        attn[i, : len(p) + len(r)] = 1
        resp[i, len(p) - 1 : len(p) - 1 + len(r)] = 1
        old[i, len(p) - 1 : len(p) - 1 + len(r)] = torch.tensor(lp, dtype=torch.float32)
    adv = torch.tensor([a for _, _, _, a in rows], dtype=torch.float32)
    return TokenBatch(ids, attn, resp, old, adv)
