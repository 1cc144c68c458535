"""Turns groups into padded tensors for the policy: one row per sample, prompt + response."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch

from rl.types import Group

if TYPE_CHECKING:
    from rl.trainer.shared_prompt import PackedInputs

T = TypeVar("T")


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, T] prompt + response, right-padded
    attention_mask: torch.Tensor  # [B, T]
    response_mask: torch.Tensor  # [B, T-1] 1 where position t predicts a response token the model wrote
    old_logprobs: torch.Tensor  # [B, T-1] behaviour log-probs aligned with response_mask
    advantages: torch.Tensor  # [B]
    packed: PackedInputs | None = None  # the forward's inputs with each prompt once (shared_prompt), if packed

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum())

    @property
    def positions(self) -> int:
        """Token positions the forward computes, padding included."""
        return (self.input_ids if self.packed is None else self.packed.input_ids).numel()

    @property
    def real_tokens(self) -> int:
        """Prompt and response tokens among ``positions``."""
        return int(self.attention_mask.sum()) if self.packed is None else self.packed.real_tokens

    @property
    def first_target(self) -> int:
        """The first position that predicts a response token in any row (its shortest prompt's length - 1)."""
        return int(self.response_mask.any(dim=0).nonzero()[0]) if self.num_tokens else 0


# prompt tokens, response tokens, behaviour log-probs, advantage, loss mask (None: every response token is trained)
Row = tuple[list[int], list[int], list[float], float, list[int] | None]


def rows_of(groups: list[Group], mask_truncated: bool = False) -> list[Row]:
    """(prompt tokens, response tokens, behaviour log-probs, advantage, loss mask) for every kept sample; with
    ``mask_truncated``, none for a truncated sample (cut at the token cap or by its controller: DAPO's overlong
    filtering; it is no loss term, and the trainer does not compute it)."""
    return [
        (g.prompt_tokens, s.tokens, s.logprobs, a, s.loss_mask)
        for g in groups
        for s, a in zip(g.samples, g.advantages, strict=True)
        if s.tokens and not (mask_truncated and s.truncated)
    ]


def row_length(row: Row) -> int:
    """Prompt plus response tokens of one row."""
    return len(row[0]) + len(row[1])


def cut_micro_batches(
    items: list[T],
    max_rows: int,
    max_tokens: int | None = None,
    length: Callable[[T], int] = row_length,
    rows: Callable[[T], int] = lambda _: 1,
) -> list[list[T]]:
    """``items`` (rows, or packed rows: ``length`` tokens and ``rows`` samples each) cut into micro-batches of at most
    ``max_rows`` samples.

    Without ``max_tokens`` the items keep their order. With it, items are sorted longest first and a micro-batch
    takes the next item while its padded size (items x its longest item) stays within ``max_tokens`` (an item longer
    than that gets a micro-batch of its own): items of similar length are padded together, so the trainer computes
    little beyond the real tokens, however long the batch's tail. The loss is a sum over tokens divided by the
    step's global units, so the order and grouping of rows change the update only by float rounding.
    """
    if max_tokens is not None:
        items = sorted(items, key=length, reverse=True)
    cuts: list[list[T]] = []
    for item in items:
        current = cuts[-1] if cuts else None
        if (
            current
            and sum(map(rows, current)) + rows(item) <= max_rows
            and (max_tokens is None or (len(current) + 1) * length(current[0]) <= max_tokens)
        ):
            current.append(item)
        else:
            cuts.append([item])
    return cuts


def collate(rows: list[Row], pad_id: int) -> TokenBatch:
    """Right-pad rows into a ``TokenBatch``; a row's loss mask zeroes ``response_mask`` at the tokens it excludes
    (a tool's result inside a multi-turn episode), so they are context for the policy but never a loss term."""
    width = max(map(row_length, rows))
    n = len(rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    resp = torch.zeros((n, width - 1))
    old = torch.zeros((n, width - 1))
    for i, (p, r, lp, _, mask) in enumerate(rows):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        attn[i, : len(p) + len(r)] = 1
        resp[i, len(p) - 1 : len(p) - 1 + len(r)] = 1 if mask is None else torch.tensor(mask, dtype=torch.float32)
        old[i, len(p) - 1 : len(p) - 1 + len(r)] = torch.tensor(lp, dtype=torch.float32)
    adv = torch.tensor([row[3] for row in rows], dtype=torch.float32)
    return TokenBatch(ids, attn, resp, old, adv)
