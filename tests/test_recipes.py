"""Every bundled recipe validates and names reward functions that load."""

import pytest

from rl.cli.common import RECIPES_DIR
from rl.config import load_config
from rl.data.source import dataset_rows
from rl.rewards.loading import load_reward_fn

RECIPES = sorted(RECIPES_DIR.glob("*.yaml"))


def test_the_bundled_recipes_are_there():
    expected = {"arith_tiny", "arith_smollm2", "gsm8k_qwen2.5-0.5b", "math_qwen2.5-1.5b", "dapo_math_qwen2.5-math-7b"}
    assert expected <= {p.stem for p in RECIPES}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_validates_and_its_rewards_load(path):
    cfg = load_config(path)
    assert cfg.name == path.stem  # runs land in runs/<recipe name>/
    for reward in cfg.reward.functions:
        assert callable(load_reward_fn(reward.fn, RECIPES_DIR))
    assert cfg.rollout.max_tokens < cfg.rollout.max_model_len  # room for the prompt
    if cfg.data.source == "arith":  # offline data: both splits can be made as configured
        assert len(dataset_rows(cfg.data, cfg.data.train_split)) == cfg.data.arith.num_train
        assert len(dataset_rows(cfg.data, cfg.data.test_split)) == cfg.data.arith.num_test
