"""README.md stays a short front page whose links lead somewhere (the docs site's own links are checked by
``mkdocs build --strict``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_readme_links_point_at_files_in_the_repository():
    targets = [t for t in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in t]
    assert targets, "README.md links into docs/"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def _block(language: str, first_line: str) -> str:
    """The README's fenced ``language`` block that starts with ``first_line``."""
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return next(b for b in blocks if b.startswith(first_line))


def test_the_readme_example_recipe_and_reward_pass_the_checks_and_score(tiny_model_dir, tmp_path, monkeypatch):
    """The example users copy first: its recipe and reward, saved as the README names them, pass ``rl train``'s
    checks, name the run after the file, and the reward gives a right answer more than a wrong one."""
    from rl.config import load_config
    from rl.inputs.preflight import load_rewards, preflight

    (tmp_path / "my_recipe.yaml").write_text(_block("yaml", "# my_recipe.yaml"))
    (tmp_path / "my_reward.py").write_text(_block("python", "# my_reward.py"))
    monkeypatch.chdir(tmp_path)
    cfg = load_config("my_recipe.yaml")
    inputs = preflight(cfg, say=False)
    assert cfg.run_dir.name == "my_recipe" and inputs.train_rows and inputs.test_rows
    _, mine = load_rewards(cfg)[0]
    right, wrong = mine(prompts=["2+3="] * 2, completions=["2+3=5;#5", "2+3=6;#6"], answer=["5", "5"])
    assert right > 0.9 and wrong < 0
