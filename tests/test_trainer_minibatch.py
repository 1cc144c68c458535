"""PPO mini-batch epochs on the real tiny policy: several optimizer updates per train step."""

from dataclasses import replace

import pytest
import torch
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine, even_chunks
from synthetic import make_groups

from rl.algorithm.losses import LossSpec


def parameters(worker: FSDPEngine) -> list[torch.Tensor]:
    return [p.detach().clone() for p in worker.model.parameters()]


def test_even_chunks_are_contiguous_and_balanced():
    assert even_chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert even_chunks([1, 2], 3) == [[1], [2], []]
    assert even_chunks([], 2) == [[], []]


def test_two_mini_batches_are_two_updates_on_the_halves(tiny_model_dir):
    # coupled PPO (the config's default) clips against the behaviour log-probs, so an update depends only on its
    # own mini-batch: one step of 2 mini-batches is two steps on the halves, bit for bit (same micro-batches)
    groups = make_groups(6)
    coupled = LossSpec(decoupled=False)
    mini = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-2, loss=coupled, micro_batch_size=4, mini_batches=2))
    halves = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-2, loss=coupled, micro_batch_size=4))
    initial = parameters(mini)
    metrics = mini.train_step(groups)
    first, second = halves.train_step(groups[:3]), halves.train_step(groups[3:])
    for a, b in zip(parameters(mini), parameters(halves), strict=True):
        assert torch.equal(a, b)
    assert max((a - b).abs().max().item() for a, b in zip(parameters(mini), initial, strict=True)) > 1e-3
    assert metrics["updates"] == 2 and mini.version == 1  # one step, one weight version
    assert metrics["loss"] == (first["loss"] + second["loss"]) / 2
    assert metrics["tokens"] == first["tokens"] + second["tokens"]


def test_decoupled_epochs_clip_against_the_policy_before_the_step(tiny_model_dir):
    loss = LossSpec(decoupled=True)
    one = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=5e-2, loss=loss))
    two = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=5e-2, loss=loss, epochs=2))
    groups = make_groups(4)
    single, double = one.train_step(groups), two.train_step(groups)
    # one update: the proximal policy is the current one, so the ratio is exactly 1 and nothing is clipped
    assert single["approx_kl"] == 0.0 and single["clip_fraction"] == 0.0
    # the second epoch's ratio is against the policy before the first update, which has moved since
    assert double["updates"] == 2 and double["approx_kl"] > 0.0
    assert double["tokens"] == single["tokens"]
    # the off-policy weight pi_prox / pi_behav is the same both epochs: the proximal log-probs are fixed up front
    assert double["is_weight_max"] == pytest.approx(single["is_weight_max"], rel=1e-5)


def test_on_policy_decoupled_epochs_match_coupled(tiny_model_dir):
    # when the behaviour policy is the trainer's own (staleness 0), the step-start proximal policy is the
    # behaviour policy, so decoupled and coupled PPO make the same updates
    # padded rows, as sequence_logprobs computes the behaviour log-probs: with prompts shared their rounding differs
    # (~1e-6), and Adam's steps amplify it (measured 1.2e-3 here)
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, micro_batch_size=4, mini_batches=2, epochs=2, share_prompts=False)
    decoupled = FSDPEngine(replace(spec, loss=LossSpec(decoupled=True)))
    coupled = FSDPEngine(replace(spec, loss=LossSpec(decoupled=False)))
    groups = make_groups(4)
    for g in groups:
        for s in g.samples:
            s.logprobs = decoupled.sequence_logprobs(g.prompt_tokens, s.tokens)
    d, c = decoupled.train_step(groups), coupled.train_step(groups)
    assert d["approx_kl"] > 0.0 and d["approx_kl"] == pytest.approx(c["approx_kl"], rel=1e-3)
    # equal up to float noise (batched vs single-row log-probs) that Adam's first steps amplify (measured 2e-4),
    # far below what the 4 updates move (4e-2)
    for a, b in zip(parameters(decoupled), parameters(coupled), strict=True):
        assert torch.allclose(a, b, atol=1e-3)
