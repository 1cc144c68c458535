"""A run's inputs checked before any actor starts: the model, the data and the reward functions.

Each problem is one ``BadInput`` line naming the field, file or row and what to do; rows that cannot be used
(malformed lines, empty prompts or answers, prompts too long for the model) are skipped and counted in a
logged warning. ``preflight`` returns what the driver needs, so nothing is loaded twice.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl.config import DataConfig, RewardFn, RolloutConfig, RunConfig
from rl.data.holdout import hold_out, same_rows
from rl.data.source import dataset_rows
from rl.models import BUILTIN_PREFIX, resolve_model
from rl.prompting import PromptEncoder
from rl.rewards.loading import load_reward_fn
from rl.rewards.pool import TRL_HOOKS, call_reward, reward_values
from rl.types import PromptRow, Sample

log = logging.getLogger("rl.preflight")

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


class BadInput(ValueError):
    """An input the run cannot use; the message is one line that says what to change."""


@dataclass
class RunInputs:
    """What the checks loaded: the model directory, its prompt encoder, training and held-out rows."""

    model_dir: str
    encoder: PromptEncoder
    train_rows: list[PromptRow]
    test_rows: list[PromptRow]


def preflight(cfg: RunConfig) -> RunInputs:
    """Check the model, data and rewards of ``cfg``; raises ``BadInput`` with one line for the first problem."""
    model_dir = check_model_path(cfg.model.path)
    encoder = _encoder(model_dir, cfg.model.path)
    train, test = split_rows(cfg.data)
    _check_chat_template(encoder, cfg, train)
    train = fitting_rows(train, encoder, cfg.rollout, "training")
    test = fitting_rows(test, encoder, cfg.rollout, "held-out")
    if len(train) < cfg.train.batch_groups:
        raise BadInput(
            f"data.source {cfg.data.source!r}: {len(train)} usable training rows, fewer than train.batch_groups "
            f"({cfg.train.batch_groups}); add rows or lower train.batch_groups"
        )
    for reward in cfg.reward.functions:
        check_reward(reward, train[0], encoder, cfg.reward.timeout_s)
    print(f"data: {len(train)} training rows, {len(test)} held-out rows", flush=True)
    return RunInputs(model_dir, encoder, train, test)


def check_model_path(path: str, key: str = "model.path") -> str:
    """The local directory of ``path`` (the option ``key`` names it in errors); a hub name is accepted as it is (no
    network here)."""
    if path.startswith((BUILTIN_PREFIX, "dummy:")):
        try:
            return resolve_model(path)
        except ValueError as e:
            raise BadInput(f"{key}: {e}") from None
    local = Path(path).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            raise BadInput(f"{key} {path!r} has no config.json: give a Hugging Face model directory")
        return str(local)
    if path.startswith((".", "/", "~")) or not _HUB_NAME.fullmatch(path):
        raise BadInput(
            f"{key} {path!r} does not exist; give a local model directory, builtin:arith-tiny, "
            f"builtin:smollm2-135m or a hub name like Qwen/Qwen2.5-0.5B-Instruct"
        )
    return path


def _encoder(model_dir: str, path: str) -> PromptEncoder:
    try:
        return PromptEncoder(model_dir)
    except Exception as e:
        raise BadInput(f"model.path {path!r}: cannot load its tokenizer ({_line(e)})") from None


def split_rows(cfg: DataConfig) -> tuple[list[PromptRow], list[PromptRow]]:
    """Training and held-out rows: the source's own splits, ``test_source``'s test split, or ``hold_out``'s part
    of a source without a separate test split (one local file, a folder without split files)."""
    train = _rows(cfg, cfg.train_split)
    if cfg.test_source is not None:
        return train, _rows(cfg.model_copy(update={"source": cfg.test_source}), cfg.test_split)
    test = _rows(cfg, cfg.test_split)
    return hold_out(train, cfg.test_fraction, cfg.source) if same_rows(train, test) else (train, test)


def _rows(cfg: DataConfig, split: str) -> list[PromptRow]:
    """``dataset_rows``, with any loading error as one line naming the source."""
    try:
        return dataset_rows(cfg, split)
    except FileNotFoundError as e:
        raise BadInput(f"data.source: {e}; give an existing file, folder, preset or hub dataset") from None
    except ValueError as e:  # the loader's own message names the problem
        raise BadInput(f"data.source {cfg.source!r} (split {split!r}): {str(e).splitlines()[0]}") from None
    except Exception as e:
        raise BadInput(f"data.source {cfg.source!r} (split {split!r}): {_line(e)}") from None


def _check_chat_template(encoder: PromptEncoder, cfg: RunConfig, rows: list[PromptRow]) -> None:
    if getattr(encoder.tokenizer, "chat_template", None):
        return
    where = f"model.path {cfg.model.path!r} has no chat template"
    if cfg.data.chat:
        raise BadInput(f"{where}, but data.chat is set; set data.chat=false or use a model with a chat template")
    if any(isinstance(r.prompt, list) for r in rows):
        raise BadInput(
            f"{where}, but data.prompt_field {cfg.data.prompt_field!r} holds chat messages; use a model with a "
            f"chat template"
        )


def fitting_rows(rows: list[PromptRow], encoder: PromptEncoder, rollout: RolloutConfig, what: str) -> list[PromptRow]:
    """Rows whose prompt leaves ``rollout.max_tokens`` within ``rollout.max_model_len``; the rest counted and logged."""
    room = rollout.max_model_len - rollout.max_tokens
    lengths = [len(encoder.encode(r.prompt)) for r in rows]
    kept = [r for r, n in zip(rows, lengths, strict=True) if n <= room]
    if rows and not kept:
        raise BadInput(
            f"no {what} prompt fits: the shortest has {min(lengths)} tokens, rollout.max_model_len "
            f"({rollout.max_model_len}) - rollout.max_tokens ({rollout.max_tokens}) leaves {room}; raise "
            f"rollout.max_model_len or lower rollout.max_tokens"
        )
    if len(kept) < len(rows):
        log.warning(
            "skipped %d of %d %s rows: prompt longer than %d tokens (rollout.max_model_len - rollout.max_tokens)",
            len(rows) - len(kept),
            len(rows),
            what,
            room,
        )
    return kept


def check_reward(reward: RewardFn, row: PromptRow, encoder: PromptEncoder, timeout_s: float) -> None:
    """Load ``reward`` and call it, in this process, on ``row`` with its answer as the completion."""
    try:
        fn = load_reward_fn(reward.fn)
    except ValueError as e:
        raise BadInput(f"reward.functions: {e}") from None
    sample = Sample(index=0, tokens=encoder.encode(row.answer), logprobs=[], versions=[], finish_reason="stop")
    columns = PromptEncoder.columns([row], [sample])
    outcome: dict[str, Any] = {}
    call = threading.Thread(
        target=_call_into, args=(outcome, fn, row, encoder.completion(row.prompt, row.answer), columns), daemon=True
    )
    call.start()
    call.join(timeout_s)
    where = f"reward {reward.fn!r} on row {row.prompt_id}"
    if call.is_alive():
        raise BadInput(f"{where}: no result within reward.timeout_s ({timeout_s:g} s)")
    if "error" in outcome:
        arguments = ", ".join(["prompts", "completions", *columns, *TRL_HOOKS])
        raise BadInput(f"{where}: {outcome['error']} (a reward gets the keyword arguments {arguments})")
    if "bad_output" in outcome:
        raise BadInput(f"{where}: {outcome['bad_output']}")
    if len(outcome["values"]) != 1:
        raise BadInput(f"{where}: returned {len(outcome['values'])} values for 1 completion")


def _call_into(outcome: dict[str, Any], fn: Any, row: PromptRow, completion: Any, columns: dict) -> None:
    """Thread body: ``outcome["values"]``, or one line in ``outcome["error"]`` (the call raised) or
    ``outcome["bad_output"]`` (it returned something other than numbers)."""
    try:
        out = call_reward(fn, [row.prompt], [completion], columns)
    except Exception as e:
        outcome["error"] = _line(e)
        return
    try:
        outcome["values"] = reward_values(out)
    except TypeError as e:
        outcome["bad_output"] = str(e)


def _line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
