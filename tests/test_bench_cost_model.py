"""Replaying a measured rollout benchmark through a decode profile (tests/test_decode_profile.py takes one)."""

import json
from types import SimpleNamespace

import pytest

from rl.bench.cost_model import DecodeProfile, replay_runs
from rl.cli.bench_decode import cmd_bench_cost_model
from rl.cli.main import build_parser

LINEAR = DecodeProfile("test", "test", (1, 3), (1.0, 3.0))  # PTL(b) = b seconds


def _run(mode: str, lengths: list[int]) -> dict:
    samples = [{"group": 0, "index": i, "length": n, "fate": "kept"} for i, n in enumerate(lengths)]
    return {"mode": mode, "repeat": 0, "metrics": {"time_to_batch_s": 9.0}, "samples": samples}


def test_replay_prices_every_launched_sample_and_keeps_the_measurements():
    runs = [_run("plain", [6, 1, 3]), _run("sart", [2, 2, 5])]
    replayed = replay_runs(runs, LINEAR)
    # 3 running for 1 step, 2 for 2 more, 1 for 3 more: 3 + 4 + 3 = 10; then 3*2 + 1*3 = 9
    assert [r["metrics"]["model_time_to_batch_s"] for r in replayed] == pytest.approx([10.0, 9.0])
    assert all(r["metrics"]["time_to_batch_s"] == 9.0 for r in replayed)
    assert "model_time_to_batch_s" not in runs[0]["metrics"], "the input runs are left as they were"


def test_cost_model_command_prints_the_modelled_speed_up(tmp_path, capsys):
    result = tmp_path / "bench_rollout.json"
    result.write_text(json.dumps({"runs": [_run("plain", [6, 1, 3]), _run("sart", [2, 2, 5])]}))
    profile = tmp_path / "linear.json"
    profile.write_text(json.dumps({"device": "d", "model": "m", "batch_sizes": [1, 3], "per_token_latency_s": [1, 3]}))
    args = build_parser().parse_args(["bench", "cost-model", str(tmp_path), "--profile", str(profile)])
    assert args.func is cmd_bench_cost_model
    assert args.func(args) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| sart"))
    assert "| 9.000 | 1.11 |" in row  # plain 10 s / sart 9 s


def test_cost_model_command_names_what_is_missing(tmp_path, capsys):
    args = SimpleNamespace(result=tmp_path / "nothing", profile="h100_smollm2-135m", out=None)
    assert cmd_bench_cost_model(args) == 2
    assert "no benchmark result" in capsys.readouterr().err
    (tmp_path / "bench_rollout.json").write_text(json.dumps({"runs": []}))
    args = SimpleNamespace(result=tmp_path, profile=str(tmp_path / "no_profile.json"), out=None)
    assert cmd_bench_cost_model(args) == 2
    assert "cannot read decode profile" in capsys.readouterr().err


def test_shipped_gpu_profiles_grow_with_the_batch():
    for name in ("h100_smollm2-135m", "h100_qwen2.5-math-7b"):
        profile = DecodeProfile.load(name)
        assert "H100" in profile.device
        assert profile.ptl(512) > 2 * profile.ptl(1), name  # CUDA-graph decode: batch, not launches, sets the cost
