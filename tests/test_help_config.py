"""`rl train --help-config` lists every config key with its type, default and meaning."""

from types import NoneType
from typing import Any, get_args

from pydantic import BaseModel

from rl.cli.main import main
from rl.config import RunConfig


def _sections(annotation: Any) -> list[type[BaseModel]]:
    """Config classes a field holds: itself, inside ``| None`` or as list items."""
    candidates = [annotation, *(arg for arg in get_args(annotation) if arg is not NoneType)]
    return [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]


def _fields(model: type[BaseModel], prefix: str = "") -> dict[str, str | None]:
    """Every field of ``model`` and of the config classes under it, by dotted path, with its description; a plain
    section (``shaping``) is not a key itself, only its fields are."""
    fields = {}
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        if _sections(info.annotation) != [info.annotation]:
            fields[path] = info.description
        for section in _sections(info.annotation):
            fields |= _fields(section, f"{path}.")
    return fields


def _help_lines(capsys) -> dict[str, str]:
    assert main(["train", "--help-config"]) == 0  # no recipe needed
    lines = capsys.readouterr().out.splitlines()
    return {line.split(" (", 1)[0].replace("[]", ""): line for line in lines}


def test_every_field_has_a_description():
    undocumented = [path for path, description in _fields(RunConfig).items() if not (description or "").strip()]
    assert undocumented == []  # a new knob needs Field(description=...)


def test_every_key_is_listed_with_its_description(capsys):
    listed = _help_lines(capsys)
    fields = _fields(RunConfig)
    assert set(listed) == set(fields)
    for key, line in listed.items():
        assert line.endswith(f": {fields[key]}"), line


def test_examples(capsys):
    listed = _help_lines(capsys)
    assert listed["shaping.policy"].startswith("shaping.policy (plain | darts | sart | darts+sart, default 'plain'): ")
    assert listed["shaping.alpha"].startswith("shaping.alpha (float, default 0.3): SART: ")
    assert "Karmarkar-Karp" in listed["train.dp_balance"]
    assert listed["train.lora.rank"].startswith("train.lora.rank (int, default 16): ")
    assert listed["logging.wandb.project"].startswith("logging.wandb.project (str, required): ")
    assert listed["reward.functions.fn"].startswith("reward.functions[].fn (str | None, default None): ")
    assert listed["reward.functions.model"].startswith("reward.functions[].model (str | None, default None): ")
