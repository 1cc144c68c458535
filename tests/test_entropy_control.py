"""Adaptive entropy control (``algorithm.entropy_target``): the controller's rule, then the real tiny policy's
trainer, whose first update applies no bonus, whose later ones apply the controller's coefficient, and whose
checkpoint carries the controller so a resume continues exactly."""

import copy
import math

import pytest
import torch
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from synthetic import make_groups, trained_and_reloaded

from rl.algorithm.entropy_control import EntropyControl
from rl.algorithm.losses import LossSpec


def test_the_bonus_waits_for_an_entropy_at_most_the_target_and_the_weight_follows_it():
    c = EntropyControl(coef=0.01, target=0.5, delta=0.005, max_coef=0.02)
    assert c.applied() == 0.0  # no entropy known yet
    c.update(0.4)  # below the target: the bonus applies, its weight rises
    assert (c.applied(), c.coef) == (pytest.approx(0.015), pytest.approx(0.015))
    c.update(0.3)
    c.update(0.2)  # capped at max_coef
    assert c.coef == pytest.approx(0.02)
    c.update(0.9)  # above: no bonus next, the weight falls
    assert (c.applied(), c.coef) == (0.0, pytest.approx(0.015))
    for _ in range(5):
        c.update(0.9)
    assert c.coef == 0.0  # never below 0
    c.update(math.nan)  # a skipped update changes nothing
    assert (c.coef, c.last_entropy) == (0.0, 0.9)


def _spec(model: str, target: float | None, coef: float = 0.01) -> TrainerSpec:
    return TrainerSpec(model=model, lr=1e-3, loss=LossSpec(entropy_coef=coef), entropy_target=target)


def _same_weights(a: FSDPEngine, b: FSDPEngine) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True))


def test_the_trainer_applies_the_controllers_coefficient(tiny_model_dir):
    """Target far above any entropy: step 1 has no bonus (as a trainer without one), then the bonus applies at the
    controller's rising weight (0.015 at step 2, as a fixed-weight trainer at 0.015 from the same weights)."""
    adaptive, plain = FSDPEngine(_spec(tiny_model_dir, 100.0)), FSDPEngine(_spec(tiny_model_dir, None, coef=0.0))
    metrics = [adaptive.train_step(make_groups(2, 0)), plain.train_step(make_groups(2, 0))]
    assert _same_weights(adaptive, plain)
    assert metrics[0]["entropy_coef"] == pytest.approx(0.015) and metrics[1]["entropy_coef"] == 0.0  # as TRL logs
    fixed = FSDPEngine(_spec(tiny_model_dir, None, coef=0.015))
    fixed.model.load_state_dict(adaptive.model.state_dict())
    fixed.optimizer.load_state_dict(copy.deepcopy(adaptive.optimizer.state_dict()))  # moments of its own
    fixed.version = adaptive.version  # the same point of the learning-rate schedule
    adaptive.train_step(make_groups(2, 1))
    fixed.train_step(make_groups(2, 1))
    assert _same_weights(adaptive, fixed)
    assert adaptive.entropy_control.coef == pytest.approx(0.02)


def test_an_entropy_above_the_target_keeps_the_bonus_off(tiny_model_dir):
    adaptive, plain = FSDPEngine(_spec(tiny_model_dir, 1e-6)), FSDPEngine(_spec(tiny_model_dir, None, coef=0.0))
    for seed in range(3):
        adaptive.train_step(make_groups(2, seed))
        plain.train_step(make_groups(2, seed))
    assert _same_weights(adaptive, plain)
    assert adaptive.entropy_control.coef == 0.0 and adaptive.entropy_control.last_entropy > 1e-6


def test_a_checkpoint_carries_the_controller(tiny_model_dir, tmp_path):
    trained, fresh = trained_and_reloaded(_spec(tiny_model_dir, 100.0), tmp_path / "ckpt")
    assert fresh.entropy_control == trained.entropy_control
    assert fresh.state_digest() == trained.state_digest()
    fresh.entropy_control.coef += 0.001
    assert fresh.state_digest() != trained.state_digest()  # the digest covers it
    fresh.load(str(tmp_path / "ckpt"))
    for worker in (trained, fresh):
        worker.train_step(make_groups(2, 7))
    assert _same_weights(trained, fresh)
