"""The idle governor: average redundancy steered by the rollout side's idle fraction, within its bounds."""

import math

import pytest
from rl.shaping.factory import make_policy
from rl.shaping.idle_governor import GAIN, IdleGovernor

from rl.config import load_config
from rl.loop.groups import new_shaping


def test_idle_rollouts_buy_spares_and_a_busy_rollout_side_sheds_them():
    gov = IdleGovernor(value=1.5, low=1.0, high=2.5, target=0.1)
    assert gov.update(0.5) == pytest.approx(1.5 + GAIN * 0.4)  # idle capacity: more spare samples
    assert gov.update(0.1) == pytest.approx(1.5 + GAIN * 0.4)  # at target: unchanged
    assert gov.update(0.0) == pytest.approx(1.5 + GAIN * 0.3)  # rollout side busy: fewer
    assert gov.update(math.nan) == pytest.approx(1.5 + GAIN * 0.3)  # no measurement: unchanged


def test_value_stays_within_bounds():
    gov = IdleGovernor(value=2.0, low=1.25, high=2.5, target=0.2)
    values = [gov.update(idle) for idle in [0.99] * 5 + [0.0] * 20 + [0.6] * 3]
    assert max(values) == 2.5 and min(values) == 1.25
    assert all(1.25 <= v <= 2.5 for v in values)
    with pytest.raises(ValueError, match="low <= value <= high"):
        IdleGovernor(value=3.0, low=1.0, high=2.0, target=0.1)
    with pytest.raises(ValueError, match="target idle fraction"):
        IdleGovernor(value=1.5, low=1.0, high=2.0, target=1.0)


def test_steered_redundancy_reaches_darts_plans():
    policy = make_policy("darts+sart", 4, avg_redundancy=1.0, n_min=4, n_max=10, warmup_steps=0)
    prompts = [f"p{i}" for i in range(8)]
    assert sum(p.n_launch for p in policy.plan(prompts)) == 32
    policy.avg_redundancy = 2.0
    assert sum(p.n_launch for p in policy.plan(prompts)) == 64


def test_idle_target_steers_only_a_darts_policy():
    """A recipe's idle_target stays inert (said by ``inert_settings``) when the command picks another policy."""
    cfg = load_config(None, ["shaping.policy=darts+sart", "shaping.idle_target=0.1", "shaping.max_redundancy=2.5"])
    assert new_shaping(cfg)["governor"].value == cfg.shaping.avg_redundancy
    for policy in ("sart", "plain"):
        assert (
            new_shaping(load_config(None, [f"shaping.policy={policy}", "shaping.idle_target=0.1"]))["governor"] is None
        )
