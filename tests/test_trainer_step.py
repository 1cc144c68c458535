"""The trainer worker's GRPO step on the real tiny policy (torch, fp32, CPU)."""

import dataclasses
import math
from types import SimpleNamespace

import pytest
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from rl.trainer.worker import TrainerWorker

from rl.algorithm.losses import LossSpec
from rl.cli.common import recipe_path
from rl.config import load_config
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


def test_policy_loss_is_the_loss_without_its_entropy_bonus(tiny_model_dir, case):
    """TRL's ``policy_loss``: the loss before the entropy bonus is subtracted; the same as ``loss`` without one."""
    plain = case.trainer.train_step([group(case, [1.0, -1.0])])
    assert plain["policy_loss"] == pytest.approx(plain["loss"], abs=1e-9)
    spec = LossSpec(entropy_coef=0.5)
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=1e-4, loss=spec))
    metrics = trainer.train_step([group(case, [1.0, -1.0])])
    # token-mean: the bonus is 0.5 x the mean entropy of the step's tokens
    assert metrics["policy_loss"] - metrics["loss"] == pytest.approx(0.5 * metrics["entropy"], rel=1e-4)


@pytest.mark.parametrize("kind", ["gspo", "cispo", "sapo", "vespo"])
def test_every_loss_kind_raises_the_rewarded_sample_and_lowers_the_other(tiny_model_dir, case, kind):
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=1e-4, loss=LossSpec(kind=kind)))
    before_good, before_bad = (sum(trainer.sequence_logprobs(case.prompt, t)) for t in (case.good, case.bad))
    samples = [
        Sample(i, t, trainer.sequence_logprobs(case.prompt, t), [0] * len(t), "stop")
        for i, t in enumerate([case.good, case.bad])
    ]
    metrics = trainer.train_step([Group(PromptRow("x", "3+5+7=", "15"), case.prompt, samples, [1.0, -1.0])])
    assert metrics["skipped_nonfinite"] == 0 and metrics["clip_fraction"] == 0.0  # on-policy: nothing clipped
    assert metrics.get("cispo_clip_ratio") == (0.0 if kind == "cispo" else None)  # TRL logs it with cispo only
    assert metrics.get("vespo/phi_seq_mean") == (pytest.approx(1.0) if kind == "vespo" else None)  # phi(1) = 1
    assert sum(trainer.sequence_logprobs(case.prompt, case.good)) > before_good
    assert sum(trainer.sequence_logprobs(case.prompt, case.bad)) < before_bad


def test_top_entropy_quantile_reaches_the_trainers_loss(tiny_model_dir, case):
    """From the run's config to the loss: the high-entropy share of the tokens makes a different update."""
    cfg = load_config(recipe_path("arith_tiny"), ["algorithm.top_entropy_quantile=0.2"])
    spec = dataclasses.replace(TrainerSpec.from_config(cfg, tiny_model_dir), lr=1e-3)
    assert spec.loss.top_entropy_quantile == 0.2
    updates = []
    for s in (spec, dataclasses.replace(spec, loss=dataclasses.replace(spec.loss, top_entropy_quantile=1.0))):
        trainer = TrainerWorker(s)
        samples = [
            Sample(i, t, trainer.sequence_logprobs(case.prompt, t), [0] * len(t), "stop")
            for i, t in enumerate([case.good, case.bad])
        ]
        metrics = trainer.train_step([Group(PromptRow("x", "3+5+7=", "15"), case.prompt, samples, [1.0, -1.0])])
        assert metrics["skipped_nonfinite"] == 0 and metrics["grad_norm"] > 0
        updates.append(trainer.parameter_checksum())
    assert updates[0] != pytest.approx(updates[1], rel=1e-9)


def test_a_step_at_a_rollout_temperature_other_than_1_trains_on_policy(tiny_model_dir, case):
    """The gradient path with the logits divided by the temperature: on samples scored at it, the ratio is 1 and the
    update raises the rewarded sample."""
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=1e-4, temperature=0.7))
    before = sum(trainer.sequence_logprobs(case.prompt, case.good))
    samples = [
        Sample(i, t, trainer.sequence_logprobs(case.prompt, t), [0] * len(t), "stop")
        for i, t in enumerate([case.good, case.bad])
    ]
    metrics = trainer.train_step([Group(PromptRow("x", "3+5+7=", "15"), case.prompt, samples, [1.0, -1.0])])
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and metrics["logprob_gap"] < 1e-5
    assert sum(trainer.sequence_logprobs(case.prompt, case.good)) > before


def test_a_corrected_step_reports_its_applied_weights_under_trls_names(tiny_model_dir, case):
    """With ``decoupled`` and a token correction the step logs the weights it applied; on fresh samples (the trainer's
    own log-probs as the sampler's) every weight is 1."""
    from rl.output.trl_metrics import aliases

    spec = TrainerSpec(model=tiny_model_dir, lr=1e-4, loss=LossSpec(decoupled=True, correction="tis-token"))
    trainer = TrainerWorker(spec)
    samples = [
        Sample(i, t, trainer.sequence_logprobs(case.prompt, t), [0] * len(t), "stop")
        for i, t in enumerate([case.good, case.bad])
    ]
    metrics = trainer.train_step([Group(PromptRow("x", "3+5+7=", "15"), case.prompt, samples, [1.0, -1.0])])
    trl = aliases(metrics)
    assert [trl[f"sampling/importance_sampling_ratio/{k}"] for k in ("min", "mean", "max")] == pytest.approx([1.0] * 3)
    plain = TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=1e-4)).train_step(
        [Group(PromptRow("x", "3+5+7=", "15"), case.prompt, samples, [1.0, -1.0])]
    )
    assert "correction_w_mean" not in plain  # no correction: nothing applied, nothing logged


def test_mask_truncated_trains_as_if_the_truncated_sample_were_not_there(tiny_model_dir, case):
    """DAPO's overlong filtering: a truncated sample is no loss term, so the step equals one without it."""
    masked = TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=1e-3, mask_truncated=True))
    alone = TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=1e-3))
    good = Sample(0, case.good, masked.sequence_logprobs(case.prompt, case.good), [0] * len(case.good), "stop")
    cut = Sample(1, case.bad, masked.sequence_logprobs(case.prompt, case.bad), [0] * len(case.bad), "length")
    row = PromptRow("x", "3+5+7=", "15")
    with_cut = masked.train_step([Group(row, case.prompt, [good, cut], [1.0, -1.0])])
    without = alone.train_step([Group(row, case.prompt, [good], [1.0])])
    assert with_cut["tokens"] == without["tokens"] == len(case.good)
    assert masked.parameter_checksum() == pytest.approx(alone.parameter_checksum(), rel=1e-12)
    assert masked.parameter_checksum() != TrainerWorker(TrainerSpec(model=tiny_model_dir)).parameter_checksum()
    # a step with nothing but truncated samples has no loss term: no update, and nothing non-finite either
    trained = masked.parameter_checksum()
    only_cut = masked.train_step([Group(row, case.prompt, [cut], [-1.0])])
    assert (only_cut["tokens"], only_cut["skipped_nonfinite"]) == (0, 0)
    assert masked.parameter_checksum() == trained


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


def test_a_model_configured_with_dropout_trains_without_it(tiny_model_dir, tmp_path):
    """The engine samples without dropout; the trainer's log-probs must be its own (TRL's disable_dropout=True): a
    model whose config sets attention and hidden dropout gives the same logits in train mode, call after call, as
    in eval mode."""
    import json
    import shutil

    import torch

    model_dir = tmp_path / "with-dropout"
    shutil.copytree(tiny_model_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "attention_dropout": 0.5, "hidden_dropout": 0.5}))
    engine = FSDPEngine(TrainerSpec(model=str(model_dir)))
    ids = torch.tensor([[1, 5, 7, 9, 11, 13]])
    engine.model.train()
    first, second = engine.model(ids).logits, engine.model(ids).logits
    engine.model.eval()
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    torch.testing.assert_close(first, engine.model(ids).logits)
