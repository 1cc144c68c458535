import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from rl.cli.common import recipe_path
from rl.config import load_config


def test_bundled_recipe_loads_and_overrides_apply():
    cfg = load_config(recipe_path("arith_tiny"), ["train.max_steps=7", "shaping.policy=darts", "rollout.top_p=0.9"])
    assert cfg.train.max_steps == 7
    assert cfg.shaping.policy == "darts"
    assert cfg.rollout.top_p == 0.9
    assert cfg.model.path == "builtin:arith-tiny"


@pytest.mark.parametrize(
    ("override", "path", "message"),
    [
        ("train.bogus=1", "train.bogus", "Extra inputs are not permitted"),
        ("train.batch_groups=0", "train.batch_groups", "greater than or equal to 1"),
        ("shaping.policy=fancy", "shaping.policy", "Input should be"),
        ("rollout.temperature=-1", "rollout.temperature", "greater than 0"),
        ("shaping.long_slots=8", "shaping", "long_slots (8) must be < m_keep (8)"),
        ("shaping.long_wait=0.5", "shaping.long_wait", "greater than or equal to 1"),
        ("shaping.min_redundancy=1.75", "shaping", "need min_redundancy (1.75) <= avg_redundancy (1.5)"),
        ("algorithm.correction=tis-token", "algorithm", "needs decoupled: true"),
        ("algorithm.advantage=ppo", "algorithm.advantage", "Input should be"),
        ("algorithm.correction_cap=0.5", "algorithm.correction_cap", "greater than or equal to 1"),
        ("algorithm.clip_low=1.5", "algorithm.clip_low", "less than 1"),
        ("train.mini_batches=99", "train", "mini_batches (99) must be <= batch_groups"),
        ("train.ppo_epochs=0", "train.ppo_epochs", "greater than or equal to 1"),
        ("eval.samples=4", "eval", "samples=4 at temperature 0 (greedy) is one response 4 times"),
    ],
)
def test_bad_values_name_the_field(override, path, message):
    with pytest.raises(ValidationError) as err:
        load_config(recipe_path("arith_tiny"), [override])
    text = str(err.value)
    assert path in text and message in text


def test_which_policies_watch_running_samples():
    def watches(*overrides):
        return load_config(recipe_path("arith_tiny"), list(overrides)).shaping.watches_running

    assert not watches("shaping.policy=darts") and watches("shaping.policy=sart")
    assert watches("shaping.policy=darts", "shaping.long_wait=2")
    assert watches("shaping.policy=darts+sart", "shaping.long_wait=2")
    assert not watches("shaping.policy=plain", "shaping.long_wait=2")


def test_darts_budget_bounds_reach_the_policy():
    from rl.shaping.factory import make_policy, shaping_options

    cfg = load_config(recipe_path("arith_tiny"), ["shaping.policy=darts", "shaping.min_redundancy=1.25"])
    options = shaping_options(cfg)
    assert (options["n_min"], options["n_max"]) == (10, 16) and cfg.shaping.m_keep == 8
    plans = make_policy("darts", **options).plan([f"q{i}" for i in range(6)])
    assert all(plan.n_launch >= 10 for plan in plans)
    default = shaping_options(load_config(recipe_path("arith_tiny"), ["shaping.policy=darts"]))
    assert default["n_min"] == 8  # the paper's M_low = M


def test_on_policy_needs_sync_every_step():
    with pytest.raises(ValidationError, match="sync_every=1"):
        load_config(None, ["train.max_staleness=0", "train.sync_every=2"])


def test_periodic_asynchrony_needs_on_policy_and_group_local_advantages():
    with pytest.raises(ValidationError, match="periodic_async needs train.max_staleness=0"):
        load_config(recipe_path("arith_tiny"), ["train.periodic_async=true", "train.max_staleness=2"])
    for batch_wide in ("reinforce++", "reinforce++-baseline", "grpo-batch", "gdpo"):
        with pytest.raises(ValidationError, match=f"must be group-local; '{re.escape(batch_wide)}' normalizes"):
            load_config(
                recipe_path("arith_tiny"),
                ["train.periodic_async=true", "train.max_staleness=0", f"algorithm.advantage={batch_wide}"],
            )
    with pytest.raises(ValidationError, match="needs mini_batches=1 and ppo_epochs=1"):
        load_config(
            recipe_path("arith_tiny"), ["train.periodic_async=true", "train.max_staleness=0", "train.ppo_epochs=2"]
        )
    cfg = load_config(
        recipe_path("arith_tiny"), ["train.periodic_async=true", "train.max_staleness=0", "algorithm.advantage=rloo"]
    )
    assert cfg.train.periodic_async and cfg.algorithm.advantage == "rloo"


def test_malformed_override_and_missing_recipe():
    with pytest.raises(ValueError, match="key.path=value"):
        load_config(None, ["train.max_steps"])
    with pytest.raises(FileNotFoundError, match="no_such_recipe"):
        recipe_path("no_such_recipe")


def test_cli_rejects_bad_config_before_starting_anything(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rl.cli", "train", "arith_tiny", "train.lr=-1", f"output_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "train.lr" in proc.stderr and "greater than 0" in proc.stderr
    assert not any(tmp_path.iterdir())  # no run directory: nothing was started


def test_model_scorers_need_sart_a_model_and_a_log_prob_threshold():
    cases = [
        (["shaping.policy=darts", "shaping.scorer=lm-confidence"], "needs a SART policy"),
        (["shaping.policy=sart", "shaping.scorer=reward-model", "shaping.alpha=0"], "needs scorer_model"),
        (["shaping.policy=sart", "shaping.scorer=lm-confidence"], "alpha (0.3) > 0 would prune"),
        (["shaping.policy=sart", "shaping.scorer_model=some/rm"], "scorer_model is for the model scorers"),
        (["shaping.policy=darts+sart", "shaping.scorer=none"], "darts+sart needs a scorer"),
        (["shaping.policy=sart", "shaping.scorer=prm"], "Input should be"),
    ]
    for overrides, message in cases:
        with pytest.raises(ValidationError, match="shaping") as err:
            load_config(recipe_path("arith_tiny"), overrides)
        assert message in str(err.value), overrides
    cfg = load_config(
        recipe_path("arith_tiny"), ["shaping.policy=sart", "shaping.scorer=lm-confidence", "shaping.alpha=-2"]
    )
    assert cfg.shaping.scorer_worker and cfg.shaping.scorer_model is None
    assert not load_config(recipe_path("arith_tiny"), ["shaping.policy=sart"]).shaping.scorer_worker


def test_a_recipes_local_paths_are_read_against_its_folder_and_saved_absolute(tmp_path, monkeypatch):
    recipes, elsewhere = tmp_path / "recipes", tmp_path / "elsewhere"
    recipes.mkdir(), elsewhere.mkdir()
    (recipes / "my_reward.py").write_text("def r(completions, **kw):\n    return [0.0] * len(completions)\n")
    (recipes / "rows.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n')
    (elsewhere / "held.jsonl").write_text('{"question": "2+2=", "answer": "4"}\n')
    (recipes / "r.yaml").write_text(
        "data: {source: rows.jsonl}\n"
        "reward: {functions: [my_reward.py:r, {fn: arith_exact}, {fn: 'rl.rewards.math:arith_steps'}]}\n"
    )
    monkeypatch.chdir(elsewhere)  # the recipe is run from another folder
    cfg = load_config(recipes / "r.yaml", ["data.test_source=held.jsonl", "model.path=Qwen/Qwen2.5-0.5B"])
    assert cfg.data.source == str(recipes / "rows.jsonl")  # the recipe's own: against its folder
    assert cfg.data.test_source == str(elsewhere / "held.jsonl")  # an override's: against the working directory
    assert [f.fn for f in cfg.reward.functions] == [
        f"{recipes}/my_reward.py:r",
        "arith_exact",
        "rl.rewards.math:arith_steps",
    ]
    assert [f.weight for f in cfg.reward.functions] == [1.0, 1.0, 1.0]  # a bare spec, as TRL lists its functions
    assert cfg.model.path == "Qwen/Qwen2.5-0.5B"  # a hub name is no local path
    saved = tmp_path / "config.yaml"
    saved.write_text("data: {source: rows.jsonl}\n")
    assert load_config(saved, local_paths=False).data.source == "rows.jsonl"  # a run's saved config, as written


def test_every_config_key_is_read_outside_the_config_models():
    """A knob nothing reads does nothing (``rollout.max_concurrent_groups`` sat in the config, documented, for the
    project's whole life): each key's last name appears as a word in the code that runs, outside ``rl/config.py``."""
    import re
    from pathlib import Path

    from rl.config import config_keys

    root = Path(__file__).resolve().parent.parent
    code = "\n".join(
        path.read_text(encoding="utf-8")
        for folder in ("rl", "rollout", "shaping", "trainer", "kernels")
        for path in (root / folder).rglob("*.py")
        if path != root / "rl" / "config.py"
    )
    names = {item.key.rsplit(".", 1)[-1].rstrip("[]") for item in config_keys()}
    assert sorted(name for name in names if not re.search(rf"\b{re.escape(name)}\b", code)) == []


def test_a_recipe_may_merge_an_anchor_and_override_its_keys(tmp_path):
    """YAML merge keys (``<<: *base``) still work beside the check that a key is given once per mapping."""
    from rl.config import read_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text("x: &base {lr: 1.0e-4, max_steps: 3}\ntrain:\n  <<: *base\n  lr: 3.0e-4\n")
    assert read_recipe(recipe, local_paths=False)["train"] == {"lr": 3.0e-4, "max_steps": 3}


def test_an_override_into_a_section_the_recipe_gave_a_value_names_the_recipe(tmp_path):
    """``train: 5`` in the recipe and ``train.max_steps=1`` on the command line: the recipe is what is wrong."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train: 5\n")
    with pytest.raises(ValueError, match=r"override 'train.max_steps=1': the recipe gives section 'train' the value 5"):
        load_config(recipe, ["train.max_steps=1"])


def test_a_recipe_without_a_name_names_its_run_after_its_file(tmp_path):
    """Two recipes that give no ``name`` write two runs, not one run the second restarts over the first."""
    for stem in ("my_recipe", "other"):
        (tmp_path / f"{stem}.yaml").write_text("train: {lr: 1.0e-4}\n")
    assert load_config(tmp_path / "my_recipe.yaml").run_dir == Path("runs/my_recipe")
    assert load_config(tmp_path / "other.yaml").run_dir == Path("runs/other")
    assert load_config(tmp_path / "other.yaml", ["name=exp/seed1"]).run_dir == Path("runs/exp/seed1")
    (tmp_path / "named.yaml").write_text("name: mine\n")
    assert load_config(tmp_path / "named.yaml").run_dir == Path("runs/mine")
    assert load_config(None).run_dir == Path("runs/run")
