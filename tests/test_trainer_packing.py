"""Micro-batches cut by a padded-token budget (rows sorted by length) make the same update as the padded path."""

import dataclasses
import random

import torch
from rl.trainer.batching import cut_micro_batches, row_length
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine

from rl.types import Group, PromptRow, Sample


def long_tail_groups(n: int, seed: int) -> list[Group]:
    """Groups whose responses are mostly short with one long sample each (the shape that pads badly)."""
    rng = random.Random(seed)
    groups = []
    for g in range(n):
        lengths = [rng.randrange(2, 8) for _ in range(3)] + [rng.randrange(30, 50)]
        samples = [
            Sample(i, [rng.randrange(4, 15) for _ in range(k)], [-2.5] * k, [0] * k, "stop")
            for i, k in enumerate(lengths)
        ]
        prompt = [rng.randrange(4, 15) for _ in range(rng.randrange(3, 9))]
        groups.append(Group(PromptRow(f"p{g}", "", ""), prompt, samples, [rng.gauss(0, 1) for _ in lengths]))
    return groups


def rows(lengths: list[int]) -> list:
    return [([1] * k, [2], [0.0], 0.0) for k in lengths]


def test_cut_keeps_order_without_a_budget():
    cut = cut_micro_batches(rows([5, 1, 9, 3, 7]), max_rows=2)
    assert [[row_length(r) for r in c] for c in cut] == [[6, 2], [10, 4], [8]]


def test_cut_sorts_and_respects_the_token_budget():
    lengths = [5, 40, 1, 9, 3, 7, 2, 38]
    cut = cut_micro_batches(rows(lengths), max_rows=3, max_tokens=24)
    sizes = [[row_length(r) for r in c] for c in cut]
    assert sorted(x for c in sizes for x in c) == sorted(k + 1 for k in lengths)  # every row exactly once
    assert sizes[0] == [41] and sizes[1] == [39]  # a row over the budget is a micro-batch of its own
    for c in sizes:
        assert c == sorted(c, reverse=True) and len(c) <= 3
        assert len(c) == 1 or len(c) * c[0] <= 24


def test_token_budget_gives_the_padded_update_with_less_padding(tiny_model_dir):
    groups = long_tail_groups(6, seed=3)
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-3, micro_batch_size=64, share_prompts=False)  # one row a sample
    padded = FSDPEngine(spec)
    packed = FSDPEngine(dataclasses.replace(spec, micro_batch_tokens=128))
    prompt, response = groups[0].prompt_tokens, groups[0].samples[3].tokens
    assert packed.sequence_logprobs(prompt, response) == padded.sequence_logprobs(prompt, response)
    padded.accumulate(groups)
    packed.accumulate(groups)
    for (name, p), q in zip(padded.model.named_parameters(), packed.model.parameters(), strict=True):
        # the same summed gradient up to float reassociation (Adam's first step would amplify that noise to
        # lr-sized differences on near-zero entries, so the gradients are compared, not the stepped weights)
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5 * p.grad.abs().max().item() + 1e-9, rtol=1e-4, msg=name)
    a, b = padded.finish_step(), packed.finish_step()
    assert b["tokens"] == a["tokens"]
    assert abs(b["loss"] - a["loss"]) < 1e-6 * max(1.0, abs(a["loss"]))
    assert abs(b["grad_norm"] - a["grad_norm"]) < 1e-5 * a["grad_norm"]
    assert a["pad_fraction"] > 0.4 and b["pad_fraction"] < a["pad_fraction"] / 2
