"""Settings a run was given that its other settings leave unused (``algorithm.kl_estimator`` without a KL term,
DARTS's knobs under ``shaping.policy=plain``): said in one warning before a new run starts, so that a value set on
purpose is not taken for one at work. Only settings the recipe or the command line gave count, not defaults."""

from __future__ import annotations

import logging

from pydantic import BaseModel

from rl.config import RunConfig
from rl.models import built_here

DARTS_KNOBS = (
    "max_redundancy",
    "min_redundancy",
    "long_slots",
    "long_wait",
    "spare_gate",
    "warmup_steps",
    "priority",
    "tie_beta",
    "idle_target",
)
SART_KNOBS = ("alpha", "beta", "scorer")
MODEL_SCORER_KNOBS = ("scorer_gpus",)  # scorer_model without a model scorer is refused by the config
TOOL_KNOBS = ("max_tool_calls", "tool_timeout_s")
SAPO_KNOBS = ("sapo_tau_pos", "sapo_tau_neg")  # SAPO's gate, which replaces the clip
VESPO_KNOBS = ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")  # VESPO's sequence weight
ENTROPY_CONTROL_KNOBS = ("entropy_coef_delta", "entropy_coef_max")  # adaptive entropy control's step and bound
DATA_FIELDS = ("subset", "prompt_field", "answer_field")  # a dataset's columns and configuration: arith has none
log = logging.getLogger("rl.config")


def inert_settings(cfg: RunConfig) -> list[str]:
    """``KEY, KEY (only with WHAT)`` for the settings given that do nothing with the run's other settings, one entry
    per thing they lack."""
    a, s, r, ro, d, m = cfg.algorithm, cfg.shaping, cfg.reward, cfg.rollout, cfg.data, cfg.model
    rules: list[tuple[str, BaseModel, str, bool, str]] = [
        ("model", m, "trust_remote_code", built_here(m.path), "a local or hub model.path: a builtin ships no code"),
        ("algorithm", a, "norm_len", a.agg != "seq-mean-token-sum-norm", "algorithm.agg=seq-mean-token-sum-norm"),
        ("algorithm", a, "clip_low", a.loss in ("cispo", "sapo", "vespo"), "algorithm.loss=ppo or gspo"),
        ("algorithm", a, "dual_clip", a.loss in ("cispo", "sapo", "vespo"), "algorithm.loss=ppo or gspo"),
        ("algorithm", a, "clip_high", a.loss in ("sapo", "vespo"), "algorithm.loss=ppo, gspo or cispo"),
        *[("algorithm", a, k, a.loss != "sapo", "algorithm.loss=sapo") for k in SAPO_KNOBS],
        *[("algorithm", a, k, a.loss != "vespo", "algorithm.loss=vespo") for k in VESPO_KNOBS],
        ("algorithm", a, "correction_cap", a.correction == "none", "an algorithm.correction"),
        *[("algorithm", a, k, a.entropy_target is None, "algorithm.entropy_target") for k in ENTROPY_CONTROL_KNOBS],
        ("algorithm", a, "kl_estimator", a.kl_coef == 0, "algorithm.kl_coef above 0"),
        ("algorithm", a, "kl_correction", a.kl_coef == 0, "algorithm.kl_coef above 0"),
        ("algorithm", a, "ref_sync_every", a.kl_coef == 0, "algorithm.kl_coef above 0"),
        ("algorithm", a, "ref_sync_mix", a.kl_coef == 0, "algorithm.kl_coef above 0"),
        ("algorithm", a, "ref_sync_mix", a.kl_coef > 0 and a.ref_sync_every is None, "algorithm.ref_sync_every"),
        ("algorithm", a, "dynamic_sampling_max_factor", not a.dynamic_sampling, "algorithm.dynamic_sampling=true"),
        ("algorithm", a, "dynamic_sampling_min_std", not a.dynamic_sampling, "algorithm.dynamic_sampling=true"),
        ("algorithm", a, "dynamic_sampling_pass_rate", not a.dynamic_sampling, "algorithm.dynamic_sampling=true"),
        *[("data", d, k, d.source == "arith", "a data.source other than arith") for k in DATA_FIELDS],
        ("reward", r, "timeout_s", r.num_workers == 0, "reward.num_workers of 1 or more"),
        ("shaping", s, "avg_redundancy", s.policy == "plain", "a shaping.policy other than plain"),
        *[("shaping", s, k, "darts" not in s.policy, "shaping.policy=darts or darts+sart") for k in DARTS_KNOBS],
        *[("shaping", s, k, "sart" not in s.policy, "shaping.policy=sart or darts+sart") for k in SART_KNOBS],
        *[
            ("shaping", s, k, not s.scorer_worker, "shaping.scorer=lm-confidence or reward-model")
            for k in MODEL_SCORER_KNOBS
        ],
        ("shaping", s, "progress_every_tokens", s.progress_tokens == 0, "SART or shaping.long_wait"),
        *[
            ("rollout", ro, k, not (ro.tools or ro.environment), "rollout.tools or rollout.environment")
            for k in TOOL_KNOBS
        ],
    ]
    by_need: dict[str, list[str]] = {}  # one entry per need, its keys in the rules' order
    for section, model, key, unused, needs in rules:
        if unused and key in model.model_fields_set:
            by_need.setdefault(needs, []).append(f"{section}.{key}")
    return [f"{', '.join(keys)} (only with {needs})" for needs, keys in by_need.items()]


def warn_of_inert_settings(cfg: RunConfig) -> None:
    """One warning naming every setting ``inert_settings`` finds; nothing where there is none."""
    if unused := inert_settings(cfg):
        log.warning("settings that do nothing in this run: %s", ", ".join(unused))
