"""One entry point from a recipe's ``data`` section to prompt rows: procedural arithmetic or a loader."""

from __future__ import annotations

import dataclasses

from rl.config import DataConfig
from rl.data.arith import make_split
from rl.data.loaders import build_prompt, load_rows
from rl.types import PromptRow


def dataset_rows(cfg: DataConfig, split: str) -> list[PromptRow]:
    """Rows of ``split`` (the config's train or test split name) for the configured source."""
    if cfg.source == "arith":
        rows = make_split(cfg.arith, "test" if split == cfg.test_split else "train")
        return [_framed(row, cfg) for row in (rows[: cfg.limit] if cfg.limit else rows)]
    return load_rows(
        cfg.source,
        split=split,
        prompt_field=cfg.prompt_field,
        answer_field=cfg.answer_field,
        template=cfg.template,
        limit=cfg.limit,
        system_prompt=cfg.system_prompt,
        chat=cfg.chat,
    ).rows  # rows skipped: counted in the loader's one warning


def _framed(row: PromptRow, cfg: DataConfig) -> PromptRow:
    """A procedural row under the recipe's template, chat and system prompt (the defaults leave it as it is)."""
    if cfg.system_prompt is not None and not cfg.chat:
        raise ValueError("data.system_prompt needs data.chat=true")
    try:
        prompt = build_prompt(row.prompt, row.columns, cfg.template, cfg.system_prompt, cfg.chat)
    except ValueError as e:
        raise ValueError(f"data.template {cfg.template!r} does not fit arith rows ({e}); use {{prompt}}") from e
    return dataclasses.replace(row, prompt=prompt)
