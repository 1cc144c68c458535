"""Run report: plots and a Markdown summary built from a run's ``metrics.jsonl``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rl.output.metrics import number, read_records

LINESTYLES = ("-", "--", ":")
LOGGED_PREFIX = "reward/"  # a step's mean of a reward function's log_metric values (rl.output.metrics.summarize_groups)


@dataclass(frozen=True)
class Panel:
    """One axes: keys on the left y-axis, optional keys on a right (twin) y-axis."""

    left: tuple[str, ...]
    right: tuple[str, ...] = ()
    ylabel: str = ""
    right_ylabel: str = ""


@dataclass(frozen=True)
class PlotSpec:
    """One PNG: a file stem, a title and stacked panels sharing the step axis."""

    name: str
    title: str
    panels: tuple[Panel, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for p in self.panels for k in (*p.left, *p.right))


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("reward", "Reward and accuracy", (Panel(("reward_mean", "accuracy"), ylabel="reward / accuracy"),)),
    PlotSpec(
        "response_length",
        "Response length and truncation",
        (
            Panel(
                ("response_len_p50", "response_len_p90", "response_len_max"),
                ("truncated_frac",),
                ylabel="tokens",
                right_ylabel="truncated fraction",
            ),
        ),
    ),
    PlotSpec(
        "tokens",
        "Generated vs kept tokens",
        (Panel(("generated_tokens", "kept_tokens"), ("waste_ratio",), ylabel="tokens", right_ylabel="waste ratio"),),
    ),
    PlotSpec(
        "staleness", "Staleness (policy versions)", (Panel(("staleness_mean", "staleness_max"), ylabel="versions"),)
    ),
    PlotSpec("weight_sync", "Weight sync", (Panel(("weight_sync_s",), ylabel="seconds"),)),
    PlotSpec(
        "throughput",
        "Trainer idle fraction and rollout throughput",
        (
            Panel(
                ("trainer_idle_frac",),
                ("rollout_tokens_per_s",),
                ylabel="trainer idle fraction",
                right_ylabel="rollout tokens/s",
            ),
        ),
    ),
    PlotSpec(
        "optimization",
        "Loss, gradient norm, approx. KL",
        (
            Panel(("loss",), ylabel="loss"),
            Panel(("grad_norm",), ylabel="grad norm"),
            Panel(("approx_kl",), ylabel="approx KL"),
        ),
    ),
)


@dataclass
class RunMetrics:
    """The records of one run, split by kind."""

    train: list[dict] = field(default_factory=list)
    eval: list[dict] = field(default_factory=list)
    summary: dict | None = None
    earlier_runs: int = 0
    bad_lines: int = 0


def series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key`` over the records that have it."""
    steps, values = [], []
    for r in records:
        step, value = number(r, "step"), number(r, key)
        if step is not None and value is not None:
            steps.append(step)
            values.append(value)
    return steps, values


def mean(records: list[dict], key: str) -> float | None:
    """Mean of ``key`` over the records that have it, or None."""
    _, values = series(records, key)
    return sum(values) / len(values) if values else None


def split_runs(records: list[dict]) -> list[list[dict]]:
    """Split records into runs: the logger appends, so a step or clock going backwards starts a new run."""
    runs: list[list[dict]] = []
    prev_step = prev_time = -math.inf
    for r in records:
        step = number(r, "step")
        time_s = number(r, "time_s")
        if not runs or step < prev_step or (time_s is not None and time_s < prev_time):
            runs.append([])
            prev_time = -math.inf
        runs[-1].append(r)
        prev_step = step
        prev_time = time_s if time_s is not None else prev_time
    return runs


def load_run(path: Path) -> RunMetrics:
    """The last run in ``metrics.jsonl`` that has train records."""
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}")
    records, bad = read_records(path)
    runs = [run for run in split_runs(records) if any(r.get("kind") == "train" for r in run)]
    if not runs:
        raise ValueError(f"{path} has no train records")
    out = RunMetrics(earlier_runs=len(runs) - 1, bad_lines=bad)
    for r in runs[-1]:
        kind = r.get("kind")
        if kind == "train":
            out.train.append(r)
        elif kind == "eval":
            out.eval.append(r)
        elif kind == "summary":
            out.summary = r
    return out


def draw_panel(ax, panel: Panel, train: list[dict]) -> list:
    """Plot a panel's keys on ``ax`` (and a twin axis); returns the line handles for the legend."""
    handles = []
    for i, key in enumerate(panel.left):
        steps, values = series(train, key)
        if steps:  # distinct line styles keep coinciding series (e.g. 0/1 reward and accuracy) visible
            handles += ax.plot(steps, values, marker=".", linestyle=LINESTYLES[i % 3], color=f"C{i}", label=key)
    ax.set_ylabel(panel.ylabel)
    right = [(key, *series(train, key)) for key in panel.right]
    right = [(key, steps, values) for key, steps, values in right if steps]
    if right:
        twin = ax.twinx()
        for i, (key, steps, values) in enumerate(right):
            color = f"C{len(panel.left) + i}"
            handles += twin.plot(steps, values, marker="x", linestyle="-.", color=color, label=key)
        twin.set_ylabel(panel.right_ylabel)
    ax.grid(True, alpha=0.3)
    return handles


def plot(spec: PlotSpec, run: RunMetrics, out: Path) -> None:
    """Render ``spec`` for ``run`` into the PNG ``out``."""
    height = 1.2 + 3.0 * len(spec.panels)
    fig = Figure(figsize=(8, height))  # fixed margins: constrained layout would double the render time
    fig.subplots_adjust(left=0.12, right=0.9, top=1 - 0.5 / height, bottom=0.6 / height, hspace=0.12)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(spec.panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, panel in zip(axes, spec.panels, strict=True):
        handles = draw_panel(ax, panel, run.train)
        if spec.name == "reward":
            steps, values = series(run.eval, "accuracy")
            if steps:
                handles += ax.plot(steps, values, "o", markersize=8, color="black", label="held-out accuracy (eval)")
        if handles:
            ax.legend(handles=handles, loc="best", fontsize="small")
    axes[-1].set_xlabel("step")
    fig.suptitle(spec.title)
    fig.savefig(out, dpi=100)


def logged_reward_keys(run: RunMetrics) -> list[str]:
    """The ``reward/NAME`` keys of the train records: what reward functions gave ``log_metric``."""
    return sorted({key for r in run.train for key in r if key.startswith(LOGGED_PREFIX)})


def logged_reward_plot(run: RunMetrics) -> PlotSpec:
    """A plot of every ``log_metric`` name of the run (none: a plot without keys, skipped)."""
    return PlotSpec("reward_logged", "Reward functions' log_metric values", (Panel(tuple(logged_reward_keys(run))),))


def write_plots(run: RunMetrics, plots_dir: Path) -> list[tuple[PlotSpec, Path]]:
    """One PNG per plot spec with any data; specs whose keys are all absent are skipped."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in (*PLOTS, logged_reward_plot(run)):
        if not any(series(run.train, key)[0] for key in spec.keys):
            continue
        out = plots_dir / f"{spec.name}.png"
        plot(spec, run, out)
        written.append((spec, out))
    return written


def fmt(value: float | None, spec: str = ".3f") -> str:
    """``value`` formatted with ``spec``, or "n/a"."""
    return "n/a" if value is None else format(value, spec)


def heldout_accuracy(run: RunMetrics) -> str:
    """'before -> after' held-out accuracy: from the summary line, else the first and last eval."""
    s = run.summary or {}
    before, after = number(s, "accuracy_before"), number(s, "accuracy_after")
    if before is not None and after is not None:
        return f"{before:.3f} -> {after:.3f}"
    return first_to_last(run.eval, "accuracy") or "n/a (no eval records)"


def heldout_pass_rows(run: RunMetrics) -> list[tuple[str, str]]:
    """With several samples a held-out problem (``eval.samples``): a row of pass@k at the most samples, first
    evaluation -> last; none otherwise."""
    several = [r for r in run.eval if (number(r, "samples_per_problem") or 1) > 1]
    if not several:
        return []
    key = f"pass@{int(several[-1]['samples_per_problem'])}"
    change = first_to_last(several, key)
    return [(f"held-out {key}", change)] if change else []


def first_to_last(evals: list[dict], key: str) -> str | None:
    """``key`` at the first evaluation that has it -> at the last, with their steps; None where none has it."""
    points = [(r["step"], value) for r in evals if (value := number(r, key)) is not None]
    if not points:
        return None
    (first, v0), (last, v1) = points[0], points[-1]
    if len(points) == 1:
        return f"{v0:.3f} (step {first}; only one eval)"
    return f"{v0:.3f} (step {first}) -> {v1:.3f} (step {last})"


def summary_rows(run: RunMetrics) -> list[tuple[str, str]]:
    """(name, value) rows of the report's summary table."""
    steps, _ = series(run.train, "step")
    times = [t for r in (*run.train, *run.eval) if (t := number(r, "time_s")) is not None]
    train_seconds = number(run.summary or {}, "train_seconds")
    wall = f"{fmt(max(times) if times else None, '.1f')} s since logger start"
    if train_seconds is not None:
        wall += f" ({train_seconds:.1f} s training)"
    _, stale_max = series(run.train, "staleness_max")
    return [
        ("train steps", f"{len(run.train)} (last step {max(steps):g})" if steps else str(len(run.train))),
        ("wall time", wall),
        ("held-out accuracy", heldout_accuracy(run)),
        *heldout_pass_rows(run),
        ("final train reward", last_value(run.train, "reward_mean")),
        ("mean step seconds", fmt(mean(run.train, "step_seconds"))),
        ("mean weight-sync seconds", fmt(mean(run.train, "weight_sync_s"))),
        (
            "mean staleness",
            f"{fmt(mean(run.train, 'staleness_mean'), '.2f')} (max {fmt(max(stale_max, default=None), 'g')})",
        ),
        ("rollout tokens/s (mean)", fmt(mean(run.train, "rollout_tokens_per_s"), ".0f")),
        ("trainer tokens/s (mean)", fmt(mean(run.train, "trainer_tokens_per_s"), ".0f")),
        *[(f"{key} (last)", last_value(run.train, key)) for key in logged_reward_keys(run)],
    ]


def last_value(records: list[dict], key: str) -> str:
    """``key``'s value in the last record that has it, with its step."""
    steps, values = series(records, key)
    return f"{values[-1]:.3f} (step {steps[-1]:g})" if values else "n/a"


def render_markdown(run_dir: Path, run: RunMetrics, plots: list[tuple[PlotSpec, Path]]) -> str:
    """The report's Markdown text; plot links are relative to ``run_dir``."""
    lines = [f"# Run report: {run_dir.resolve().name}", ""]
    notes = [f"{len(run.train)} train records", f"{len(run.eval)} eval records"]
    if run.earlier_runs:
        notes.append(f"{run.earlier_runs} earlier run(s) in the same file ignored")
    if run.bad_lines:
        notes.append(f"{run.bad_lines} unreadable line(s) skipped")
    lines += [f"From `metrics.jsonl`: {', '.join(notes)}.", "", "| metric | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in summary_rows(run)]
    lines += ["", "## Plots", ""]
    for spec, path in plots:
        rel = path.relative_to(run_dir).as_posix()
        lines += [f"### {spec.title}", "", f"![{spec.title}]({rel})", ""]
    if not plots:
        lines += ["(no plottable metrics)", ""]
    return "\n".join(lines)


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/plots/*.png`` and ``run_dir/report.md`` from ``run_dir/metrics.jsonl``; returns the report path.

    Raises FileNotFoundError when metrics.jsonl is missing and ValueError when it has no train records.
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir / "metrics.jsonl")
    plots = write_plots(run, run_dir / "plots")
    report = run_dir / "report.md"
    report.write_text(render_markdown(run_dir, run, plots))
    return report
