"""Each step's sampled completions, to read what the policy writes: ``RUN_DIR/completions.jsonl`` (and a W&B table).

One JSON line per completion: ``step``, ``prompt_id``, ``prompt``, ``completion``, ``reward`` (the weighted sum),
``advantage``, ``rewards`` (each reward function's value, by its name in ``reward_names``) and ``extra`` (the
``log_extra`` columns). A step writes its first ``logging.completions_per_step`` completions in training order,
group by group, so whole groups come first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rl.rewards.loading import logged_name
from rl.types import Group

FILE = "completions.jsonl"


def reward_names(specs: Iterable[str]) -> dict[str, str]:
    """Each reward spec's name in the logs (``logged_name``: as TRL names a reward function); the whole spec where
    two functions share a name."""
    short = {spec: logged_name(spec) for spec in specs}
    return {spec: name if list(short.values()).count(name) == 1 else spec for spec, name in short.items()}


def completion_rows(step: int, groups: list[Group], limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` completions of ``groups`` (advantages assigned) as records of step ``step``."""
    rows: list[dict[str, Any]] = []
    for group in groups:
        log = group.reward_log
        names = reward_names(log.functions)
        for i, (sample, advantage) in enumerate(zip(group.samples, group.advantages, strict=True)):
            if len(rows) >= limit:
                return rows
            rows.append(
                {
                    "step": step,
                    "prompt_id": group.prompt.prompt_id,
                    "prompt": group.prompt.prompt,
                    "completion": sample.text,
                    "reward": sample.reward,
                    "advantage": float(advantage),
                    "rewards": {names[spec]: values[i] for spec, values in log.functions.items()},
                    "extra": {column: values[i] for column, values in log.extra.items()},
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """``rows`` as table columns and data: the nested ``rewards`` and ``extra`` values get columns of their own
    (``extra`` ones keep their names; a reward function's is its name), cells they lack are None."""
    flat = [{k: v for k, v in r.items() if k not in ("rewards", "extra")} | r["rewards"] | r["extra"] for r in rows]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    return columns, [[_cell(r.get(c)) for c in columns] for r in flat]


def _cell(value: Any) -> Any:
    """A table cell: numbers, text and None as they are, anything else (chat messages, lists) as JSON text."""
    return value if value is None or isinstance(value, (str, int, float)) else json.dumps(value, default=str)


class CompletionsFile:
    """``RUN_DIR/completions.jsonl``, written on the first rows. A new run starts it afresh; a run resumed at step
    ``resume_step`` keeps the lines up to that step and drops the ones a killed run wrote after it."""

    def __init__(self, run_dir: Path, resume_step: int | None = None) -> None:
        self.path = run_dir / FILE
        kept = []
        if resume_step is not None and self.path.exists():
            lines = self.path.read_text().splitlines()
            kept = [line for line in lines if _step(line) is not None and _step(line) <= resume_step]
        self.path.unlink(missing_ok=True)
        if kept:
            self.path.write_text("".join(line + "\n" for line in kept))
        self._file = None

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self._file is None:
            self._file = self.path.open("a")
        self._file.write("".join(json.dumps(r, default=str) + "\n" for r in rows))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _step(line: str) -> int | None:
    """The step of one JSONL line, or None for an unreadable one (a partial last line)."""
    try:
        step = json.loads(line).get("step")
    except (json.JSONDecodeError, AttributeError):
        return None
    return step if isinstance(step, int) else None
