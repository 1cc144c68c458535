"""Gradient accumulation (periodic asynchrony) and the algorithm options on the real tiny policy."""

import pytest
import torch
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from synthetic import make_groups

from rl.algorithm.losses import LossSpec


def parameters(worker: FSDPEngine) -> list[torch.Tensor]:
    return [p.detach().clone() for p in worker.model.parameters()]


def test_streamed_accumulation_gives_the_same_parameters_as_synchronous_steps(tiny_model_dir):
    # micro-batch = one group (4 samples) on both sides, so the float operations are the same and so are the
    # parameters, bit for bit; other splits differ only by float reassociation (amplified by Adam's 1/sqrt(v)).
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, micro_batch_size=4)
    batches = [make_groups(6, seed=s) for s in range(3)]
    synchronous, streamed = FSDPEngine(spec), FSDPEngine(spec)
    initial = parameters(synchronous)
    for groups in batches:
        sync_metrics = synchronous.train_step(groups)
        for group in groups:  # one group at a time, as periodic asynchrony feeds them while rollouts run
            streamed.accumulate([group])
        stream_metrics = streamed.finish_step()
        assert stream_metrics["loss"] == sync_metrics["loss"]
        assert stream_metrics["tokens"] == sync_metrics["tokens"]
    moved = max((a - b).abs().max().item() for a, b in zip(parameters(synchronous), initial, strict=True))
    assert moved > 1e-3  # three real updates happened
    for a, b in zip(parameters(synchronous), parameters(streamed), strict=True):
        assert torch.equal(a, b)
    assert synchronous.version == streamed.version == 3


def test_entropy_is_measured_without_a_bonus_and_kl_only_with_a_reference(tiny_model_dir):
    """A trainer without an entropy bonus logs the same entropy as one with it (the first step's forward, before
    any update), not 0; without a KL reference it logs no ``kl_ref`` rather than a 0."""
    plain = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-2)).train_step(make_groups(4))
    bonus = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-2, loss=LossSpec(entropy_coef=0.01)))
    assert plain["entropy"] > 0.1 and plain["entropy"] == pytest.approx(bonus.train_step(make_groups(4))["entropy"])
    assert "kl_ref" not in plain


def test_kl_entropy_and_ess_scaling_reach_the_step(tiny_model_dir):
    loss = LossSpec(kl_coef=0.1, entropy_coef=0.01, correction="tis-seq")
    worker = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-2, loss=loss, ess_lr_scaling=True))
    first = worker.train_step(make_groups(4))
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # the reference is the initial policy
    assert first["entropy"] > 0.0
    # behaviour log-probs are a constant -3, far from the policy's own: unequal weights, ESS < 1, lr scaled down
    assert 0.0 < first["ess_ratio"] < 1.0
    assert first["lr"] == pytest.approx(1e-2 * first["ess_ratio"] ** 0.5)
    second = worker.train_step(make_groups(4, seed=1))
    assert second["kl_ref"] > 0.0  # after one update the policy has moved away from the reference
