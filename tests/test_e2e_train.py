"""A few steps of real asynchronous training: Ray actors, a vLLM engine, torch, rewards, buffer, sync."""

import json

import pytest
from small_runs import live_placement_groups, on_the_warm_engine, small_run
from wandb_files import history, wandb_records

from rl.loop.driver import run_training
from rl.loop.processes import wait_for

pytestmark = pytest.mark.integration  # starts real Ray or vLLM


def test_rl_train_a_few_async_data_parallel_steps(ray_session, rollout_worker, tiny_model_dir, tmp_path):
    cfg = small_run(
        tmp_path,
        "e2e",
        "train.max_steps=4",
        "train.max_staleness=1",
        "eval.num_problems=16",
        "eval.every=2",
        "eval.samples=4",  # pass@k at every evaluation
        "eval.temperature=1.0",
        "train.save_checkpoint=true",
        "train.num_workers=2",  # data parallel: two trainer actors in one process group
        "train.mini_batches=2",
        "logging.wandb.project=tailor-e2e",
        "logging.wandb.mode=offline",
    )
    groups_before = live_placement_groups()
    summary = run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))

    assert summary["steps"] == 4
    # the ranks' placement group is given back: runs in a Ray instance that outlives them do not use it up
    assert wait_for(lambda: live_placement_groups() <= groups_before, 10)
    buf = summary["buffer"]
    assert buf["consumed"] == 16 and buf["produced"] == buf["consumed"] + buf["in_buffer"] + sum(
        v for k, v in buf.items() if k.startswith("dropped_")
    )
    assert summary["rollout_errors"] == 0
    assert summary["groups_trained"] == 16 and summary["groups_unaccounted"] == 0

    records = [json.loads(line) for line in (tmp_path / "e2e" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]  # the summary reports the first and the last evaluation
    assert (summary["accuracy_before"], summary["accuracy_after"]) == (evals[0]["accuracy"], evals[-1]["accuracy"])
    assert all(r["num_problems"] == 16 and r["samples_per_problem"] == 4 for r in evals)
    assert all(r["pass@4"] >= r["pass@2"] >= r["pass@1"] == pytest.approx(r["accuracy"]) for r in evals)
    assert any(r["pass@4"] > r["accuracy"] for r in evals)  # four samples differ: some problem is right in a few
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    for r in train:
        assert r["generated_tokens"] >= r["kept_tokens"] > 0
        assert r["staleness_max"] <= 1  # admission control bounds staleness
        assert r["weight_sync_wait_s"] >= 0
        assert r["samples_launched"] == 4 * 4
        assert r["updates"] == 2  # each rank's 2 groups as 2 mini-batches
    # staleness 1: each sync loads while the next step trains, so step k reports sync k-1's time, and the
    # training loop waits for a sync only while the previous one is still loading
    assert "weight_sync_s" not in train[0] and all(r["weight_sync_s"] > 0 for r in train[1:])
    assert sum(r["weight_sync_wait_s"] for r in train) < sum(r["weight_sync_s"] for r in train[1:])
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 2, 4]
    assert (tmp_path / "e2e" / "checkpoints" / "step_000004" / "model.safetensors").exists()
    assert any((tmp_path / "e2e" / "tb").iterdir())
    wandb_steps = [h["_step"] for h in history(wandb_records(tmp_path / "e2e")) if "train/reward_mean" in h]
    assert wandb_steps == ["1", "2", "3", "4"]  # logging.wandb offline: every step, beside the JSONL


def test_periodic_async_with_dynamic_sampling_and_kl(ray_session, rollout_worker, tiny_model_dir, tmp_path):
    cfg = small_run(
        tmp_path,
        "periodic",
        "train.max_steps=3",
        "train.periodic_async=true",
        "train.max_staleness=0",
        "algorithm.advantage=rloo",
        "algorithm.dynamic_sampling=true",
        "algorithm.kl_coef=0.01",
        "train.lr_schedule=linear",  # a rate that falls by a third of lr a step
    )
    summary = run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))

    assert summary["steps"] == 3 and summary["rollout_errors"] == 0
    train = [
        r
        for r in map(json.loads, (tmp_path / "periodic" / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    ]
    assert [r["staleness_max"] for r in train] == [0, 0, 0]  # periodic asynchrony is on-policy
    assert [r["lr"] for r in train] == pytest.approx([cfg.train.lr * f for f in (1, 2 / 3, 1 / 3)])
    assert all(r["weight_sync_wait_s"] >= r["weight_sync_s"] > 0 for r in train)  # on-policy: the loop waits
    assert all(r["samples"] == 16 for r in train)  # dropped groups were refilled: the batch never shrinks
    dropped = summary["dropped_groups"].get("zero_variance", 0)
    assert dropped == sum(r["zero_variance_dropped"] for r in train)
    # only groups let through past the dynamic-sampling cap may lack reward variance
    assert sum(round(r["frac_reward_zero_std"] * 4) for r in train) == summary["zero_variance_admitted"]
    for r in train:
        assert r["kl_ref"] >= 0.0 and 0.0 < r["ess_ratio"] <= 1.0 + 1e-9
        assert (r["reward"], r["kl"], r["completions/max_length"]) == (
            r["reward_mean"],
            r["kl_ref"],
            r["response_len_max"],
        )
        assert r["entropy"] > 0.0  # measured without an entropy bonus too
        sides = r["clip_ratio/low_mean"] + r["clip_ratio/high_mean"]  # without dual clip the region is either side
        assert sides == pytest.approx(r["clip_ratio/region_mean"]) and r["clip_ratio/high_max"] <= 1.0
        assert r["logprob_gap"] < 1e-3  # trainer and engine agree on the log-probs of fresh samples
        assert r["logprob_gap"] <= r["sampling/sampling_logp_difference/max"] < 1e-2  # TRL's names: mean <= max
    assert [r["num_tokens"] for r in train] == sorted({r["num_tokens"] for r in train})  # the run's count grows


def test_idle_governor_steers_darts_redundancy(ray_session, rollout_worker, tiny_model_dir, tmp_path):
    cfg = small_run(
        tmp_path,
        "governed",
        "train.max_steps=4",
        "train.max_staleness=1",
        "shaping.policy=darts",
        "shaping.avg_redundancy=1.5",
        "shaping.max_redundancy=2.0",
        "shaping.idle_target=0.0",  # any idle time is spare capacity: redundancy can only rise
    )
    assert run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))["steps"] == 4
    train = [
        r
        for r in map(json.loads, (tmp_path / "governed" / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    ]
    steered = [r["avg_redundancy"] for r in train]
    assert all(1.5 <= v <= 2.0 for v in steered) and steered == sorted(steered)
    assert steered[-1] > 1.5  # the rollout side idled (the trainer paces a stale-1 run), so spares were bought
    assert all(16 <= r["samples_launched"] <= 32 for r in train)
