"""The trainer worker's GRPO step on the real tiny policy (torch, fp32, CPU)."""

import math
from types import SimpleNamespace

import pytest
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from rl.trainer.worker import TrainerWorker

from rl.types import Group, PromptRow, Sample


@pytest.fixture(scope="module")
def case(tiny_model_dir, encode):
    eos = [2]
    return SimpleNamespace(
        trainer=TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=1e-4)),
        prompt=encode("3+5+7="),
        good=encode("3+5=8;8+7=15;#15") + eos,
        bad=encode("3+3=6;6+8=14;#14") + eos,
    )


def logprob(case, tokens) -> float:
    return sum(case.trainer.sequence_logprobs(case.prompt, tokens))


def group(case, advantages) -> Group:
    samples = [
        Sample(i, t, case.trainer.sequence_logprobs(case.prompt, t), [0] * len(t), "stop")
        for i, t in enumerate([case.good, case.bad])
    ]
    return Group(PromptRow("x", "3+5+7=", "15"), case.prompt, samples, advantages)


def test_positive_advantage_raises_and_negative_lowers_logprob(case):
    before_good, before_bad = logprob(case, case.good), logprob(case, case.bad)
    metrics = case.trainer.train_step([group(case, [1.0, -1.0])])
    assert metrics["skipped_nonfinite"] == 0 and metrics["grad_norm"] > 0
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # on-policy: old log-probs are the current ones
    assert logprob(case, case.good) > before_good
    assert logprob(case, case.bad) < before_bad


def test_nonfinite_loss_skips_the_step_and_keeps_weights(case):
    before = case.trainer.parameter_checksum()
    version = case.trainer.engine.version
    metrics = case.trainer.train_step([group(case, [math.nan, 1.0])])
    assert metrics["skipped_nonfinite"] == 1
    assert case.trainer.parameter_checksum() == before
    assert case.trainer.engine.version == version + 1  # the step is counted, the update is not applied


def test_gradient_checkpointing_gives_the_same_update(tiny_model_dir):
    import torch
    from synthetic import make_groups

    groups = make_groups(4, seed=5)
    plain = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-3))
    recompute = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-3, gradient_checkpointing=True))
    assert recompute.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    a, b = plain.train_step(groups), recompute.train_step(groups)
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    for (name, p), q in zip(plain.model.named_parameters(), recompute.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-5, msg=name)
