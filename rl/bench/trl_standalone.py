"""``python -m rl.bench.trl_standalone RECIPE [key=value ...] [--seed S] [--steps N] [--out FILE]``: TRL's
``GRPOTrainer`` on a recipe, alone in a fresh process, timed. It is the check on ``rl bench peer``'s TRL step time
that anyone can run, and the process the bench trains its peer in (the bench adds ``--snapshots``).

It trains what the bench trains for TRL (``rl.bench.trl_peer``: the recipe's model, training rows, reward
functions, sizes and algorithm as TRL's arguments) and imports nothing of Tailor beyond what builds them: no vLLM
engine, no Ray, torch's threads as TRL leaves them on the machine. The clock runs from ``on_train_begin`` to the end
of each optimizer step (writing snapshots excluded). The JSON holds the mean and median step time, the clock at
each step's end, TRL's arguments as passed (to rebuild the run in a script of one's own), the versions, and what
the process ran with (``process``: torch threads, CPUs, load average, the vLLM/Ray/Tailor modules imported).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rl.bench.trl_standalone", description="TRL's GRPOTrainer on a recipe, alone, timed"
    )
    parser.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    parser.add_argument("overrides", nargs="*", help="key.path=value overrides of the recipe")
    parser.add_argument("--seed", type=int, help="TRL's seed (default: the recipe's seed)")
    parser.add_argument("--steps", type=int, help="optimizer steps (default: the recipe's train.max_steps)")
    parser.add_argument("--seconds", type=float, help="also stop at the first step past this much training time")
    parser.add_argument("--snapshots", type=Path, help="write the policy's weights here (rl bench peer scores them)")
    parser.add_argument("--points", type=int, default=1, help="snapshots, evenly spaced, with --snapshots")
    parser.add_argument("--vllm", action="store_true", help="TRL's vLLM colocate generation (GPUs)")
    parser.add_argument("--out", type=Path, help="the JSON (default runs/trl-standalone-RECIPE-seedS.json)")
    return parser.parse_intermixed_args(argv)


def setup_output() -> None:
    """Log to the console as a script does; started by ``rl bench peer`` while it routes library output
    (``TAILOR_LOG_DIR`` set), route this process's into that folder's ``trl/`` the same way."""
    from rl.output import console

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if directory := os.environ.get(console.LOG_DIR_ENV):
        console.route(Path(directory) / "trl")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    setup_output()  # before TRL's import, which warns
    from rl.bench.trl_peer import PeerBudget, train_trl
    from rl.cli.common import recipe_path
    from rl.config import load_config
    from rl.output.provenance import stack_versions

    cfg = load_config(recipe_path(args.recipe), args.overrides)
    seed = cfg.seed if args.seed is None else args.seed
    budget = PeerBudget(steps=args.steps or cfg.train.max_steps, points=args.points, seconds=args.seconds)
    out = args.out or Path(f"runs/trl-standalone-{Path(args.recipe).stem}-seed{seed}.json")
    with tempfile.TemporaryDirectory(prefix="trl-output-") as trl_dir:  # TRL's output_dir: it saves nothing there
        run = train_trl(cfg, seed, budget, Path(trl_dir), args.vllm, args.snapshots)
    report = {
        "command": ["python", "-m", "rl.bench.trl_standalone", *argv],
        "versions": stack_versions(),
        **run.to_json(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"TRL GRPOTrainer: {run.steps} steps in {run.train_seconds:.1f} s of training, {run.step_seconds:.3f} s a step "
        f"(median {run.step_seconds_median:.3f} s), torch threads {run.process['torch_threads']}; wrote {out}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
