"""PNG plots of a rollout benchmark: response lengths, per-request timelines, generated tokens/s over time.

They read the run dicts of ``bench_rollout.json`` (``mode``, ``repeat``, ``samples`` with ``length``,
``start``, ``end`` in seconds from the batch start, ``fate``). Timelines and throughput show one repeat.
Throughput over time assumes each sample's tokens arrive at an even rate between its start and end.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from rl.bench.summary import modes_of

FATE_COLORS = {"kept": "tab:green", "discarded": "tab:orange", "aborted": "tab:red"}


def write_plots(runs: Sequence[dict], out_dir: Path, repeat: int = 0) -> list[Path]:
    """Write the three PNGs into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shown = [r for r in runs if r["repeat"] == repeat] or list(runs)
    plots = {
        "bench_lengths.png": length_histograms(runs),
        "bench_timeline.png": timelines(shown),
        "bench_throughput.png": throughput(shown),
    }
    paths = []
    for name, fig in plots.items():
        FigureCanvasAgg(fig).print_png(str(out_dir / name))
        paths.append(out_dir / name)
    return paths


def panel_label(ax: Axes, mode: str) -> None:
    """Name a panel above its top-left corner: a mode with knobs (``darts+sart@avg_redundancy=1.75@...``) is too
    long for a vertical axis label, where neighbouring panels' labels run into each other."""
    ax.set_title(mode, loc="left", fontsize="small")


def length_histograms(runs: Sequence[dict]) -> Figure:
    """Per mode (all repeats pooled): lengths of every launched sample and of the kept ones."""
    modes = modes_of(runs)
    fig = Figure(figsize=(8, 1.9 * len(modes) + 0.6), layout="constrained")
    axes = fig.subplots(len(modes), 1, sharex=True, squeeze=False)[:, 0]
    top = max((s["length"] for r in runs for s in r["samples"]), default=1)
    bins = np.linspace(0, top + 1, min(top + 2, 60))
    for ax, mode in zip(axes, modes, strict=True):
        samples = [s for r in runs if r["mode"] == mode for s in r["samples"]]
        ax.hist([s["length"] for s in samples], bins=bins, color="lightgray", label="all launched")
        ax.hist(
            [s["length"] for s in samples if s["fate"] == "kept"], bins=bins, color="tab:green", alpha=0.7, label="kept"
        )
        panel_label(ax, mode)
        ax.legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("response length (tokens)")
    fig.suptitle("Response lengths per mode")
    return fig


def timelines(runs: Sequence[dict]) -> Figure:
    """Per mode, one bar per request from its start to its end, coloured by fate, on one time axis."""
    rows = max((len(r["samples"]) for r in runs), default=1)
    fig = Figure(figsize=(10, max(2.2, rows / 50) * len(runs) + 0.6), layout="constrained")
    axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False)[:, 0]
    for ax, run in zip(axes, runs, strict=True):
        samples = sorted(run["samples"], key=lambda s: (s["group"], s["index"]))
        colors = [FATE_COLORS.get(s["fate"], "gray") for s in samples]
        widths = [max(s["end"] - s["start"], 1e-3) for s in samples]
        ax.barh(range(len(samples)), widths, left=[s["start"] for s in samples], height=1.0, color=colors)
        for y, (a, b) in enumerate(zip(samples, samples[1:], strict=False)):
            if a["group"] != b["group"]:
                ax.axhline(y + 0.5, color="lightgray", linewidth=0.5)
        ax.axvline(run["metrics"]["time_to_batch_s"], color="black", linestyle="--", linewidth=0.8)
        panel_label(ax, run["mode"])
        ax.set_yticks([])
        ax.invert_yaxis()
    axes[0].legend(handles=[Patch(color=c, label=f) for f, c in FATE_COLORS.items()], loc="lower right")
    axes[-1].set_xlabel("seconds from batch start (dashed: batch complete)")
    fig.suptitle("Requests over time (one bar per sample, grouped by prompt)")
    return fig


def generated_rate(samples: Sequence[dict], bins: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres (s) and generated tokens/s in each bin, spreading each sample's tokens over its span."""
    end = max((s["end"] for s in samples), default=0.0)
    edges = np.linspace(0.0, max(end, 1e-6), bins + 1)
    cumulative = np.zeros_like(edges)
    for s in samples:
        span = max(s["end"] - s["start"], 1e-9)
        cumulative += s["length"] * np.clip((edges - s["start"]) / span, 0.0, 1.0)
    return (edges[:-1] + edges[1:]) / 2, np.diff(cumulative) / np.diff(edges)


def throughput(runs: Sequence[dict]) -> Figure:
    """Generated tokens/s over time, one line per mode."""
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    for run in runs:
        t, rate = generated_rate(run["samples"])
        ax.plot(t, rate, label=run["mode"])
    ax.set_xlabel("seconds from batch start")
    ax.set_ylabel("generated tokens/s")
    ax.legend()
    ax.set_title("Generated tokens per second (even rate within each sample assumed)")
    return fig
