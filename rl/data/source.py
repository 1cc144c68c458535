"""One entry point from a recipe's ``data`` section to prompt rows: procedural arithmetic or a loader."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from rl.config import DataConfig
from rl.data.arith import make_split
from rl.data.holdout import check_disjoint, hold_out, same_rows
from rl.data.loaders import build_prompt, load_rows
from rl.types import PromptRow


def dataset_rows(cfg: DataConfig, split: str) -> list[PromptRow]:
    """Rows of ``split`` (the config's train or test split name) for the configured source."""
    if cfg.source == "arith":
        if split not in (cfg.train_split, cfg.test_split):  # not the training rows under another name
            raise ValueError(f"arith problems come in two splits, {cfg.train_split!r} and {cfg.test_split!r}")
        rows = make_split(cfg.arith, "test" if split == cfg.test_split else "train")
        return [_framed(row, cfg) for row in (rows[: cfg.limit] if cfg.limit else rows)]
    return load_rows(
        cfg.source,
        split=split,
        prompt_field=cfg.prompt_field,
        answer_field=cfg.answer_field,
        subset=cfg.subset,
        template=cfg.template,
        limit=cfg.limit,
        system_prompt=cfg.system_prompt,
        chat=cfg.chat,
    ).rows  # rows skipped: counted in the loader's one warning


def train_and_held_out(
    cfg: DataConfig, rows: Callable[[DataConfig, str], list[PromptRow]] = dataset_rows
) -> tuple[list[PromptRow], list[PromptRow]]:
    """Training and held-out rows: the source's own splits, ``test_source``'s test split, or ``hold_out``'s part
    of a source without a separate test split (one local file, a folder without split files). ``rows`` reads one
    split (``dataset_rows``, or a caller's wrapper that words its errors)."""
    train = rows(cfg, cfg.train_split)
    if cfg.test_source is not None:
        test = rows(cfg.model_copy(update={"source": cfg.test_source}), cfg.test_split)
        what = f"data.test_source {cfg.test_source!r} (split {cfg.test_split!r})"
        check_disjoint(train, test, what, "name data the run does not train on, or drop data.test_source")
        return train, test
    test = rows(cfg, cfg.test_split)
    if same_rows(train, test):
        return hold_out(train, cfg.test_fraction, cfg.source)
    what = f"data.source {cfg.source!r} (split {cfg.test_split!r})"
    check_disjoint(train, test, what, "name another data.test_split or a data.test_source")
    return train, test


def _framed(row: PromptRow, cfg: DataConfig) -> PromptRow:
    """A procedural row under the recipe's template, chat and system prompt (the defaults leave it as it is)."""
    if cfg.system_prompt is not None and not cfg.chat:
        raise ValueError("data.system_prompt needs data.chat=true")
    try:
        prompt = build_prompt(row.prompt, row.columns, cfg.template, cfg.system_prompt, cfg.chat)
    except ValueError as e:
        raise ValueError(f"data.template {cfg.template!r} does not fit arith rows ({e}); use {{prompt}}") from e
    return dataclasses.replace(row, prompt=prompt)
