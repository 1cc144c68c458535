"""`rl train --help-config` lists every config key with its type, default and meaning."""

from pydantic import BaseModel

from rl.cli import main
from rl.config import RunConfig


def _keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, info in model.model_fields.items():
        nested = (
            info.annotation if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel) else None
        )
        keys += _keys(nested, f"{prefix}{name}.") if nested else [f"{prefix}{name}"]
    return keys


def test_every_key_is_listed_with_a_description(capsys):
    assert main(["train", "--help-config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split(" (", 1)[0]: line for line in lines}
    assert set(listed) == set(_keys(RunConfig))  # every key, nested sections expanded
    undocumented = [key for key, line in listed.items() if "): " not in line or not line.split("): ", 1)[1].strip()]
    assert undocumented == []  # a new knob needs Field(description=...)
    assert listed["shaping.policy"].startswith("shaping.policy (plain | darts | sart | darts+sart, default 'plain'): ")
    assert "Karmarkar-Karp" in listed["train.dp_balance"]
