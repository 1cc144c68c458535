"""Aggregate benchmark passes over repeats: min/median/max per metric, ratios against baselines, Markdown.

A run is a dict ``{"mode": str, "repeat": int, "metrics": {name: float}, ...}`` (one timed pass),
optionally with ``"group_rewards"``: the mean kept reward of each prompt's group (``None`` if unscored).
Ratios are taken repeat by repeat (a mode against the baseline's pass of the same repeat), then
summarized; they are oriented so that > 1 means better than the baseline. Rewards are compared prompt
by prompt (every mode of a repeat runs the same prompts), which cancels the prompts' own difficulty.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from rl.bench.records import EPISODE_FIELDS

Stat = dict[str, float]
BASELINES = ("plain", "raw")
# ratio name -> (metric, higher is better)
RATIOS: dict[str, tuple[str, bool]] = {
    "speedup": ("time_to_batch_s", False),
    "throughput": ("gen_tokens_per_s", True),
    "model_speedup": ("model_time_to_batch_s", False),
    "generated_fewer": ("generated_tokens", False),
    "kept_fewer": ("kept_tokens", False),
    "steady_speedup": ("steady_kept_groups_per_s", True),
}
LENGTH_KEYS = ("p50", "p90", "p99", "max")


def stat(values: Iterable[float]) -> Stat:
    """min / median / max of the finite values (NaN for all three when there are none)."""
    arr = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return {"min": math.nan, "median": math.nan, "max": math.nan, "n": 0.0}
    return {"min": float(arr.min()), "median": float(np.median(arr)), "max": float(arr.max()), "n": float(arr.size)}


def modes_of(runs: Sequence[dict]) -> list[str]:
    """Modes in order of first appearance."""
    return list(dict.fromkeys(r["mode"] for r in runs))


def summarize(runs: Sequence[dict]) -> dict[str, dict[str, Stat]]:
    """Per mode, per metric: min/median/max over the repeats."""
    out: dict[str, dict[str, Stat]] = {}
    for mode in modes_of(runs):
        mine = [r["metrics"] for r in runs if r["mode"] == mode]
        keys = list(dict.fromkeys(k for m in mine for k in m))
        out[mode] = {k: stat(m[k] for m in mine if k in m) for k in keys}
    return out


def same_repeat(runs: Sequence[dict], base: str) -> dict[str, list[tuple[dict, dict]]]:
    """Per mode: (its run, ``base``'s run of the same repeat) for every repeat both ran."""
    by_key = {(r["mode"], r["repeat"]): r for r in runs}
    pairs: dict[str, list[tuple[dict, dict]]] = {mode: [] for mode in modes_of(runs)}
    for (mode, repeat), run in by_key.items():
        if (ref := by_key.get((base, repeat))) is not None:
            pairs[mode].append((run, ref))
    return pairs


def ratios(runs: Sequence[dict], base: str) -> dict[str, dict[str, Stat]]:
    """Per mode, per ratio in ``RATIOS``: the mode against ``base`` in the same repeat, over repeats."""
    out: dict[str, dict[str, Stat]] = {}
    for mode, pairs in same_repeat(runs, base).items():
        out[mode] = {}
        for name, (metric, higher) in RATIOS.items():
            values = []
            for run, ref in pairs:
                mine, theirs = run["metrics"], ref["metrics"]
                if metric not in mine or metric not in theirs:
                    continue
                num, den = (mine[metric], theirs[metric]) if higher else (theirs[metric], mine[metric])
                values.append(num / den if den > 0 else math.nan)
            if values:
                out[mode][name] = stat(values)
    return out


def reward_difference(runs: Sequence[dict], base: str) -> dict[str, Stat]:
    """Per mode: its kept reward minus ``base``'s, paired prompt by prompt within each repeat.

    ``mean`` is the mean of the paired differences, ``se`` its standard error (sample std / sqrt(n)),
    ``n`` the number of pairs; a mode with fewer than two scored pairs is left out.
    """
    out: dict[str, Stat] = {}
    for mode, pairs in same_repeat(runs, base).items():
        diffs = []
        for run, ref in pairs:
            mine, theirs = run.get("group_rewards"), ref.get("group_rewards")
            if mine and theirs:
                diffs += [a - b for a, b in zip(mine, theirs, strict=True) if a is not None and b is not None]
        if len(diffs) >= 2:
            arr = np.asarray(diffs, dtype=float)
            se = float(arr.std(ddof=1) / math.sqrt(arr.size))
            out[mode] = {"mean": float(arr.mean()), "se": se, "n": float(arr.size)}
    return out


def build_summary(runs: Sequence[dict]) -> dict:
    """Everything the tables show: per-mode stats, ratios and reward differences against each baseline run."""
    bases = [base for base in BASELINES if base in set(modes_of(runs))]
    return {
        "modes": summarize(runs),
        "ratios": {base: ratios(runs, base) for base in bases},
        "reward_vs": {base: reward_difference(runs, base) for base in bases},
        "repeats": len({r["repeat"] for r in runs}),
    }


def median(s: Stat | None, digits: int = 2) -> str:
    """The median, or ``–`` when missing."""
    if not s or not math.isfinite(s["median"]):
        return "–"
    return f"{s['median']:.{digits}f}"


def fmt(s: Stat | None, digits: int = 2) -> str:
    """``median`` or ``median (min–max)``; ``–`` when missing."""
    med = median(s, digits)
    if med == "–" or s["min"] == s["max"]:
        return med
    return f"{med} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def signed(d: Stat | None) -> str:
    """``mean ± se`` of a reward difference, or ``–`` when missing."""
    if not d:
        return "–"
    return f"{d['mean']:+.3f} ± {d['se']:.3f}"


def _lengths(stats: dict[str, Stat], prefix: str) -> str:
    return "/".join(median(stats.get(f"{prefix}_{k}"), 0) for k in LENGTH_KEYS)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(summary: dict) -> str:
    """Markdown tables: time and throughput (with ratios); shaping counts, lengths and reward; with episodes, their
    turns and tools."""
    modes, rat = summary["modes"], summary["ratios"]
    bases = [b for b in BASELINES if b in rat]
    model = any("model_time_to_batch_s" in stats for stats in modes.values())
    head = ["mode", "time to batch s"] + [f"speed-up vs {b}" for b in bases]
    head += ["gen tok/s"] + [f"gen tok/s vs {b}" for b in bases] + ["kept tok/s", "longest-sample tok/s"]
    if model:
        head += ["model time s"] + [f"model speed-up vs {b}" for b in bases]
    steady = any("steady_kept_groups_per_s" in stats for stats in modes.values())
    if steady:
        head += ["steady kept groups/s"] + [f"steady vs {b}" for b in bases]
    lines = [
        f"Median (min–max) over {summary['repeats']} repeat(s); ratios are taken within a repeat, > 1 is better.",
        "",
        _row(head),
        _row(["---"] * len(head)),
    ]
    for mode, stats in modes.items():
        cells = [mode, fmt(stats.get("time_to_batch_s"))]
        cells += [fmt(rat[b][mode].get("speedup")) for b in bases]
        cells += [fmt(stats.get("gen_tokens_per_s"), 0)]
        cells += [fmt(rat[b][mode].get("throughput")) for b in bases]
        cells += [fmt(stats.get("kept_tokens_per_s"), 0), fmt(stats.get("longest_tokens_per_s"), 1)]
        if model:
            cells += [fmt(stats.get("model_time_to_batch_s"), 3)]
            cells += [fmt(rat[b][mode].get("model_speedup")) for b in bases]
        if steady:
            cells += [fmt(stats.get("steady_kept_groups_per_s"), 3)]
            cells += [fmt(rat[b][mode].get("steady_speedup")) for b in bases]
        lines.append(_row(cells))
    head2 = ["mode", "launched", "kept", "discarded", "aborted", "pruned", "truncated kept", "groups at cap", "waste"]
    head2 += [f"generated, × fewer than {b}" for b in bases] + [f"kept, × fewer than {b}" for b in bases]
    head2 += ["kept len p50/p90/p99/max", "all len p50/p90/p99/max", "reward", "scored"]
    head2 += [f"reward − {b} per prompt ± SE" for b in bases]
    lines += ["", _row(head2), _row(["---"] * len(head2))]
    reward_vs = summary["reward_vs"]
    for mode, stats in modes.items():
        counts = [fmt(stats.get(k), 0) for k in ("launched", "kept", "discarded", "aborted", "pruned")]
        cells = [mode, *counts, fmt(stats.get("truncated_kept"), 0), fmt(stats.get("groups_at_cap"), 0)]
        cells += [fmt(stats.get("waste_ratio"), 3)]
        cells += [fmt(rat[b][mode].get("generated_fewer")) for b in bases]
        cells += [fmt(rat[b][mode].get("kept_fewer")) for b in bases]
        cells += [_lengths(stats, "kept_len"), _lengths(stats, "len")]
        cells += [fmt(stats.get("reward_mean"), 3), median(stats.get("rewarded"), 0)]
        cells += [signed(reward_vs[b].get(mode)) if mode != b else "–" for b in bases]
        lines.append(_row(cells))
    if any("turns_per_episode" in stats for stats in modes.values()):
        lines += ["", *_episodes(modes)]
    return "\n".join(lines) + "\n"


def _episodes(modes: dict[str, dict[str, Stat]]) -> list[str]:
    """A table of the multi-turn episodes, per launched episode (rl/bench/records.py ``EPISODE_FIELDS``)."""
    head = ["mode", "time to batch s", "turns", "tool calls", "tool s", "decode tokens", "launched", "kept"]
    lines = ["Per launched episode (means):", "", _row(head), _row(["---"] * len(head))]
    for mode, stats in modes.items():
        cells = [mode, fmt(stats.get("time_to_batch_s"))]
        cells += [fmt(stats.get(f"{k}_per_episode"), d) for k, d in zip(EPISODE_FIELDS, (2, 2, 3, 1), strict=True)]
        cells += [fmt(stats.get("launched"), 0), fmt(stats.get("kept"), 0)]
        lines.append(_row(cells))
    return lines
