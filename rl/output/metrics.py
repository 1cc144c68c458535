"""Run metrics: per-step summaries of groups, written to JSONL, TensorBoard and, when configured, W&B."""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rl.output.completions import CompletionsFile, reward_names, table
from rl.output.trl_metrics import completion_metrics, tool_metrics
from rl.types import Group

log = logging.getLogger("rl.metrics")
_EVENT_SECOND = re.compile(r"events\.out\.tfevents\.(\d+)\.")  # a TensorBoard event file's creation second

if TYPE_CHECKING:
    from rl.output.wandb_sink import WandbSink


def percentiles(values: list[float], prefix: str) -> dict[str, float]:
    """p50/p90/p99/max of ``values`` under ``prefix`` (empty input gives no keys)."""
    if not values:
        return {}
    arr = np.asarray(values, dtype=np.float64)
    return {
        f"{prefix}_p50": float(np.percentile(arr, 50)),
        f"{prefix}_p90": float(np.percentile(arr, 90)),
        f"{prefix}_p99": float(np.percentile(arr, 99)),
        f"{prefix}_max": float(arr.max()),
    }


def length_stats(lengths: list[int]) -> dict[str, float]:
    """``response_len_mean`` and the ``percentiles`` of responses' ``lengths`` (a training batch's, an evaluation's)."""
    return {"response_len_mean": float(np.mean(lengths)), **percentiles(lengths, "response_len")}


def correct(group: Group) -> list[bool]:
    """Each sample's correctness by the held-out rule: its first reward function's value > 0 (the summed reward
    where the group carries no per-function values)."""
    values = next(iter(group.reward_log.functions.values()), None)
    return [v is not None and v > 0 for v in (values if values is not None else [s.reward for s in group.samples])]


def summarize_groups(groups: list[Group], trainer_version: int) -> dict[str, float]:
    """Reward, accuracy, lengths, waste and staleness over one training batch; each name reward functions gave
    ``log_metric`` as ``reward/NAME``, the mean of its values over the batch's scoring calls."""
    samples = [s for g in groups for s in g.samples]
    rewards = [s.reward for s in samples]
    stale = [trainer_version - g.min_version for g in groups]
    generated = sum(g.stats.get("generated_tokens", 0) for g in groups)
    kept = sum(len(s.tokens) if s.loss_mask is None else sum(s.loss_mask) for s in samples)  # the model's
    out = {
        "samples": float(len(samples)),
        # TRL's name: the share of groups whose rewards are all equal (no advantage under a group baseline)
        "frac_reward_zero_std": float(np.mean([len({s.reward for s in g.samples}) == 1 for g in groups])),
        "reward_mean": float(np.mean(rewards)),
        "reward_std": float(np.std(rewards, ddof=1)) if len(rewards) > 1 else 0.0,  # TRL's: the unbiased std
        "accuracy": float(np.mean([c for g in groups for c in correct(g)])),
        "truncated_frac": float(np.mean([s.truncated for s in samples])),
        "generated_tokens": float(generated),
        "kept_tokens": float(kept),
        "waste_ratio": float(1 - kept / generated) if generated else 0.0,
        "staleness_mean": float(np.mean(stale)),
        "staleness_max": float(max(stale)),
        **length_stats([len(s.tokens) for s in samples]),
    }
    for key in ("launched", "aborted", "discarded", "pruned", "cut", "shortfall", "resubmitted"):
        out[f"samples_{key}"] = float(sum(g.stats.get(key, 0) for g in groups))
    for key in ("scored_texts", "score_failures"):  # SART's scorer worker, when the run has one
        if any(key in g.stats for g in groups):
            out[key] = float(sum(g.stats.get(key, 0) for g in groups))
    for key in sorted({k for g in groups for k in g.stats if k == "turns" or k.startswith("tool_")}):  # tool episodes
        out[key] = float(sum(g.stats.get(key, 0) for g in groups))
    out |= completion_metrics(samples) | tool_metrics(out)
    for k in range(int(max(stale)) + 1):
        out[f"staleness_hist_{k}"] = float(sum(s == k for s in stale))
    budgets = Counter(int(g.stats["launched"]) for g in groups if "launched" in g.stats)
    for n, count in sorted(budgets.items()):  # DARTS budget histogram: how many groups launched n samples
        out[f"budget_hist_{n}"] = float(count)
    logged: dict[str, list[float]] = {}
    for group in groups:
        for name, values in group.reward_log.metrics.items():
            logged.setdefault(name, []).extend(values)
    out.update({f"reward/{name}": float(np.mean(values)) for name, values in sorted(logged.items())})
    return out | per_function_rewards(groups)


def per_function_rewards(groups: list[Group]) -> dict[str, float]:
    """TRL's ``rewards/NAME/mean`` and ``rewards/NAME/std`` over the batch's scored samples, NAME the function's
    (``reward_names``)."""
    values: dict[str, list[float]] = {}
    for group in groups:
        for spec, scored in group.reward_log.functions.items():
            values.setdefault(spec, []).extend(v for v in scored if v is not None)
    names = reward_names(values)
    out = {}
    for spec, scored in values.items():
        if scored:
            out[f"rewards/{names[spec]}/mean"] = float(np.mean(scored))
            out[f"rewards/{names[spec]}/std"] = float(np.std(scored))
    return out


class MetricsLogger:
    """Writes one JSON line per record and mirrors scalars to TensorBoard; each step's sampled completions go to
    ``completions.jsonl`` (``rl.output.completions``) and, with W&B, a table.

    A new run starts ``metrics.jsonl`` afresh. A run resumed at step ``resume_step`` keeps the records up to that
    step (not an earlier summary), drops the ones a killed run wrote after it, continues their clock
    (``time_s``), and TensorBoard drops its later events too, so each step appears once.
    """

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool = True,
        resume_step: int | None = None,
        wandb: WandbSink | None = None,
    ) -> None:
        """``wandb``: a started W&B run (``WandbSink``) to log to as well."""
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        kept = _records_through(self.path, resume_step) if resume_step is not None else []
        self._file = self.path.open("w")
        for record in kept:
            self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self._completions = CompletionsFile(run_dir, resume_step)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None
            if resume_step is not None:
                purge = resume_step + 1
                _wait_to_sort_after_event_files(run_dir / "tb")
            self._tb = SummaryWriter(str(run_dir / "tb"), purge_step=purge)
        self.write_error: str | None = None  # the first write that failed; later records are dropped
        self._t0 = time.monotonic() - max((r.get("time_s", 0.0) for r in kept), default=0.0)
        self._wandb = wandb

    def elapsed(self) -> float:
        """Seconds on the run's clock (a resumed run's clock goes on from its checkpoint)."""
        return time.monotonic() - self._t0

    def log(self, step: int, metrics: dict[str, float], kind: str = "train") -> None:
        record = {"kind": kind, "step": step, "time_s": round(self.elapsed(), 3), **metrics}
        self._guarded(lambda: self._log(record, step, metrics, kind))

    def _log(self, record: dict[str, Any], step: int, metrics: dict[str, float], kind: str) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self._tb.add_scalar(f"{kind}/{key}", value, step)
        if self._wandb is not None:
            self._wandb.log(step, metrics, kind)

    def log_completions(self, step: int, rows: list[dict[str, Any]]) -> None:
        """``rows`` (``completion_rows``) to completions.jsonl and the W&B table ``completions``."""
        self._guarded(lambda: self._completions.write(rows))
        if self._wandb is not None and rows:
            self._wandb.log_table(step, "completions", *table(rows))

    def _guarded(self, write: Callable[[], None]) -> None:
        """Run ``write`` unless an earlier write failed; a write that fails (a full disk, a folder removed) is kept
        as ``write_error``, for the run to stop on, instead of raising into the training loop."""
        if self.write_error is not None:
            return
        try:
            write()
        except OSError as e:
            self.write_error = self._failed_write(e)

    def close(self) -> None:
        """Close every sink; closing after a failed write (its buffered lines cannot reach the disk) raises nothing."""
        closers = [self._file.close, self._completions.close]
        closers += [self._tb.close] if self._tb is not None else []
        closers += [self._wandb.close] if self._wandb is not None else []
        for close in closers:
            try:
                close()
            except OSError as e:
                self.write_error = self.write_error or self._failed_write(e)

    def _failed_write(self, error: OSError) -> str:
        """A failed write in a few words: ``No space left on device (PATH)``."""
        return f"{error.strerror or error} ({error.filename or self.path.parent})"


def number(record: dict, key: str) -> float | None:
    """``record[key]`` as a finite float, or None when absent or not a finite number."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def read_records(path: Path) -> tuple[list[dict], int]:
    """Parsed JSON objects of a JSONL file and the count of unreadable lines (e.g. a partial last line)."""
    records, bad = [], 0
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            log.warning("%s:%d: unreadable line skipped", path, lineno)
            continue
        if isinstance(record, dict) and number(record, "step") is not None:
            records.append(record)
        else:
            bad += 1
    return records, bad


def _records_through(path: Path, step: int) -> list[dict]:
    """The records of ``path`` up to ``step``, summaries left out."""
    records = read_records(path)[0] if path.exists() else []
    return [r for r in records if r.get("step", 0) <= step and r.get("kind") != "summary"]


def _wait_to_sort_after_event_files(tb_dir: Path) -> None:
    """TensorBoard reads a directory's event files in name order, and a resumed run's purge only drops the events
    read before it. Names start with the creation second, then the host, pid and a per-process counter, which sort
    as text ("10" before "9"), so a file made in the same second as an earlier one may be read first: wait (at most a
    second) until the clock has passed the newest file's second."""
    seconds = [int(m.group(1)) for p in tb_dir.glob("events.out.tfevents.*") if (m := _EVENT_SECOND.match(p.name))]
    if seconds:
        time.sleep(max(0.0, max(seconds) + 1 - time.time()))
