"""What one timed pass of the rollout benchmark measured: a record per sample, and the pass's metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from rl.output.metrics import percentiles

Fate = Literal["kept", "discarded", "aborted"]
COUNT_KEYS = ("launched", "kept", "discarded", "aborted", "pruned", "cut", "shortfall")
# an episode pass's metrics NAME_per_episode: the mean of each launched episode's record field
EPISODE_FIELDS = {"turns": "turns", "tool_calls": "tool_calls", "tool_s": "tool_s", "decode_tokens": "length"}


@dataclass(frozen=True)
class SampleRecord:
    """One launched sample: its group, generated length, wall-clock span from the batch start, fate; for an episode
    (a recipe with tools) also its turns, tool calls and seconds in tools (``length``: its decode tokens)."""

    group: int
    index: int
    length: int
    start: float
    end: float
    fate: Fate
    finish_reason: str
    turns: int = 1
    tool_calls: int = 0
    tool_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def pass_metrics(
    records: Sequence[SampleRecord],
    seconds: float,
    counts: dict[str, int],
    rewards: Sequence[float],
    episodes: bool = False,
) -> dict[str, float]:
    """Time-to-batch, throughput, waste, shaping counts, length percentiles and reward of one pass; with
    ``episodes``, per launched episode: turns, tool calls, seconds in tools and decode tokens (``EPISODE_FIELDS``).

    ``seconds`` is the time to collect the whole batch, ``counts`` the summed controller counters
    (``COUNT_KEYS``; missing ones count 0) and ``rewards`` the valid rewards of the kept samples.
    """
    kept = [r for r in records if r.fate == "kept"]
    generated = sum(r.length for r in records)
    kept_tokens = sum(r.length for r in kept)
    longest = max(records, key=lambda r: (r.length, r.end - r.start), default=None)
    metrics = {
        "time_to_batch_s": seconds,
        "generated_tokens": float(generated),
        "kept_tokens": float(kept_tokens),
        "gen_tokens_per_s": generated / seconds if seconds > 0 else 0.0,
        "kept_tokens_per_s": kept_tokens / seconds if seconds > 0 else 0.0,
        "waste_ratio": 1.0 - kept_tokens / generated if generated else 0.0,
        **{k: float(counts.get(k, 0)) for k in COUNT_KEYS},
        "truncated_kept": float(sum(r.finish_reason == "length" for r in kept)),
        # groups that kept a truncated sample decoded to the cap: while there is one, the batch takes the full cap
        "groups_at_cap": float(len({r.group for r in kept if r.finish_reason == "length"})),
        "longest_tokens_per_s": longest.length / max(longest.end - longest.start, 1e-9) if longest else 0.0,
        "reward_mean": float(np.mean(rewards)) if len(rewards) else float("nan"),
        "rewarded": float(len(rewards)),
        **percentiles([r.length for r in kept], "kept_len"),
        **percentiles([r.length for r in records], "len"),
    }
    if episodes and records:
        means = {name: float(np.mean([getattr(r, f) for r in records])) for name, f in EPISODE_FIELDS.items()}
        metrics |= {f"{name}_per_episode": mean for name, mean in means.items()}
    return metrics
