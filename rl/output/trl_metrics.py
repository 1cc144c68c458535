"""A step's metrics under the names TRL's ``GRPOTrainer`` logs them, beside Tailor's own, so the dashboards and
scripts of a TRL user read a Tailor run as they read a TRL one (TRL 1.16's definitions; docs/metrics.md lists both).

Each is the same quantity as TRL's, over what Tailor trains on: the kept samples of a step's groups (TRL keeps every
sample it generates; a shaped group launched more), tool calls over every launched episode (as TRL counts every
generated completion's)."""

from __future__ import annotations

import numpy as np

from rl.types import Group, Sample

SAME_AS = {  # TRL's name: Tailor's, one quantity under both names
    "reward": "reward_mean",
    "kl": "kl_ref",
    "clip_ratio/region_mean": "clip_fraction",
    "clip_ratio/low_mean": "clip_low_fraction",
    "clip_ratio/high_mean": "clip_high_fraction",
    "clip_ratio/low_min": "clip_low_seq_min",
    "clip_ratio/high_max": "clip_high_seq_max",
    "sampling/sampling_logp_difference/mean": "logprob_gap",  # |trainer - vLLM| log-prob of the sampled tokens
    "sampling/sampling_logp_difference/max": "logprob_gap_max",
    "sampling/importance_sampling_ratio/min": "correction_w_min",  # with algorithm.correction: the applied weights
    "sampling/importance_sampling_ratio/mean": "correction_w_mean",
    "sampling/importance_sampling_ratio/max": "correction_w_max",
    "completions/clipped_ratio": "truncated_frac",  # cut at the token cap
    "completions/mean_length": "response_len_mean",
    "completions/max_length": "response_len_max",
}


def completion_metrics(samples: list[Sample]) -> dict[str, float]:
    """TRL's ``completions/*`` lengths in tokens (tool results included, as TRL counts them) that Tailor has no name
    for: the shortest, and those of the samples that ended on their own, not at the token cap (0s when none did, as
    TRL logs)."""
    ended = np.asarray([len(s.tokens) for s in samples if not s.truncated], dtype=np.float64)
    ended = ended if ended.size else np.zeros(1)
    return {
        "completions/min_length": float(min(len(s.tokens) for s in samples)),
        "completions/mean_terminated_length": float(ended.mean()),
        "completions/min_terminated_length": float(ended.min()),
        "completions/max_terminated_length": float(ended.max()),
    }


def tool_metrics(stats: dict[str, float]) -> dict[str, float]:
    """TRL's ``tools/call_frequency`` (calls per launched sample) and ``tools/failure_frequency`` (failed calls per
    call) from a step's summed ``tool_calls``, ``tool_failures_<reason>`` and ``samples_launched``; none without
    tools."""
    if "tool_calls" not in stats:
        return {}
    calls = stats["tool_calls"]
    failed = sum(v for k, v in stats.items() if k.startswith("tool_failures_"))
    return {
        "tools/call_frequency": calls / max(stats.get("samples_launched") or stats["samples"], 1.0),
        "tools/failure_frequency": failed / calls if calls else 0.0,
    }


def aliases(record: dict[str, float]) -> dict[str, float]:
    """``SAME_AS``: TRL's names for the record's metrics that have one."""
    return {trl: record[ours] for trl, ours in SAME_AS.items() if ours in record}


def trained_tokens(groups: list[Group]) -> int:
    """Prompt and response tokens of the groups' samples, each sample's prompt counted (TRL's ``num_tokens`` sums
    this over the run)."""
    return sum(len(g.prompt_tokens) * len(g.samples) + sum(len(s.tokens) for s in g.samples) for g in groups)
