"""Run metrics: per-step summaries of groups, written to JSONL and TensorBoard."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from rl.types import Group


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


def summarize_groups(groups: list[Group], trainer_version: int) -> dict[str, float]:
    """Reward, accuracy, lengths, waste and staleness over one training batch."""
    samples = [s for g in groups for s in g.samples]
    rewards = [s.reward for s in samples]
    stale = [trainer_version - g.min_version for g in groups]
    generated = sum(g.stats.get("generated_tokens", 0) for g in groups)
    kept = sum(len(s.tokens) for s in samples)
    out = {
        "samples": float(len(samples)),
        "groups_all_equal": float(sum(len({s.reward for s in g.samples}) == 1 for g in groups)),  # no signal
        "reward_mean": float(np.mean(rewards)),
        "reward_std": float(np.std(rewards)),
        "accuracy": float(np.mean([r > 0 for r in rewards])),
        "truncated_frac": float(np.mean([s.truncated for s in samples])),
        "generated_tokens": float(generated),
        "kept_tokens": float(kept),
        "waste_ratio": float(1 - kept / generated) if generated else 0.0,
        "staleness_mean": float(np.mean(stale)),
        "staleness_max": float(max(stale)),
        **percentiles([len(s.tokens) for s in samples], "response_len"),
    }
    for key in ("launched", "aborted", "discarded", "pruned", "shortfall", "resubmitted"):
        out[f"samples_{key}"] = float(sum(g.stats.get(key, 0) for g in groups))
    for key in ("scored_texts", "score_failures"):  # SART's scorer worker, when the run has one
        if any(key in g.stats for g in groups):
            out[key] = float(sum(g.stats.get(key, 0) for g in groups))
    for k in range(int(max(stale)) + 1):
        out[f"staleness_hist_{k}"] = float(sum(s == k for s in stale))
    budgets = Counter(int(g.stats["launched"]) for g in groups if "launched" in g.stats)
    for n, count in sorted(budgets.items()):  # DARTS budget histogram: how many groups launched n samples
        out[f"budget_hist_{n}"] = float(count)
    return out


class MetricsLogger:
    """Appends one JSON line per record and mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: Path, tensorboard: bool = True) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tb"))
        self._t0 = time.monotonic()

    def log(self, step: int, metrics: dict[str, float], kind: str = "train") -> None:
        record = {"kind": kind, "step": step, "time_s": round(time.monotonic() - self._t0, 3), **metrics}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self._tb.add_scalar(f"{kind}/{key}", value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
