"""``rl bench`` commands on the decode clock: ``profile-decode`` measures a device's per-token decode latency,
``cost-model`` prices a measured rollout benchmark with such a profile, ``simulate`` replays its modes on a simulated
vLLM clock."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rl.cli.common import add_verbose, comma_list, integers, positive, route_output


def add_decode_commands(bench: argparse._SubParsersAction) -> None:
    """``rl bench cost-model``, ``simulate`` and ``profile-decode``."""
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
    add_verbose(decode)
    decode.set_defaults(func=cmd_bench_profile_decode)


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
    from rl.bench.simulator import EngineModel, HostCost, LinearStep

    try:
        run = sim.load_run_file(args.result)
        host = sim.parse_host(args.host) if args.host else HostCost()
        cap, interval = args.max_num_seqs or run.max_num_seqs, args.stream_interval or run.stream_interval
        engine = EngineModel(LinearStep(0.0, 0.0), host, cap, interval, args.lag_steps, args.prefill_s)
        engine, label = sim.device_model(run, engine, args.profile)
        modes = comma_list(args.modes) if args.modes else None
        every_tokens, every_s = args.progress_every_tokens, args.progress_every_s
        rows = sim.simulate_run_file(
            run, engine, modes, every_tokens, every_s, args.batches, args.in_flight, args.draws
        )
    except ValueError as e:  # SimulateError included
        print(f"cannot simulate: {e}".splitlines()[0], file=sys.stderr)
        return 2
    print(f"{sim.engine_line(engine, label)}\n\n{sim.markdown(rows)}\n{sim.mean_lines(rows)}")
    if args.json:
        sim.write_json(Path(args.json), rows, engine, args.profile)
    return 0


def _add_bench_simulate(bench: argparse._SubParsersAction) -> None:
    sim = bench.add_parser("simulate", help="replay a rollout benchmark's modes on a simulated vLLM clock")
    sim.add_argument("result", type=Path, help="an `rl bench rollout` output folder or its bench_rollout.json")
    sim.add_argument(
        "--profile",
        required=True,
        help="decode profile JSON or shipped name, linear:A,C seconds, fit: the line through the run's passes "
        "that aborted nothing, or fit:PROFILE: the profile plus a per-context-token cost fitted to those passes",
    )
    sim.add_argument("--modes", help="comma list of modes (default: the run's, shadow left out)")
    sim.add_argument("--max-num-seqs", type=positive, help="admission cap (default: the run's engine)")
    clock = sim.add_mutually_exclusive_group()
    clock.add_argument("--progress-every-tokens", type=positive, help="looks on the token clock, every k tokens")
    clock.add_argument("--progress-every-s", type=float, help="looks on the wall clock, every T simulated seconds")
    sim.add_argument("--stream-interval", type=positive, help="tokens per streamed output (default: the run's)")
    sim.add_argument("--host", help="host seconds h0,h_req,h_out,h_abort: per step, sequence, output, abort")
    sim.add_argument("--lag-steps", type=int, default=0, help="steps before an event reaches the controllers")
    sim.add_argument("--prefill-s", type=float, default=0.0, help="device seconds per admitted request (default 0)")
    sim.add_argument("--batches", type=positive, default=4, help="batches of the steady-state run (default 4)")
    sim.add_argument(
        "--draws",
        type=positive,
        help="also run each mode simulated on another pass's lengths on this many other draws of them (with "
        "replacement, as a fresh pass draws): the median and range a batch's own draw of samples moves its time over",
    )
    sim.add_argument("--in-flight", type=positive, help="groups in flight in the steady state (default: B)")
    sim.add_argument("--json", help="also write the rows as JSON here")
    sim.set_defaults(func=cmd_bench_simulate)


def cmd_bench_profile_decode(args: argparse.Namespace) -> int:
    from rl.bench.decode_profile import check_options, profile_decode
    from rl.config import one_line
    from rl.inputs.preflight import check_model_path, check_output_dir

    model_dir = check_model_path(args.model, "--model", weights=not args.dummy_weights)
    try:
        sizes = integers(args.batch_sizes, "--batch-sizes")
        check_options(model_dir, sizes, args.steps, args.prompt_len, args.stream_interval, args.repeats)
    except (ValueError, OSError) as e:
        print(f"invalid profile options: {one_line(e)}", file=sys.stderr)
        return 2
    if args.out:
        check_output_dir(Path(args.out).parent, f"--out {args.out!r}: its folder")
    route_output(args, (Path(args.out).parent if args.out else Path("runs/profile-decode")) / "logs")
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
