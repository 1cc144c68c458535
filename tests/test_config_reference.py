"""The checked-in configuration reference (docs/reference/config.md) is what the config models generate, and it
holds every key ``rl train --help-config`` lists."""

from __future__ import annotations

from pathlib import Path

from rl.cli.config_reference import PAGE, render
from rl.config import RunConfig, TrainConfig, config_keys

ROOT = Path(__file__).resolve().parent.parent


def test_checked_in_page_is_current():
    page = (ROOT / PAGE).read_text(encoding="utf-8")
    assert page == render(), f"{PAGE} is stale: run `python -m rl.cli.config_reference > {PAGE}`"


def test_page_has_every_key_and_description_of_help_config():
    page = render()
    for name in [*RunConfig.model_fields, *(f"train.{name}" for name in TrainConfig.model_fields)]:
        assert f"`{name}`" in page, name  # a top-level section is a heading, a value an entry
    for item in config_keys():
        assert f"**`{item.key}`**" in page
        first_words = item.description.split("*")[0].split("<")[0].split("\\")[0]
        assert first_words in page, item.key


def test_each_trl_name_is_trls_and_points_at_keys_that_exist():
    """``TRL_NAMES`` answers a TRL argument typed as a key: each is an argument of TRL's ``GRPOConfig``,
    ``ScriptArguments``, ``ModelConfig`` or ``GRPOTrainer`` (two of older TRL releases apart), and every key its
    answer names is one of ours."""
    import dataclasses
    import inspect
    import re

    import pytest

    trl = pytest.importorskip("trl")
    from rl.config import TRL_NAMES

    theirs = {f.name for c in (trl.GRPOConfig, trl.ScriptArguments, trl.ModelConfig) for f in dataclasses.fields(c)}
    theirs |= set(inspect.signature(trl.GRPOTrainer.__init__).parameters)
    assert sorted(set(TRL_NAMES) - theirs) == ["max_prompt_length", "warmup_ratio"]  # in TRL before 1.0
    ours = {item.key.replace("[]", ".N") for item in config_keys()}
    for name, answer in TRL_NAMES.items():
        named = re.findall(r"\b[a-z_]+(?:\.[a-zN_]+)+\b", answer)
        assert named and set(named) <= ours, (name, answer)
