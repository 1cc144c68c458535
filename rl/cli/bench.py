"""``rl bench``: the benchmarks that run Tailor, ``rollout`` (one batch per shaping mode on one engine), ``train``
(a recipe under several variants), ``peer`` (against TRL's GRPOTrainer), ``soak`` (training through injected faults)
and ``dp-balance`` (data-parallel splits); the decode-clock commands are in ``bench_decode``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rl.bench.stopped import BenchStopped
from rl.cli.bench_decode import add_decode_commands
from rl.cli.common import add_verbose, checked_config, comma_list, integers, positive, recipe_path, route_output

if TYPE_CHECKING:
    from rl.config import RunConfig


def add_bench(sub: argparse._SubParsersAction) -> None:
    """``rl bench`` and its commands."""
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_cmd", required=True)
    rollout = bench.add_parser("rollout", help="time one batch of rollouts per shaping mode on one engine")
    rollout.add_argument(
        "--model",
        help="builtin:NAME, a local HF directory (default builtin:arith-tiny), or a config-only dummy:NAME "
        "(qwen2.5-7b, qwen2.5-1.5b, smollm2-135m, tiny: random weights and prompts, needs --lengths)",
    )
    rollout.add_argument(
        "--lengths",
        help="dummy models: response lengths from a length-model preset (arith_smollm2) or fitted to a "
        "bench_rollout.json, scaled to --max-tokens; SART modes need scorer=none there: use darts@long_wait=1.5",
    )
    rollout.add_argument("--prompts", type=int, help="B: groups per batch (default 16)")
    rollout.add_argument("--m-keep", type=int, help="M: kept samples per group (default 8)")
    rollout.add_argument("--max-tokens", type=int, help="response length cap (default 48)")
    rollout.add_argument("--temperature", type=float, help="sampling temperature (default 1.0)")
    rollout.add_argument(
        "--modes",
        help="comma list of raw,plain,darts,sart,darts+sart,darts+tie,darts+sart+tie (default all but shadow) "
        "and shadow (launches as many samples as the widest mode, aborts none: natural lengths); a shaped mode "
        "may carry its own shaping knobs: darts+sart@long_wait=1.5",
    )
    rollout.add_argument("--repeats", type=int, help="timed passes per mode, each on new prompts (default 1)")
    rollout.add_argument("--seed", type=int, help="prompt seed of the first repeat (default 0)")
    rollout.add_argument("--out", type=Path, help="output directory (default runs/bench-rollout)")
    rollout.add_argument("--dataset", choices=["arith", "longtail"], help="built-in prompt set (default arith)")
    rollout.add_argument(
        "--recipe", help="draw prompts, framing and rewards from a recipe's train split (model and sampling too)"
    )
    rollout.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override")
    rollout.add_argument("--reward", help="reward spec for kept samples, or 'none' (default: the dataset's)")
    rollout.add_argument(
        "--cost-model", help="decode profile JSON, or a shipped profile's name: add cost-model estimates"
    )
    rollout.add_argument("--cpu-bind", help="CPU only: the cores this process and its engine run on (e.g. 0 or 0-1)")
    rollout.add_argument(
        "--steady-batches",
        type=int,
        help="also run N batches per mode with B groups always in flight: kept groups per second (default 0: off)",
    )
    rollout.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    graphs = rollout.add_mutually_exclusive_group()
    graphs.add_argument(
        "--cuda-graph",
        dest="enforce_eager",
        action="store_false",
        default=None,
        help="compile the model: CUDA graphs on a GPU, torch.compile on the CPU",
    )
    graphs.add_argument("--enforce-eager", dest="enforce_eager", action="store_true", help="run the model eagerly")
    rollout.add_argument(
        "--shaping",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ShapingConfig knob for the shaped modes, e.g. avg_redundancy=1.25 (repeatable; over a --recipe's own)",
    )
    add_verbose(rollout)
    rollout.set_defaults(func=cmd_bench_rollout)
    train = bench.add_parser("train", help="train a recipe under several variants (staleness, shaping), same budget")
    train.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    train.add_argument("overrides", nargs="*", help="key.path=value overrides applied to every variant")
    train.add_argument("--steps", type=positive, help="optimizer steps per variant (default: the recipe's max_steps)")
    train.add_argument("--staleness", type=int, default=2, help="k of the default variants (default 2)")
    train.add_argument(
        "--variant",
        action="append",
        help="NAME:key=value,key=value (repeatable); default: sync, stale{k}, each with plain and darts+sart",
    )
    train.add_argument("--out", type=Path, default=Path("runs/bench-train"), help="output directory")
    add_verbose(train)
    train.set_defaults(func=cmd_bench_train)
    _add_bench_peer(bench)
    _add_bench_soak(bench)
    _add_bench_dp_balance(bench)
    add_decode_commands(bench)


def cmd_bench_rollout(args: argparse.Namespace) -> int:
    from rl.bench.rollout import RolloutBenchConfig, run_rollout_bench
    from rl.config import apply_overrides, load_config

    def recipe_defaults() -> dict:
        """With --recipe: its file and overrides, and its model, sampling and shaping knobs as defaults for the
        bench's own (the modes decide the policy, M and priorities; the bench has no trainer for idle_target)."""
        path = recipe_path(args.recipe)
        run = load_config(path, args.set)
        knobs = run.shaping.model_dump(exclude={"policy", "m_keep", "priority", "warmup_steps", "idle_target"})
        return {
            "recipe": path,
            "recipe_overrides": args.set,
            "model": run.model.path,
            "max_tokens": run.rollout.max_tokens,
            "temperature": run.rollout.temperature,
            "shaping": knobs,
        }

    defaults: dict | None = {}
    if args.recipe:
        defaults = checked_config(recipe_defaults)
        if defaults is None:
            return 2
    elif args.set:
        print("invalid benchmark options: --set overrides a recipe's keys and needs --recipe", file=sys.stderr)
        return 2
    given = {
        "model": args.model,
        "prompts": args.prompts,
        "m_keep": args.m_keep,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "modes": comma_list(args.modes) if args.modes else None,
        "repeats": args.repeats,
        "seed": args.seed,
        "out_dir": args.out,
        "dataset": args.dataset,
        "reward": args.reward,
        "cost_model": args.cost_model,
        "cpu_threads_bind": args.cpu_bind,
        "lengths": args.lengths,
        "steady_batches": args.steady_batches,
        "enforce_eager": args.enforce_eager,
        "plots": not args.no_plots,
    }
    options = {**defaults, **{k: v for k, v in given.items() if v is not None}}

    def build() -> RolloutBenchConfig:
        shaping = apply_overrides(options.pop("shaping", {}), args.shaping)
        return RolloutBenchConfig(**options, **({"shaping": shaping} if shaping else {}))

    cfg = checked_config(build, "invalid benchmark options", _rollout_option)
    if cfg is None:
        return 2
    from rl.inputs.preflight import check_model_path, check_output_dir

    check_model_path(cfg.model, "model.path" if args.recipe and not args.model else "--model")
    check_output_dir(cfg.out_dir, f"--out {str(cfg.out_dir)!r}")
    route_output(args, cfg.out_dir / "logs")
    result = run_rollout_bench(cfg)
    print(result["table"])
    print(f"wrote {cfg.out_dir / 'bench_rollout.json'} and {cfg.out_dir / 'bench_rollout.md'}")
    return 0


ROLLOUT_FLAGS = {
    "out_dir": "--out",
    "cpu_threads_bind": "--cpu-bind",
    "plots": "--no-plots",
    "recipe_overrides": "--set",
}


def _rollout_option(loc: tuple) -> str:
    """The ``rl bench rollout`` option of a ``RolloutBenchConfig`` field (``m_keep`` -> ``--m-keep``); a shaping
    knob keeps its key (``shaping.long_wait``: set by ``--shaping``, or by the recipe)."""
    if not loc:
        return ""
    if loc[0] == "shaping":
        return ".".join(map(str, loc))
    return ROLLOUT_FLAGS.get(str(loc[0]), "--" + str(loc[0]).replace("_", "-"))


def cmd_bench_train(args: argparse.Namespace) -> int:
    from rl.bench.train import default_variants, parse_variant, run_train_bench, variant_configs
    from rl.config import load_config
    from rl.inputs.preflight import check_output_dir, preflight

    common = [f"train.max_steps={args.steps}", *args.overrides] if args.steps else list(args.overrides)

    def build() -> tuple[Path, list]:
        variants = [parse_variant(v) for v in args.variant] if args.variant else default_variants(args.staleness)
        recipe = recipe_path(args.recipe)
        variant_configs(recipe, variants, common, args.out)  # every config checked before any run starts
        return recipe, variants

    checked = checked_config(build)
    if checked is None:
        return 2
    recipe, variants = checked
    preflight(load_config(recipe, common), say=False)  # the recipe's inputs with the command's overrides, first
    check_output_dir(args.out, f"--out {str(args.out)!r}")
    route_output(args, args.out / "logs")
    try:
        _, table = run_train_bench(recipe, variants, common, args.out)
    except BenchStopped as e:
        return _stopped("rl bench train", e, args, args.out)
    print(table)
    print(f"wrote {args.out / 'bench_train.json'}, {args.out / 'bench_train.md'} and {args.out / 'bench_train.png'}")
    return 0


def _stopped(command: str, e: BenchStopped, args: argparse.Namespace, out: Path) -> int:
    """A benchmark one of whose runs ended without results: one line, exit code 1."""
    print(f"{command} stopped: {e}; its output: {'above' if args.verbose else out / 'logs'}", file=sys.stderr)
    return 1


def cmd_bench_peer(args: argparse.Namespace) -> int:
    from rl.bench.peer import PeerOptions, check, default_variants, run_peer_bench
    from rl.bench.train import parse_variant
    from rl.config import load_config
    from rl.inputs.preflight import check_output_dir, preflight

    def build() -> tuple[Path, PeerOptions]:
        opts = PeerOptions(
            seeds=integers(args.seeds, "--seeds"),
            out_dir=args.out or Path(f"runs/bench-peer-{Path(args.recipe).stem}"),
            overrides=list(args.overrides),
            variants=[parse_variant(v) for v in args.variant] if args.variant else default_variants(),
            steps=args.steps,
            peer_steps=args.peer_steps,
            equal_time=args.equal_time,
            points=args.points,
            target=args.target_accuracy,
            use_vllm=args.peer_vllm,
            peer_only=args.peer_only,
        )
        recipe = recipe_path(args.recipe)
        check(recipe, opts)  # every config, Tailor's and TRL's, before any run starts
        return recipe, opts

    try:
        checked = checked_config(build)
    except ImportError as e:
        print(f"rl bench peer needs TRL: pip install 'tailor-rl[peer]' ({e})", file=sys.stderr)
        return 2
    if checked is None:
        return 2
    recipe, opts = checked
    preflight(load_config(recipe, opts.overrides), say=False)  # the recipe's inputs, before any run
    check_output_dir(opts.out_dir, f"--out {str(opts.out_dir)!r}")
    route_output(args, opts.out_dir / "logs")
    try:
        _, table = run_peer_bench(recipe, opts)
    except BenchStopped as e:
        return _stopped("rl bench peer", e, args, opts.out_dir)
    print(table)
    print(f"wrote {opts.out_dir / 'bench_peer.json'}, {opts.out_dir / 'bench_peer.md'} and bench_peer.png")
    return 0


def _add_bench_peer(bench: argparse._SubParsersAction) -> None:
    peer = bench.add_parser("peer", help="Tailor's variants against TRL's GRPOTrainer: held-out accuracy vs wall time")
    peer.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    peer.add_argument("overrides", nargs="*", help="key.path=value overrides applied to every system")
    peer.add_argument("--seeds", default="0,1", help="comma list of seeds; every system runs each (default 0,1)")
    peer.add_argument("--steps", type=positive, help="Tailor's optimizer steps (default: the recipe's max_steps)")
    peer.add_argument("--peer-steps", type=positive, help="TRL's steps (default: Tailor's), its cap with --equal-time")
    peer.add_argument(
        "--equal-time", action="store_true", help="TRL trains as long as the seed's first Tailor variant (wall time)"
    )
    peer.add_argument("--points", type=positive, default=6, help="held-out evaluations per run besides step 0")
    peer.add_argument("--target-accuracy", type=float, help="default: TRL's final accuracy, mean over seeds")
    peer.add_argument(
        "--variant",
        action="append",
        help="Tailor variant NAME:key=value,key=value (repeatable); default: default: and "
        "sync:train.max_staleness=0,train.sync_every=1",
    )
    peer.add_argument(
        "--peer-vllm", action="store_true", help="TRL generates with vLLM colocate (a GPU; refused without one)"
    )
    peer.add_argument(
        "--peer-only", action="store_true", help="TRL alone, no Tailor variant (to time TRL in the bench and alone)"
    )
    peer.add_argument("--out", type=Path, help="output directory (default runs/bench-peer-RECIPE)")
    add_verbose(peer)
    peer.set_defaults(func=cmd_bench_peer)


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from rl.bench.soak import SoakFailed, SoakSchedule, run_soak, soak_settings, soak_table, write_soak
    from rl.config import load_config
    from rl.inputs.preflight import preflight

    schedule = SoakSchedule(steps=args.steps)
    if args.steps < schedule.min_steps:
        print(
            f"invalid benchmark options: --steps must be at least {schedule.min_steps} to strike every fault and "
            "train after it",
            file=sys.stderr,
        )
        return 2
    out = args.out or Path(f"runs/bench-soak-{Path(args.recipe).stem}")
    cfg = checked_config(lambda: load_config(recipe_path(args.recipe), soak_settings(schedule, out, args.overrides)))
    if cfg is None:
        return 2
    preflight(cfg, say=False)  # the run's inputs, before its first process starts
    try:
        result = run_soak(args.recipe, schedule, out, args.overrides)
    except SoakFailed as e:
        print(f"rl bench soak stopped: {e}", file=sys.stderr)
        return 1
    write_soak(result, out)
    print(soak_table(result))
    print(f"wrote {out / 'soak.json'} and {out / 'soak.md'}")
    return 0 if result.passed else 1


def _add_bench_soak(bench: argparse._SubParsersAction) -> None:
    soak = bench.add_parser("soak", help="train while killing workers, failing rewards and losses, killing the run")
    soak.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    soak.add_argument("overrides", nargs="*", help="key.path=value overrides for the run")
    soak.add_argument("--steps", type=positive, default=120, help="optimizer steps (default 120; at least 90)")
    soak.add_argument("--out", type=Path, help="output directory (default runs/bench-soak-RECIPE)")
    soak.set_defaults(func=cmd_bench_soak)


def cmd_bench_dp_balance(args: argparse.Namespace) -> int:
    from rl.bench.dp_balance import BalanceBenchOptions, markdown, run_dp_balance_bench
    from rl.config import load_config
    from rl.inputs.preflight import check_model_path, check_output_dir

    def build() -> tuple[RunConfig, list[int]]:
        cfg = load_config(recipe_path(args.recipe), [*args.overrides, f"train.num_workers={args.ranks}"])
        if args.groups < args.ranks:
            raise ValueError(f"--groups must be at least --ranks ({args.ranks})")
        return cfg, integers(args.seeds, "--seeds")

    checked = checked_config(build)
    if checked is None:
        return 2
    cfg, seeds = checked
    model_dir = check_model_path(cfg.model.path)
    out = args.out or Path(f"runs/bench-dp-balance-{Path(args.recipe).stem}")
    check_output_dir(out, f"--out {str(out)!r}")
    opts = BalanceBenchOptions(
        steps=args.steps,
        seeds=seeds,
        groups=args.groups,
        max_len=args.max_len,
        out_dir=out,
    )
    route_output(args, out / "logs")
    result = run_dp_balance_bench(cfg, model_dir, opts)
    print(markdown(result["modes"]))
    print(f"wrote {out / 'bench_dp_balance.json'} and {out / 'bench_dp_balance.md'}")
    return 0


def _add_bench_dp_balance(bench: argparse._SubParsersAction) -> None:
    balance = bench.add_parser("dp-balance", help="data-parallel trainer steps: round robin by group vs token-balanced")
    balance.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_smollm2)")
    balance.add_argument("overrides", nargs="*", help="key.path=value overrides for the trainer")
    balance.add_argument("--ranks", type=positive, default=2, help="data-parallel trainer ranks (default 2)")
    balance.add_argument("--steps", type=positive, default=3, help="steps per seed and split (default 3)")
    balance.add_argument("--seeds", default="0,1", help="comma-separated batch seeds (default 0,1)")
    balance.add_argument("--groups", type=positive, default=8, help="prompts per step (default 8)")
    balance.add_argument("--max-len", type=positive, default=512, help="response length cap (default 512)")
    balance.add_argument("--out", type=Path, help="output directory (default runs/bench-dp-balance-RECIPE)")
    add_verbose(balance)
    balance.set_defaults(func=cmd_bench_dp_balance)
