"""``rl bench train``: two real training variants side by side, one table, one JSON, one plot."""

import json

import pytest
from small_runs import SMALL, on_the_warm_engine

from rl.bench.train import TrainVariant, parse_variant, run_train_bench, variant_configs
from rl.cli import recipe_path

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
    results, table = run_train_bench(
        recipe_path("arith_tiny"), variants, COMMON, tmp_path, start_actors=on_the_warm_engine(rollout_worker)
    )

    assert [r["name"] for r in results] == ["sync", "stale1+darts+sart"]
    for r in results:
        assert r["steps"] == 2 and len(r["curve"]["reward_mean"]) == 2
        assert r["steps_per_hour"] == pytest.approx(3600 * 2 / r["train_seconds"])
        assert r["samples_per_hour"] == pytest.approx(3600 * 2 * 4 * 4 / r["train_seconds"])
        assert 0.0 <= r["trainer_idle_frac"] <= 1.0 and 0.0 <= r["rollout_idle_frac"] <= 1.0
    assert results[0]["waste_ratio"] == 0.0  # plain keeps every sample it launches
    assert results[1]["waste_ratio"] > 0.0  # darts+sart launches more than it keeps
    assert "1.00×" in table.splitlines()[2]
    saved = json.loads((tmp_path / "bench_train.json").read_text())
    assert [r["name"] for r in saved["results"]] == ["sync", "stale1+darts+sart"]
    assert (tmp_path / "bench_train.png").stat().st_size > 0
    assert (tmp_path / "sync" / "metrics.jsonl").exists()


def test_a_variant_stopped_by_sigterm_stops_the_bench(tmp_path, monkeypatch):
    """Like ``rl train``, the bench exits 128 + signal once a variant stops on SIGTERM; no later variant starts."""
    import rl.driver

    started = []

    def stopped_run(cfg, start_actors=None):
        started.append(cfg.run_dir.name)
        return {"stopped_by": "SIGTERM"}

    monkeypatch.setattr(rl.driver, "run_training", stopped_run)
    variants = [TrainVariant("a", ()), TrainVariant("b", ("train.lr=2e-4",))]
    with pytest.raises(SystemExit) as stop:
        run_train_bench(recipe_path("arith_tiny"), variants, [], tmp_path)
    assert stop.value.code == 143 and started == ["a"]
    assert not (tmp_path / "bench_train.json").exists()
