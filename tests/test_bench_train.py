"""``rl bench train``: two real training variants side by side, one table, one JSON, one plot."""

import json
import os
import signal
import threading
import time

import pytest
from small_runs import SMALL, on_the_warm_engine

from rl.bench.train import TrainVariant, parse_variant, run_train_bench, variant_configs
from rl.cli.common import recipe_path
from rl.loop.processes import wait_for
from rl.output.metrics import read_records

COMMON = [*SMALL, "train.max_steps=2"]


def test_parse_variant_and_bad_variants_fail_before_running(tmp_path):
    assert parse_variant("fast:train.max_staleness=2, shaping.policy=darts") == TrainVariant(
        "fast", ("train.max_staleness=2", "shaping.policy=darts")
    )
    assert parse_variant("as-is:") == TrainVariant("as-is", ())
    with pytest.raises(ValueError, match="NAME:"):
        parse_variant("no-colon")
    with pytest.raises(ValueError, match="unique"):
        variant_configs(recipe_path("arith_tiny"), [TrainVariant("a", ()), TrainVariant("a", ())], [], tmp_path)
    with pytest.raises(ValueError, match="max_staleness"):
        variant_configs(recipe_path("arith_tiny"), [parse_variant("bad:train.max_staleness=-1")], [], tmp_path)


@pytest.mark.integration
def test_bench_train_two_variants(ray_session, rollout_worker, tiny_model_dir, tmp_path):
    variants = [
        TrainVariant("sync", ("train.max_staleness=0",)),
        TrainVariant("stale1+darts+sart", ("train.max_staleness=1", "shaping.policy=darts+sart")),
    ]
    t0 = time.monotonic()
    results, table = run_train_bench(
        recipe_path("arith_tiny"), variants, COMMON, tmp_path, start_actors=on_the_warm_engine(rollout_worker)
    )
    wall_s = time.monotonic() - t0

    assert [r["name"] for r in results] == ["sync", "stale1+darts+sart"]
    for r in results:
        assert r["steps"] == 2 and len(r["curve"]["reward_mean"]) == 2
        # clocks the bench does not read: this test's, around the whole bench (both variants, their startups), and
        # the run's own steps (metrics.jsonl); the variant's training time lies between them
        stepped_s = sum(r["curve"]["step_seconds"])
        assert 3600 * 2 / wall_s < r["steps_per_hour"] <= 3600 * 2 / stepped_s
        assert r["samples_per_hour"] / r["steps_per_hour"] == pytest.approx(4 * 4)  # 4 groups of m_keep=4 a step
        assert 0.0 <= r["trainer_idle_frac"] <= 1.0 and 0.0 <= r["rollout_idle_frac"] <= 1.0
    assert results[0]["waste_ratio"] == 0.0  # plain keeps every sample it launches
    assert results[1]["waste_ratio"] > 0.0  # darts+sart launches more than it keeps
    assert "1.00×" in table.splitlines()[2]
    saved = json.loads((tmp_path / "bench_train.json").read_text())
    assert [r["name"] for r in saved["results"]] == ["sync", "stale1+darts+sart"]
    assert (tmp_path / "bench_train.png").stat().st_size > 0
    assert (tmp_path / "sync" / "metrics.jsonl").exists()


@pytest.mark.integration
def test_a_variant_stopped_by_sigterm_stops_the_bench(ray_session, rollout_worker, tmp_path, capsys):
    """Like ``rl train``, the bench exits 128 + signal once a variant stops on SIGTERM; no later variant starts.
    The signal is real: sent to this process once the first variant has logged a step (its handler is up then)."""
    metrics = tmp_path / "a" / "metrics.jsonl"

    def sigterm_after_the_first_step() -> None:
        if wait_for(lambda: metrics.exists() and '"kind": "train"' in metrics.read_text(), 300, poll_s=0.05):
            os.kill(os.getpid(), signal.SIGTERM)

    variants = [TrainVariant("a", ("train.max_steps=40",)), TrainVariant("b", ())]
    threading.Thread(target=sigterm_after_the_first_step, daemon=True).start()
    with pytest.raises(SystemExit) as stop:
        run_train_bench(
            recipe_path("arith_tiny"), variants, COMMON, tmp_path, start_actors=on_the_warm_engine(rollout_worker)
        )
    assert stop.value.code == 143
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == "[bench train] SIGTERM stopped a: the bench stops, no results written"
    )
    steps = [r["step"] for r in read_records(metrics)[0] if r["kind"] == "train"]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 40  # stopped at a step boundary, early
    assert not (tmp_path / "b").exists() and not (tmp_path / "bench_train.json").exists()


def test_a_variant_whose_run_stops_stops_the_bench_in_one_line(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """A run that stops itself (a reward failing a whole step) ended the bench in RunFailed's traceback."""
    import rl.loop.driver
    from rl.cli.main import main

    def stops(cfg, **_):
        raise rl.loop.driver.RunFailed("reward 'r' failed on all of the last 4 groups, a whole step", None)

    monkeypatch.setattr(rl.loop.driver, "run_training", stops)
    argv = [
        "bench",
        "train",
        "arith_tiny",
        "--steps",
        "1",
        "--variant",
        "a:seed=1",
        "--out",
        str(tmp_path),
        "--verbose",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        "rl bench train stopped: variant 'a' stopped: reward 'r' failed on all of the last 4 groups, a whole step "
        f"(its run: {tmp_path / 'a'}); its output: above\n"
    )
