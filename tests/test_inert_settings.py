"""Settings given that the run's other settings leave unused are said in one warning; defaults and used ones not."""

import glob

import pytest

from rl.cli.common import recipe_path
from rl.config import load_config
from rl.inputs.inert_settings import inert_settings, warn_of_inert_settings


@pytest.mark.parametrize(
    ("overrides", "unused"),
    [
        (["algorithm.kl_estimator=k1"], ["algorithm.kl_estimator (only with algorithm.kl_coef above 0)"]),
        (["algorithm.kl_estimator=k1", "algorithm.kl_coef=0.01"], []),
        (
            ["algorithm.kl_correction=true", "algorithm.ref_sync_every=8", "algorithm.ref_sync_mix=1"],
            [
                "algorithm.kl_correction, algorithm.ref_sync_every, algorithm.ref_sync_mix (only with "
                "algorithm.kl_coef above 0)"
            ],
        ),
        (
            ["algorithm.kl_coef=0.01", "algorithm.ref_sync_mix=1"],
            ["algorithm.ref_sync_mix (only with algorithm.ref_sync_every)"],
        ),
        (["algorithm.kl_coef=0.01", "algorithm.kl_correction=true", "algorithm.ref_sync_every=8"], []),
        (
            ["algorithm.entropy_coef_delta=0.01", "algorithm.entropy_coef_max=0.5"],
            ["algorithm.entropy_coef_delta, algorithm.entropy_coef_max (only with algorithm.entropy_target)"],
        ),
        (["algorithm.entropy_target=0.3", "algorithm.entropy_coef_delta=0.01"], []),
        (["algorithm.norm_len=100"], ["algorithm.norm_len (only with algorithm.agg=seq-mean-token-sum-norm)"]),
        (["algorithm.correction_cap=3"], ["algorithm.correction_cap (only with an algorithm.correction)"]),
        (["algorithm.sapo_tau_neg=2"], ["algorithm.sapo_tau_neg (only with algorithm.loss=sapo)"]),
        (
            ["algorithm.loss=sapo", "algorithm.clip_high=0.3", "algorithm.sapo_tau_neg=2"],
            ["algorithm.clip_high (only with algorithm.loss=ppo, gspo or cispo)"],
        ),
        (
            ["algorithm.loss=cispo", "algorithm.clip_low=0.1", "algorithm.clip_high=4", "algorithm.dual_clip=3"],
            ["algorithm.clip_low, algorithm.dual_clip (only with algorithm.loss=ppo or gspo)"],
        ),
        (["algorithm.correction_cap=3", "algorithm.correction=tis-token", "algorithm.decoupled=true"], []),
        (
            ["algorithm.dynamic_sampling_max_factor=2", "algorithm.dynamic_sampling_min_std=0.05"],
            [
                "algorithm.dynamic_sampling_max_factor, algorithm.dynamic_sampling_min_std (only with "
                "algorithm.dynamic_sampling=true)"
            ],
        ),
        (
            ["reward.num_workers=0", "reward.timeout_s=3"],
            ["reward.timeout_s (only with reward.num_workers of 1 or more)"],
        ),
        (["shaping.long_wait=1.2"], ["shaping.long_wait (only with shaping.policy=darts or darts+sart)"]),
        (["shaping.policy=darts", "shaping.long_wait=1.2", "shaping.progress_every_tokens=8"], []),
        (
            ["shaping.policy=darts", "shaping.progress_every_tokens=8"],
            ["shaping.progress_every_tokens (only with SART or shaping.long_wait)"],
        ),
        (
            ["shaping.policy=darts", "shaping.alpha=0.5"],
            ["shaping.alpha (only with shaping.policy=sart or darts+sart)"],
        ),
        (
            ["shaping.policy=sart", "shaping.scorer_gpus=0.5"],
            ["shaping.scorer_gpus (only with shaping.scorer=lm-confidence or reward-model)"],
        ),
        (["rollout.max_tool_calls=2"], ["rollout.max_tool_calls (only with rollout.tools or rollout.environment)"]),
        (
            ["data.subset=main", "data.prompt_field=q"],
            ["data.subset, data.prompt_field (only with a data.source other than arith)"],
        ),
        (["data.source=gsm8k", "data.subset=socratic", "data.prompt_field=question"], []),
        (
            ["model.trust_remote_code=true"],
            ["model.trust_remote_code (only with a local or hub model.path: a builtin ships no code)"],
        ),
        (["model.path=Qwen/Qwen2.5-0.5B-Instruct", "model.trust_remote_code=true"], []),
        (
            ["shaping.avg_redundancy=2", "shaping.long_wait=1.2", "shaping.alpha=0.5", "algorithm.kl_estimator=k1"],
            [
                "algorithm.kl_estimator (only with algorithm.kl_coef above 0)",
                "shaping.avg_redundancy (only with a shaping.policy other than plain)",
                "shaping.long_wait (only with shaping.policy=darts or darts+sart)",
                "shaping.alpha (only with shaping.policy=sart or darts+sart)",
            ],
        ),
        (
            ["shaping.max_redundancy=2", "shaping.long_slots=2"],
            ["shaping.max_redundancy, shaping.long_slots (only with shaping.policy=darts or darts+sart)"],
        ),
    ],
)
def test_a_setting_given_that_does_nothing_is_named_with_what_it_needs(overrides, unused):
    assert inert_settings(load_config(recipe_path("arith_tiny"), overrides)) == unused


def test_the_unshaped_baseline_of_a_shaped_recipe_runs_with_its_knobs_said_unused():
    """arith_smollm2's comment names ``shaping.policy=plain`` as its baseline: its DARTS knobs, the idle governor's
    target among them, are said unused, not refused."""
    cfg = load_config(recipe_path("arith_smollm2"), ["shaping.policy=plain"])
    assert inert_settings(cfg) == [
        "shaping.avg_redundancy (only with a shaping.policy other than plain)",
        "shaping.max_redundancy, shaping.min_redundancy, shaping.long_wait, shaping.idle_target (only with "
        "shaping.policy=darts or darts+sart)",
    ]


def test_no_bundled_recipe_gives_a_setting_it_does_not_use(caplog):
    """Nor is a default one said: only what a recipe or the command line gave counts."""
    with caplog.at_level("WARNING", logger="rl.config"):
        for recipe in sorted(glob.glob(str(recipe_path("arith_tiny").parent / "*.yaml"))):
            warn_of_inert_settings(load_config(recipe))
    assert not caplog.records
