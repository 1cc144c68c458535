"""``rl bench train``: one recipe trained under several variants (staleness, shaping) on the same budget.

Every variant is the recipe plus a few ``key.path=value`` overrides, run one after another in this
process with ``max_steps`` optimizer steps each. All configs are validated before the first run starts.
Per variant it reports steps per hour, samples per hour, the reward curve, held-out accuracy before and
after, and the trainer and rollout idle fractions; a Markdown table (ratios against the first variant),
a JSON file and an overlay plot of the reward curves go to ``out_dir``.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rl.bench.stopped import BenchStopped
from rl.config import RunConfig, load_config
from rl.output.provenance import stack_versions
from rl.output.report import fmt, load_run, mean, series

if TYPE_CHECKING:
    from rl.loop.actors import ActorStarter


@dataclass(frozen=True)
class TrainVariant:
    name: str
    overrides: tuple[str, ...]


SHAPED = ("shaping.policy=darts+sart",)


def default_variants(staleness: int) -> list[TrainVariant]:
    """Staleness 0 vs ``staleness``, each with shaping off (plain) and on (darts+sart)."""
    sync, stale = ("train.max_staleness=0", "train.sync_every=1"), (f"train.max_staleness={staleness}",)
    return [
        TrainVariant("sync", sync + ("shaping.policy=plain",)),
        TrainVariant(f"stale{staleness}", stale + ("shaping.policy=plain",)),
        TrainVariant("sync+darts+sart", sync + SHAPED),
        TrainVariant(f"stale{staleness}+darts+sart", stale + SHAPED),
    ]


def parse_variant(text: str) -> TrainVariant:
    """``NAME:key=value,key=value`` (``NAME:`` alone means the recipe unchanged)."""
    name, sep, rest = text.partition(":")
    if not sep or not name:
        raise ValueError(f"variant {text!r} must look like NAME:key.path=value,key.path=value")
    return TrainVariant(name, tuple(item.strip() for item in rest.split(",") if item.strip()))


def variant_configs(
    recipe: Path, variants: list[TrainVariant], common: list[str], out_dir: Path
) -> list[tuple[TrainVariant, RunConfig]]:
    """Each variant's validated config, written under ``out_dir/NAME``; fails before anything runs."""
    if len({v.name for v in variants}) != len(variants):
        raise ValueError(f"variant names must be unique: {[v.name for v in variants]}")
    placement = [f"output_dir={out_dir}"]
    return [(v, load_config(recipe, [*common, *v.overrides, *placement, f"name={v.name}"])) for v in variants]


def variant_result(variant: TrainVariant, cfg: RunConfig, summary: dict[str, Any]) -> dict[str, Any]:
    """What the bench keeps of one run: throughput, idle fractions and the reward curve."""
    run = load_run(cfg.run_dir / "metrics.jsonl")
    steps, rewards = series(run.train, "reward_mean")
    _, step_seconds = series(run.train, "step_seconds")
    seconds = float(summary["train_seconds"])
    samples = sum(r.get("samples", 0.0) for r in run.train)
    final = rewards[-max(1, len(rewards) // 5) :]
    return {
        "name": variant.name,
        "overrides": list(variant.overrides),
        "steps": summary["steps"],
        "train_seconds": seconds,
        "steps_per_hour": 3600.0 * summary["steps"] / max(seconds, 1e-9),
        "samples_per_hour": 3600.0 * samples / max(seconds, 1e-9),
        "accuracy_before": summary["accuracy_before"],
        "accuracy_after": summary["accuracy_after"],
        "final_reward": sum(final) / len(final) if final else None,
        "trainer_idle_frac": mean(run.train, "trainer_idle_frac"),
        "rollout_idle_frac": mean(run.train, "rollout_idle_frac"),
        "waste_ratio": mean(run.train, "waste_ratio"),
        "weight_sync_s": mean(run.train, "weight_sync_s"),
        "curve": {"step": steps, "reward_mean": rewards, "step_seconds": step_seconds},
    }


def markdown(results: list[dict[str, Any]]) -> str:
    """A table of the variants with steps/hour ratios against the first one."""
    base = results[0]["steps_per_hour"]
    head = [
        "variant",
        "steps/h",
        "vs first",
        "samples/h",
        "held-out acc before → after",
        "final reward",
        "trainer idle",
        "rollout idle",
        "waste",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [
            r["name"],
            f"{r['steps_per_hour']:.0f}",
            f"{r['steps_per_hour'] / base:.2f}×",
            f"{r['samples_per_hour']:.0f}",
            f"{r['accuracy_before']:.3f} → {r['accuracy_after']:.3f}",
            fmt(r["final_reward"]),
            fmt(r["trainer_idle_frac"], ".2f"),
            fmt(r["rollout_idle_frac"], ".2f"),
            fmt(r["waste_ratio"], ".2f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


SMOOTHING = 10  # steps in the trailing mean drawn over the raw reward curves


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to ``window`` values (shorter at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_curves(results: list[dict[str, Any]], out: Path) -> None:
    """Reward curves of all variants against step and against wall time, side by side."""
    fig = Figure(figsize=(11, 4))
    FigureCanvasAgg(fig)
    by_step, by_time = fig.subplots(1, 2, sharey=True)
    for i, r in enumerate(results):
        curve = r["curve"]
        wall = list(accumulate(curve["step_seconds"]))
        rewards, smooth = curve["reward_mean"], moving_average(curve["reward_mean"], SMOOTHING)
        by_step.plot(curve["step"], rewards, color=f"C{i}", alpha=0.25)
        by_step.plot(curve["step"], smooth, color=f"C{i}", label=f"{r['name']} ({SMOOTHING}-step mean)")
        by_time.plot(wall[: len(rewards)], smooth, color=f"C{i}", label=r["name"])
    by_step.set_xlabel("optimizer step")
    by_time.set_xlabel("wall time (s)")
    by_step.set_ylabel("train reward (batch mean)")
    for ax in (by_step, by_time):
        ax.grid(True, alpha=0.3)
    by_step.legend(fontsize="small")
    fig.suptitle("rl bench train: reward curves")
    fig.savefig(out, dpi=100)


def run_train_bench(
    recipe: Path,
    variants: list[TrainVariant],
    common: list[str],
    out_dir: Path,
    start_actors: ActorStarter | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """Train every variant in turn; write ``bench_train.json``, ``bench_train.md`` and ``bench_train.png``.
    ``start_actors``: how each variant's actors start (see ``Driver``; default: Ray actors of its own)."""
    from rl.loop.driver import RunFailed, run_training

    configs = variant_configs(recipe, variants, common, out_dir)
    results = []
    for variant, cfg in configs:
        print(f"[bench train] {variant.name}: {' '.join(variant.overrides) or '(recipe as is)'}", flush=True)
        try:
            summary = run_training(cfg, start_actors=start_actors)
        except RunFailed as e:
            raise BenchStopped(f"variant {variant.name!r} stopped: {e} (its run: {cfg.run_dir})") from None
        if stopped := summary["stopped_by"]:  # SIGTERM/SIGINT stopped the variant: the bench stops too
            print(f"[bench train] {stopped} stopped {variant.name}: the bench stops, no results written", flush=True)
            raise SystemExit(128 + signal.Signals[stopped])
        results.append(variant_result(variant, cfg, summary))
    table = markdown(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    about = {"recipe": str(recipe), "results": results, "versions": stack_versions()}
    (out_dir / "bench_train.json").write_text(json.dumps(about, indent=2))
    (out_dir / "bench_train.md").write_text(f"# rl bench train: {recipe.name}\n\n{table}\n")
    plot_curves(results, out_dir / "bench_train.png")
    return results, table
