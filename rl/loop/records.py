"""The records the driver logs besides evaluations: each step's metrics (``step_metrics``, ``step_timing``) and the
run's summary (``summarize_run``, written flat by ``summary_scalars``)."""

from __future__ import annotations

from typing import Any

from rl.loop.counters import RunCounters
from rl.output.trl_metrics import aliases
from rl.types import Group


def step_metrics(
    groups: list[Group],
    results: list[dict[str, float]],
    batch_stats: dict[str, float],
    buffer_stats: dict[str, Any],
    rollout_idle_s: float,
    rollout_errors: int,
    dynamic_dropped: dict[str, int],
) -> dict[str, Any]:
    """A step's record before its weight sync and timing: the batch's statistics (``summarize_groups``), rank 0's
    trainer metrics (``results[0]``), the buffer's, and what the rollout side did meanwhile."""
    busy = max(r["seconds"] for r in results)
    return {
        **batch_stats,
        **results[0],
        **aliases(batch_stats | results[0]),
        **{f"buffer_{k}": float(v) for k, v in buffer_stats.items()},
        "rollout_idle_s": rollout_idle_s,
        "rollout_errors": rollout_errors,
        "zero_variance_dropped": 0.0,  # dynamic sampling's drops this step, by reason
        **{f"{reason}_dropped": float(n) for reason, n in dynamic_dropped.items()},
        "trainer_tokens_per_s": batch_stats["kept_tokens"] / max(busy, 1e-9),
        "dp_wait_s": sum(r["dp_wait_s"] for r in results),  # data-parallel ranks waiting for a straggler
        "prompt_ids": [g.prompt.prompt_id for g in groups],  # what this step trained on
    }


def step_timing(seconds: float, busy: float, generated_tokens: float, rollout_idle_s: float) -> dict[str, float]:
    """A step's wall time (``seconds``) against the trainer's busy time and the rollout side's idle time in it."""
    return {
        "step_seconds": seconds,
        "rollout_tokens_per_s": generated_tokens / max(seconds, 1e-9),
        "trainer_idle_s": max(seconds - busy, 0.0),
        "trainer_idle_frac": max(seconds - busy, 0.0) / max(seconds, 1e-9),
        "rollout_idle_frac": rollout_idle_s / max(seconds, 1e-9),
    }


def summarize_run(counters: RunCounters, open_groups: int, **head: Any) -> dict[str, Any]:
    """The run summary: ``head`` (accuracy before and after, time, steps, how it stopped, the checkpoint, engine
    start-up, the buffer's stats), then the counters and the group ledger (``groups_unaccounted``: always 0)."""
    return {
        **head,
        "rollout_errors": counters.rollout_errors,
        "dead_workers": counters.dead_workers,
        "restarted_workers": counters.restarted_workers,
        "zero_variance_admitted": counters.zero_variance_admitted,
        "replayed_groups": counters.replayed_groups,
        "groups_started": counters.groups_started,
        "groups_trained": counters.groups_trained,
        "groups_open": open_groups,
        "groups_unaccounted": counters.unaccounted(open_groups),
        "dropped_groups": counters.dropped_groups,
        "reward_failures": counters.reward_failures,
        "scored_samples": counters.scored_samples,
        "stalls": counters.stalls,
        "steps_without_signal": counters.steps_without_signal,
    }


def summary_scalars(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's numbers, its counts by reason flattened (``dropped_groups_stale``), for the JSONL."""
    scalars = {k: v for k, v in summary.items() if isinstance(v, (int, float))}
    for name in ("dropped_groups", "reward_failures"):
        scalars.update({f"{name}_{k}": v for k, v in summary[name].items()})
    return scalars
