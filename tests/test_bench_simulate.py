"""``rl bench simulate``'s glue (rl/bench/simulate.py): pools from a run file, modes, engine defaults, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rl.shaping.darts import DartsController
from rl.shaping.scorers import ExternalScorer

from rl.bench.rollout import RolloutBenchConfig
from rl.bench.simulate import (
    SimulateError,
    fit_context,
    fit_line,
    load_run_file,
    markdown,
    mean_lines,
    mode_looks,
    mode_policy,
    natural_pools,
    simulate_run_file,
    step_model,
)
from rl.bench.simulator import EngineModel, HostCost, LinearStep, Looks
from rl.cli.main import main

MODES = ["plain", "darts+sart@long_wait=1.5"]


def record(group: int, index: int, length: int, reason: str = "stop") -> dict:
    fate = "aborted" if reason == "abort" else "kept"
    return {"group": group, "index": index, "length": length, "start": 0.0, "end": 0.0, "fate": fate,
            "finish_reason": reason}  # fmt: skip


def run(mode: str, repeat: int, lengths: list[list[int]], seconds: float, reason: str = "stop") -> dict:
    samples = [record(g, i, n, reason) for g, group in enumerate(lengths) for i, n in enumerate(group)]
    return {"mode": mode, "repeat": repeat, "metrics": {"time_to_batch_s": seconds}, "samples": samples}


def run_file(tmp_path: Path, runs: list[dict], **config: object) -> Path:
    cfg = RolloutBenchConfig(prompts=2, m_keep=2, max_tokens=8, modes=MODES, reward="none", plots=False)
    data = {"config": {**cfg.model_dump(mode="json"), **config}, "engine": {}, "runs": runs}
    path = tmp_path / "bench_rollout.json"
    path.write_text(json.dumps(data))
    return path


def test_plain_replays_its_own_lengths(tmp_path: Path) -> None:
    runs = [run("plain", 0, [[3, 5], [2, 4]], 0.005), run("darts+sart@long_wait=1.5", 0, [[1, 1]], 1.0, "abort")]
    rf = load_run_file(run_file(tmp_path, runs))
    assert (rf.max_num_seqs, rf.stream_interval, rf.wall_every_s) == (2 * 4, 16, None)  # B x n_max; the token clock
    rows = simulate_run_file(rf, EngineModel(LinearStep(0.001, 0.0)), ["plain"])
    assert [(r.mode, r.pool, r.batch.steps) for r in rows] == [("plain", "own", 5)]
    assert rows[0].batch.seconds == pytest.approx(0.005)
    assert "| plain | 0 | own | 0.005 | 0.005 | 1.00 |" in markdown(rows)


def test_a_shaped_pass_is_also_replayed_as_it_ran(tmp_path: Path) -> None:
    """Beside its simulation on plain's lengths, a pass that aborted samples runs its own samples to their recorded
    lengths (the engine model's check apart from the draw); one aborted before its first token runs nowhere."""
    shaped = run(MODES[1], 0, [[3, 7], [2]], 0.01)
    shaped["samples"][1]["finish_reason"] = "abort"  # stopped at 7 tokens
    shaped["samples"].append(record(1, 1, 0, "abort"))
    rf = load_run_file(run_file(tmp_path, [run("plain", 0, [[3, 5], [2, 4]], 0.005), shaped]))
    rows = simulate_run_file(rf, EngineModel(LinearStep(0.001, 0.0)))
    assert [(r.mode, r.pool) for r in rows] == [("plain", "own"), (MODES[1], "plain"), (MODES[1], "as run")]
    as_run = rows[2]
    assert (as_run.batch.steps, as_run.batch.launched, as_run.batch.generated_tokens) == (7, 3, 12)
    assert as_run.batch.seconds == pytest.approx(0.007) and as_run.steady_groups_per_s is None
    assert f"| {MODES[1]} | 0 | as run | 0.007 | 0.010 | 0.70 | 0.71× | 0.50× | 7 | 12 | – | 3 | 0 | – |" in markdown(
        rows
    )


def test_other_draws_of_the_pool_give_a_range_for_modes_on_another_pass(tmp_path: Path) -> None:
    """A shaped mode replayed on shadow's lengths also runs on other draws of them (the range a batch's own draw moves
    its time over); plain, on its own lengths, has no other draw."""
    runs = [run("plain", 0, [[3, 5], [2, 4]], 0.005), run("shadow", 0, [[1, 8, 2, 7], [3, 1, 8, 2]], 0.01)]
    rf = load_run_file(run_file(tmp_path, [*runs, run(MODES[1], 0, [[1, 1]], 1.0, "abort")]))
    rows = simulate_run_file(rf, EngineModel(LinearStep(0.001, 0.0)), draws=20)
    assert [(r.mode, r.pool, r.draws_s is None) for r in rows] == [
        ("plain", "own", True),
        (MODES[1], "shadow", False),
        (MODES[1], "as run", True),
    ]
    fastest, median, slowest = rows[1].draws_s
    assert fastest < slowest  # short and long samples drawn differently: the time moves
    assert fastest <= median <= slowest
    assert simulate_run_file(rf, EngineModel(LinearStep(0.001, 0.0)), draws=20)[1].draws_s == (fastest, median, slowest)
    assert f"| {median:.3f} ({fastest:.3f}–{slowest:.3f}) |" in markdown(rows)


def test_the_means_over_batches_take_a_drawn_mode_by_its_median(tmp_path: Path) -> None:
    """What a shaped mode is quoted by: its mean over batches, each by its draws' median, beside the measured mean;
    the as-run replays stay out of it."""
    runs = [run("plain", 0, [[3, 5], [2, 4]], 0.005), run("shadow", 0, [[1, 8, 2, 7], [3, 1, 8, 2]], 0.01)]
    runs += [run("plain", 1, [[3, 3], [2, 6]], 0.007), run("shadow", 1, [[1, 2, 2, 7], [3, 1, 4, 2]], 0.01)]
    runs += [run(MODES[1], r, [[1, 1]], 0.004 + r * 0.002, "abort") for r in (0, 1)]
    rows = simulate_run_file(load_run_file(run_file(tmp_path, runs)), EngineModel(LinearStep(0.001, 0.0)), draws=5)
    plain = [r.batch.seconds for r in rows if r.mode == "plain"]
    shaped = [r.draws_s[1] for r in rows if r.mode == MODES[1] and r.draws_s]
    assert len(plain) == len(shaped) == 2
    lines = mean_lines(rows).splitlines()
    assert lines[0] == f"plain: mean over 2 batch(es) {sum(plain) / 2:.3f} s simulated, 0.006 s measured " + (
        f"({sum(plain) / 2 / 0.006:.2f}×)"
    )
    speed_up = sum(plain) / sum(shaped)
    assert lines[1].startswith(f"{MODES[1]}: mean over 2 batch(es) {sum(shaped) / 2:.3f} s simulated, 0.005 s")
    assert lines[1].endswith(f"; speed-up {speed_up:.2f}× simulated, 1.20× measured")


def test_a_cut_short_run_replays_from_its_config_and_passes(tmp_path: Path) -> None:
    """A bench stopped before its end leaves bench_config.json and the passes that ended: that folder replays as the
    whole file would, with the engine the run recorded."""
    runs = [run("plain", 0, [[3, 5], [2, 4]], 0.005), run("plain", 1, [[6, 2], [1, 1]], 0.007)]
    whole = json.loads(run_file(tmp_path, runs).read_text())
    cut = tmp_path / "cut"
    cut.mkdir()
    about = {"config": whole["config"], "engine": {"max_num_seqs": 3, "stream_interval": 4}}
    (cut / "bench_config.json").write_text(json.dumps(about))
    (cut / "bench_passes.jsonl").write_text(json.dumps(runs[0]) + "\n")  # the second pass never ended
    rf = load_run_file(cut)
    assert (rf.max_num_seqs, rf.stream_interval, rf.runs) == (3, 4, runs[:1])
    rows = simulate_run_file(rf, EngineModel(LinearStep(0.001, 0.0)), ["plain"])
    assert [(r.mode, r.repeat, r.pool) for r in rows] == [("plain", 0, "own")]


def test_fit_recovers_the_line_from_the_passes_that_aborted_nothing(tmp_path: Path) -> None:
    """Measured times made by a known line through plain and shadow: the fit gives that line back, and a shaped
    mode stays out of it (its measured time, far off, changes nothing)."""
    lengths = {"plain": [[3, 5], [2, 4]], "shadow": [[3, 5, 9, 1], [2, 4, 7, 6]]}
    runs = [run(mode, 0, pool, 0.0) for mode, pool in lengths.items()]
    runs.append(run("darts+sart@long_wait=1.5", 0, [[1, 1]], 99.0, "abort"))
    rf = load_run_file(run_file(tmp_path, runs))
    line = LinearStep(0.002, 0.0003)
    for r in rf.runs[:2]:  # the "measured" times: what the true line simulates
        row = simulate_run_file(rf, EngineModel(line, max_num_seqs=8), [r["mode"]])[0]
        r["metrics"]["time_to_batch_s"] = row.batch.seconds
    fitted, label = fit_line(rf, EngineModel(LinearStep(0.0, 0.0), max_num_seqs=8))
    assert (fitted.a, fitted.c) == (pytest.approx(0.002), pytest.approx(0.0003))
    assert "fitted to the 2 passes that aborted nothing" in label


def test_fit_to_a_profile_recovers_the_context_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Measured times made by a profile (not straight in the batch size) plus a known cost per context token: ``fit:``
    that profile gives the cost back, from plain's and shadow's passes alone."""
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"device": "d", "model": "m", "batch_sizes": [1, 4, 8],
                                   "per_token_latency_s": [0.001, 0.0016, 0.004]}))  # fmt: skip
    lengths = {"plain": [[3, 5], [2, 4]], "shadow": [[3, 5, 9, 1], [2, 4, 7, 6]]}
    runs = [run(mode, 0, pool, 0.0) for mode, pool in lengths.items()]
    rf = load_run_file(run_file(tmp_path, runs))
    true = EngineModel(step_model(str(profile))[0], max_num_seqs=8, context_s=0.0002)
    for r in rf.runs:
        r["metrics"]["time_to_batch_s"] = simulate_run_file(rf, true, [r["mode"]])[0].batch.seconds
    fitted, label = fit_context(rf, EngineModel(LinearStep(0.0, 0.0), max_num_seqs=8), str(profile))
    assert fitted.context_s == pytest.approx(0.0002)
    assert label == "profile of `m` on d + 200 µs per context token, fitted to the 2 passes that aborted nothing"
    for r in rf.runs:  # faster than the profile alone: no negative cost
        r["metrics"]["time_to_batch_s"] = 0.0
    assert fit_context(rf, EngineModel(LinearStep(0.0, 0.0), max_num_seqs=8), str(profile))[0].context_s == 0.0


def test_fit_refuses_host_terms_and_a_single_pass(tmp_path: Path) -> None:
    rf = load_run_file(run_file(tmp_path, [run("plain", 0, [[3, 5]], 0.005)]))
    with pytest.raises(SimulateError, match="leave out --host"):
        fit_line(rf, EngineModel(LinearStep(0.0, 0.0), HostCost(0.001)))
    with pytest.raises(SimulateError, match="needs two passes"):
        fit_line(rf, EngineModel(LinearStep(0.0, 0.0)))


def test_pools_prefer_own_then_shadow_then_the_widest_natural_run() -> None:
    runs = [
        run("raw", 0, [[1, 2]], 1.0),
        run("plain", 0, [[3, 4, 5]], 1.0),
        run("darts", 0, [[1, 2]], 1.0, "abort"),
        run("shadow", 1, [[7, 8, 9, 10]], 1.0),
    ]
    assert natural_pools(runs, 0, "raw")[1] == "own"
    pools, source = natural_pools(runs, 0, "darts")
    assert (source, [s.length for s in pools[0]]) == ("plain", [3, 4, 5])
    assert natural_pools(runs, 1, "plain")[1] == "shadow"
    with pytest.raises(SimulateError, match="natural lengths"):
        natural_pools(runs[2:3], 0, "darts")


def test_modes_run_without_scores_and_look_on_their_clock() -> None:
    cfg = RolloutBenchConfig(m_keep=2, modes=MODES, reward="none")
    policy = mode_policy(cfg, "darts+sart@long_wait=1.5")
    controller = policy.controller(policy.plan(["p"])[0])
    assert isinstance(controller.base, DartsController) and isinstance(controller.scorer, ExternalScorer)
    assert mode_looks(cfg, "plain", None, None) is None
    assert mode_looks(cfg, "darts+sart@long_wait=1.5", None, None) == Looks(every_tokens=16)
    assert mode_looks(cfg, "darts+sart@long_wait=1.5", None, 0.5) == Looks(every_s=0.5)


def test_a_run_from_before_the_token_clock_looks_on_the_wall_clock(tmp_path: Path) -> None:
    shaping = {**RolloutBenchConfig().shaping.model_dump(mode="json"), "progress_every_s": 0.5}
    shaping.pop("progress_every_tokens")
    rf = load_run_file(run_file(tmp_path, [run("plain", 0, [[3]], 1.0)], shaping=shaping))
    assert (rf.max_num_seqs, rf.stream_interval, rf.wall_every_s) == (128, 1, 0.5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["MISSING", "--profile", "linear:0.001,0"], "cannot read a rollout benchmark"),
        (["RUN", "--profile", "no-such-profile"], "cannot read decode profile"),
        (["RUN", "--profile", "linear:0.001,0", "--modes", "plain,nope"], "unknown mode"),
        (["RUN", "--profile", "linear:0.001,0", "--modes", "darts+tie"], "priorities are not simulated"),
        (["RUN", "--profile", "linear:0.001,0", "--host", "1,x"], "--host"),
        (["RUN", "--profile", "fit"], "--profile fit needs two passes"),
        (["RUN", "--profile", "fit:no-such-profile"], "cannot read decode profile"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    paths = {"RUN": str(run_file(tmp_path, [run("plain", 0, [[3, 5]], 0.005)])), "MISSING": str(tmp_path / "no.json")}
    assert main(["bench", "simulate", *[paths.get(a, a) for a in args]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_cli_prints_the_table_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = run_file(tmp_path, [run("plain", 0, [[3, 5], [2, 4]], 0.005)])
    out = tmp_path / "sim.json"
    assert main(["bench", "simulate", str(path), "--profile", "linear:0.001,0", "--json", str(out)]) == 0
    assert "| plain | 0 | own | 0.005 | 0.005 | 1.00 |" in capsys.readouterr().out
    assert json.loads(out.read_text())["rows"][0]["steps"] == 5
