"""The arith_tiny recipe shrunk for integration tests: 4 groups of 4, a small eval, no CPU pinning."""

from pathlib import Path

from rl.cli import recipe_path
from rl.config import RunConfig, load_config

SMALL = [
    "train.batch_groups=4",
    "shaping.m_keep=4",
    "eval.num_problems=8",
    "eval.every=0",
    "rollout.cpu_threads_bind=null",
    "train.save_checkpoint=false",
]


def small_run(tmp_path: Path, name: str, *overrides: str) -> RunConfig:
    """arith_tiny written under ``tmp_path/name`` with ``SMALL`` then ``overrides`` applied (later ones win)."""
    return load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", f"name={name}", *SMALL, *overrides])
