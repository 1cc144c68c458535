"""The ``rl`` command: ``rl train RECIPE [key=value ...]``, ``rl eval MODEL --dataset SOURCE [...]``,
``rl report RUN_DIR``, ``rl models build NAME``, ``rl cluster up|down`` and ``rl bench ...`` (``rl.cli.bench``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from rl.cli.bench import add_bench
from rl.cli.common import add_verbose, checked_config, positive, recipe_path, route_output, temperature
from rl.loop.processes import Terminated
from rl.models import BUILTIN_MODELS

if TYPE_CHECKING:
    from rl.config import RunConfig
    from rl.inputs.preflight import RunInputs


def cmd_train(args: argparse.Namespace) -> int:
    from rl.config import describe_config, load_config
    from rl.loop.checkpoint import CheckpointError, resume_config, run_to_continue

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

    built = checked_config(build, "invalid config" if args.resume is None else "cannot resume")
    if built is None:
        return 2
    cfg, resume = built
    from rl.inputs.preflight import BadInput, check_output_dir, preflight

    if args.resume is None:  # a resumed run's saved config gives every setting, the unused ones said at its start
        from rl.inputs.inert_settings import warn_of_inert_settings

        warn_of_inert_settings(cfg)

    check_output_dir(cfg.output_dir, f"output_dir {cfg.output_dir!r}")  # first: it takes no time
    inputs = preflight(cfg)  # bad input: one line from main()
    from rl.inputs.memory_plan import apply_memory_plan
    from rl.loop.run_lock import run_dir_lock

    cfg = apply_memory_plan(cfg, inputs.model_dir)  # sets the engines' GPU share; refuses a run that cannot fit
    with run_dir_lock(cfg.run_dir):  # the same command run twice: the second one says so, before it starts
        if resume is None:  # the same command run again after a stop: it continues the run
            try:
                resume = run_to_continue(cfg)
            except CheckpointError as e:
                raise BadInput(str(e)) from None
        return _drive(args, cfg, inputs, resume)


def _drive(args: argparse.Namespace, cfg: RunConfig, inputs: RunInputs, resume: Path | None) -> int:
    """Run the driver on checked inputs and print how the run ended; returns the exit code."""
    from rl.loop.checkpoint import CheckpointError
    from rl.loop.driver import Driver, RunFailed

    route_output(args, cfg.run_dir / "logs")
    try:
        driver = Driver(cfg, inputs, resume)
    except CheckpointError as e:
        print(f"cannot resume: {e}", file=sys.stderr)
        return 2
    try:
        summary = asyncio.run(driver.run())
    except CheckpointError as e:  # found only once the checkpoint is loaded: a damaged one
        print(f"cannot resume: {e}", file=sys.stderr)
        return 2
    except RunFailed as e:
        if e.summary is not None:  # summary.json and the failures counted, as a finished run's
            from rl.output.console import run_summary

            print(run_summary(e.summary, cfg.run_dir))
        print(f"run stopped: {e}; {_continue_from(cfg.run_dir)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second stop signal: stopped at once, its actors ended
        print(f"stopped at once on a second signal; {_continue_from(cfg.run_dir)}", file=sys.stderr)
        return 128 + (driver.stop_signal or signal.SIGINT)
    from rl.output.console import run_summary

    print(run_summary(summary, cfg.run_dir))
    if summary["stopped_by"]:
        print(f"stopped at step {summary['steps']}; {_continue_from(cfg.run_dir)}")
        return 128 + signal.Signals[summary["stopped_by"]]
    return 0


def _continue_from(run_dir: Path) -> str:
    """What to run after a stop: a resume from the run's last complete checkpoint (the folder quoted for a shell where
    it needs it), or the command again."""
    import shlex

    from rl.loop.checkpoint import complete_checkpoints

    if not complete_checkpoints(run_dir):
        return "no checkpoint was written, so a run of the same command starts afresh"
    return f"continue with: rl train --resume {shlex.quote(str(run_dir))}"


def cmd_eval(args: argparse.Namespace) -> int:
    from rl.config import load_config, load_run_config, read_recipe
    from rl.evaluation.held_out import EvaluationFailed
    from rl.evaluation.offline import (
        EvalSettings,
        eval_inputs,
        recipe_for_dataset,
        resolve_eval_model,
        run_config_of,
        run_eval,
        same_source,
    )
    from rl.inputs.preflight import check_output_dir

    run_config = run_config_of(args.model)  # a run or one of its checkpoints: its own framing, rewards and data
    if args.dataset is None and run_config is None:
        resolve_eval_model(args.model)  # a path that is no model or run says so first (BadInput)
        print("rl eval: give --dataset (arith, a preset, a hub dataset or a file) for a model", file=sys.stderr)
        return 2
    recipe = args.recipe or (str(run_config) if run_config else recipe_for_dataset(args.dataset))

    def build() -> RunConfig:
        own = run_config is not None and args.recipe is None  # a run's saved config, maybe an earlier version's
        if own:
            cfg = load_run_config(run_config, args.set)
        else:  # the model evaluated is the recipe's model (its model.revision, model.trust_remote_code)
            model = [f"model.path={json.dumps(args.model)}"] if run_config is None else []  # quoted: any path
            cfg = load_config(recipe_path(recipe), [*model, *args.set])
        if args.dataset is not None:
            cfg.data.source = args.dataset  # validated on assignment
        return cfg

    cfg = checked_config(build)
    if cfg is None:
        return 2
    trained_on = read_recipe(run_config, local_paths=False)["data"]["source"] if run_config else None
    settings = EvalSettings(
        model=args.model,
        dataset=cfg.data.source,
        recipe=recipe,
        as_trained=trained_on is not None and same_source(cfg.data.source, trained_on),
        split=args.split,
        samples=args.samples,
        limit=args.limit,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        cpu_threads_bind=args.cpu_bind,
    )
    if args.out:
        check_output_dir(args.out.parent, f"--out {str(args.out)!r}: its folder")
    inputs = eval_inputs(cfg, settings)  # bad input: one line from main(), before the engine starts
    route_output(args, (args.out.parent if args.out else Path("runs/eval")) / "logs")
    try:
        report = run_eval(cfg, settings, inputs=inputs)
    except EvaluationFailed as e:  # no problem could be sampled
        print(f"evaluation failed: {e}", file=sys.stderr)
        return 1
    print(report.table())
    if args.out:
        args.out.write_text(report.to_json() + "\n")
        print(f"wrote {args.out}")
    return 0


def _add_eval(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="pass@k, reward and response lengths of a model or checkpoint on a dataset")
    ev.add_argument(
        "model", help="builtin:NAME, an HF model directory, a run directory (its latest checkpoint) or a checkpoint"
    )
    ev.add_argument(
        "--dataset", help="arith, a preset (gsm8k, math, math500, ...), hub name or file (default: a run's own data)"
    )
    ev.add_argument("--split", default="test", help="dataset split (default test)")
    ev.add_argument("--samples", type=positive, default=1, help="samples per problem; pass@k for k=1,2,4..samples")
    ev.add_argument("--limit", type=positive, help="only the first N problems")
    ev.add_argument("--max-tokens", type=positive, help="response length cap (default: the recipe's)")
    ev.add_argument(
        "--temperature",
        type=temperature,
        help="default: the recipe's eval temperature for 1 sample, rollout's for more",
    )
    ev.add_argument(
        "--recipe",
        help="recipe giving the prompt framing, rewards and engine sizes (default: a run's config, else by dataset)",
    )
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override (repeatable)")
    ev.add_argument("--cpu-bind", help="CPU only: the cores this process and its engine run on (e.g. 0 or 0-1)")
    ev.add_argument("--out", type=Path, help="write the metrics and per-problem records as JSON here")
    add_verbose(ev)
    ev.set_defaults(func=cmd_eval)


def cmd_report(args: argparse.Namespace) -> int:
    from rl.config import one_line
    from rl.output.report import write_report

    try:
        path = write_report(Path(args.run_dir))
    except (ValueError, OSError) as e:
        print(f"cannot report: {one_line(e)}", file=sys.stderr)
        return 2
    print(path)
    return 0


def cmd_models_build(args: argparse.Namespace) -> int:
    from rl.models import resolve_model

    try:
        print(resolve_model(f"builtin:{args.name}"))
    except ValueError as e:
        print(f"cannot build: {e}", file=sys.stderr)
        return 2
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line that points at ``-h`` (not the whole usage block); its
    subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; {self.prog} -h lists the options\n")


class _CommandParser(_Parser):
    """A subcommand's parser (``rl eval``, ``rl bench rollout``). It takes ``key=value`` overrides after the options
    too (argparse alone takes them only before: ``rl bench peer arith_tiny --seeds 0 eval.every=0`` would fail), and
    says anything else unknown itself, so the line names the command whose ``-h`` lists what it takes (argparse
    leaves that to the top parser: ``rl -h``)."""

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and hasattr(parsed, "overrides") and all("=" in a and not a.startswith("-") for a in extras):
            parsed.overrides += extras
        elif extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, []


class _Version(argparse.Action):
    """``rl --version``: read from the installed packages only when asked (~50 ms)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        from rl.output.provenance import version_line

        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rl", description="Tailor: asynchronous RL post-training")
    parser.add_argument("--version", action=_Version, help="Tailor's version and its stack's (vLLM, torch, Ray, ...)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)
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
    add_verbose(train)
    train.set_defaults(func=cmd_train)
    _add_eval(sub)
    report = sub.add_parser("report", help="plots and a Markdown summary of a run's metrics.jsonl")
    report.add_argument("run_dir", help="run directory holding metrics.jsonl")
    report.set_defaults(func=cmd_report)
    models = sub.add_parser("models", help="offline models").add_subparsers(dest="models_cmd", required=True)
    build = models.add_parser("build", help="build a builtin model into the cache")
    build.add_argument("name", choices=BUILTIN_MODELS)
    build.set_defaults(func=cmd_models_build)
    add_bench(sub)
    _add_cluster(sub)
    return parser


CLUSTER_DIR = Path("/tmp/tailor-cluster")  # short: Ray's socket paths under it must stay within Unix's 107 bytes


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from rl.loop import cluster

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
    from rl.loop import cluster

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
    up.add_argument("--cpus", type=positive, default=2, help="Ray CPUs each node offers (default 2)")
    up.add_argument("--dir", type=Path, default=CLUSTER_DIR, help=f"the cluster's folder (default {CLUSTER_DIR})")
    up.set_defaults(func=cmd_cluster_up)
    down = commands.add_parser("down", help="stop the cluster's processes (only its own) and remove its folder")
    down.add_argument("--dir", type=Path, default=CLUSTER_DIR, help=f"the cluster's folder (default {CLUSTER_DIR})")
    down.set_defaults(func=cmd_cluster_down)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """``kill`` unwinds the command as Ctrl-C does: its ``finally`` blocks stop engines and worker pools. Inside an
    event loop the loop raises it, between two task steps: raised in whatever frame the signal interrupts, it could
    land in a task that nobody awaits, and asyncio then prints that task's traceback as it exits."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop runs: unwind from here
        raise Terminated(128 + signum) from None
    loop.call_soon_threadsafe(_raise_terminated, signum)  # threadsafe: it also wakes a loop waiting in select


def _raise_terminated(signum: int) -> NoReturn:
    raise Terminated(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    args = parse_args(argv)
    start_logging(verbose=getattr(args, "verbose", False))
    from rl.inputs.preflight import BadInput
    from rl.rollout.engine import EngineStartError

    try:
        return args.func(args)
    except BadInput as e:  # preflight's checks, in any command: one line, nothing started (or, for a bench
        # variant's own override, found when that variant starts)
        print(f"bad input: {e}", file=sys.stderr)
        return 2
    except EngineStartError as e:  # an engine in this process (rl eval, rl bench rollout); rl train's are actors
        from rl.output.console import keep_traceback

        print(f"the engine did not start: {e} (its traceback: {keep_traceback(e)})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C where no stop handler is in place (checks, a bench between runs)
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated as e:  # kill, where no stop handler is in place: said as Ctrl-C is
        print("terminated", file=sys.stderr)
        return int(e.code or 0)


def start_logging(verbose: bool) -> None:
    """Log records to the console from the start; unless ``verbose``, sieved as routed output is (rl/output/console.py),
    Python warnings included, so what runs before the output is routed (the config check and the imports it makes,
    such as TRL's in ``rl bench peer``; preflight's reward call) is as calm as what runs after it."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not verbose:
        from rl.output.console import ConsoleFilter, console_formatter

        for handler in logging.getLogger().handlers:
            handler.setFormatter(console_formatter())  # as after the output is routed
            handler.addFilter(ConsoleFilter())
        logging.captureWarnings(True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, as ``build_parser`` reads it."""
    return build_parser().parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
