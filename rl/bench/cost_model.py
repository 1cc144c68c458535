"""DARTS's rollout-time cost model applied to a whole measured batch, with a profiled per-token latency.

``T = sum_m (l_[m] - l_[m-1]) * PTL(b_m)``: every sample of the batch (all groups together) starts at
decode step 0 and leaves the running batch after as many steps as it generated tokens (an aborted sample
leaves when it was aborted, after its partial length); ``b_m`` is the number still running and
``PTL(b)`` the decode latency per step with ``b`` sequences, interpolated from a device profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rl.shaping.order_stats import rollout_time

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class DecodeProfile:
    """Per-token decode latency by batch size on one device (``rl bench profile-decode`` writes it)."""

    device: str
    model: str
    batch_sizes: tuple[int, ...]
    per_token_latency_s: tuple[float, ...]

    def __post_init__(self) -> None:
        sizes = np.asarray(self.batch_sizes, dtype=float)
        if sizes.size == 0 or sizes.size != len(self.per_token_latency_s):
            raise ValueError("a profile needs as many latencies as batch sizes, and at least one")
        if np.any(np.diff(sizes) <= 0) or sizes[0] < 1:
            raise ValueError(f"batch sizes must be increasing and >= 1, got {list(self.batch_sizes)}")
        if min(self.per_token_latency_s) <= 0:
            raise ValueError("per-token latencies must be positive")

    @classmethod
    def from_dict(cls, data: dict) -> DecodeProfile:
        """Build from the profile JSON's fields (extra fields are ignored)."""
        return cls(
            device=str(data["device"]),
            model=str(data["model"]),
            batch_sizes=tuple(int(b) for b in data["batch_sizes"]),
            per_token_latency_s=tuple(float(t) for t in data["per_token_latency_s"]),
        )

    @classmethod
    def load(cls, path: str | Path) -> DecodeProfile:
        """Read a profile JSON by path, or by bare name from the shipped ``profiles/`` folder."""
        file = Path(path)
        shipped = PROFILES_DIR / f"{file.name.removesuffix('.json')}.json"
        if not file.exists() and shipped.exists():
            file = shipped
        if not file.is_file():
            names = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.json")))
            raise ValueError(f"decode profile {str(path)!r} not found: give a profile JSON or a shipped name ({names})")
        return cls.from_dict(json.loads(file.read_text()))

    def ptl(self, batch: float) -> float:
        """Seconds per decode step with ``batch`` running sequences.

        Linear between profiled sizes; below the smallest the smallest's latency; above the largest the
        last segment's line is extended (never below the largest's latency).
        """
        sizes = np.asarray(self.batch_sizes, dtype=float)
        lat = np.asarray(self.per_token_latency_s, dtype=float)
        if batch <= sizes[-1] or sizes.size == 1:
            return float(np.interp(batch, sizes, lat))
        slope = (lat[-1] - lat[-2]) / (sizes[-1] - sizes[-2])
        return float(max(lat[-1], lat[-1] + slope * (batch - sizes[-1])))


def batch_rollout_time(lengths: list[int], profile: DecodeProfile) -> float:
    """Estimated seconds until the last of ``lengths`` (every sample of one batch) leaves the engine."""
    if not lengths:
        return 0.0
    return rollout_time(lengths, profile.ptl)


def replay_runs(runs: list[dict], profile: DecodeProfile) -> list[dict]:
    """Copies of ``rl bench rollout``'s runs with ``model_time_to_batch_s`` recomputed under ``profile``.

    Each run's measured samples (every launched sample's length, aborted ones at their partial length)
    are replayed through the cost model, so one CPU measurement can be priced on any profiled device.
    """
    out = []
    for run in runs:
        lengths = [int(s["length"]) for s in run["samples"]]
        metrics = {**run["metrics"], "model_time_to_batch_s": batch_rollout_time(lengths, profile)}
        out.append({**run, "metrics": metrics})
    return out
