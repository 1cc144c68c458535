"""Stopping and resuming a real ``rl train`` (Ray, vLLM, torch) in a subprocess: SIGTERM writes a checkpoint at
the step boundary and stops; SIGKILL loses only the steps after the last checkpoint; ``--resume`` continues with
exactly the prompts an uninterrupted run trains next, each step logged once, the trainer state as saved."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from small_runs import on_the_warm_engine, small_run

from rl.data.stream import PromptStream
from rl.inputs.preflight import preflight
from rl.loop import checkpoint
from rl.loop.driver import Driver
from rl.loop.processes import alive, kill_tree, wait_for
from rl.output.metrics import read_records

pytestmark = pytest.mark.integration(seconds=130)

STEPS = 12
RUN = [
    "train.batch_groups=4",
    "shaping.m_keep=4",
    "eval.num_problems=8",
    "eval.every=0",
    "rollout.cpu_threads_bind=null",
    "train.max_staleness=0",  # synchronous: step s trains exactly the stream's chunk s
    f"train.max_steps={STEPS}",
    "train.checkpoint_every=2",
    "train.keep_checkpoints=10",
]


def _train_steps(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [r for r in read_records(path)[0] if r["kind"] == "train"] if path.exists() else []


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rl.cli", "train", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill_all(proc: subprocess.Popen) -> None:
    """SIGKILL the run and every process below it (Ray's processes, the engine core)."""
    pids = kill_tree(proc.pid)
    proc.wait(timeout=60)
    assert wait_for(lambda: not any(alive(p) for p in pids), 60)


def test_sigterm_then_sigkill_then_resume_continue_the_run_exactly(rollout_worker, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "resume"
    log = tmp_path / "train.log"
    args = ["arith_tiny", f"output_dir={tmp_path}", "name=resume", *RUN]

    # 1. SIGTERM once step 1 is logged: a checkpoint at the step boundary, a clean stop, the resume hint
    proc = _start(args, log)
    try:
        assert wait_for(lambda: _train_steps(run_dir) or proc.poll() is not None, 600), log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill_all(proc)
    stopped_at = _train_steps(run_dir)[-1]["step"]
    assert [checkpoint.step_of(p) for p in checkpoint.complete_checkpoints(run_dir)][-1] == stopped_at
    assert f"continue with: rl train --resume {run_dir}" in log.read_text()

    # 2. resume, then SIGKILL the whole run once a later checkpoint exists and a step beyond it is logged
    proc = _start(["--resume", str(run_dir)], log)
    try:

        def past_a_new_checkpoint() -> bool:
            saved = checkpoint.complete_checkpoints(run_dir)
            newest = checkpoint.step_of(saved[-1]) if saved else 0
            return newest > stopped_at and _train_steps(run_dir)[-1]["step"] > newest or proc.poll() is not None

        assert wait_for(past_a_new_checkpoint, 600, poll_s=0.05), log.read_text()[-3000:]
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        _kill_all(proc)
    killed_after = checkpoint.latest_checkpoint(run_dir)
    assert _train_steps(run_dir)[-1]["step"] > checkpoint.step_of(killed_after)  # steps the kill loses

    # 3. resume to the end, in this process on the warm engine (`rl train --resume` itself ran in 2.)
    cfg, saved = checkpoint.resume_config(run_dir, [])
    assert saved == killed_after
    resumed = Driver(cfg, resume=saved, start_actors=on_the_warm_engine(rollout_worker))
    assert asyncio.run(resumed.run())["steps"] == STEPS

    train = _train_steps(run_dir)
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))  # each step once, in order
    cfg = small_run(tmp_path, "resume", *RUN)
    stream = PromptStream(preflight(cfg).train_rows, 4, cfg.seed).chunks()
    for record, chunk in zip(train, stream, strict=False):  # an uninterrupted run trains chunk s at step s
        assert sorted(record["prompt_ids"]) == sorted(row.prompt_id for _, row in chunk), record["step"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    resumes = [r for r in records if r["kind"] == "resume"]
    assert [r["step"] for r in resumes] == [stopped_at, checkpoint.step_of(killed_after)]
    assert all(r["trainer_digest_equal"] == 1.0 for r in resumes)
    (summary,) = [r for r in records if r["kind"] == "summary"]
    assert summary["steps"] == STEPS and summary["groups_trained"] == STEPS * 4
    assert summary["replayed_groups"] == sum(r["replayed_groups"] for r in resumes)
    assert summary["groups_unaccounted"] == 0  # trained, dropped with a reason, replayed after a kill, or open
    trained_at_kill = checkpoint.read_driver_state(killed_after)["train_seconds"]  # the two runs before it
    assert summary["train_seconds"] > trained_at_kill > 0  # the run's training time, not the last segment's


def shaping_statistics(driver: Driver) -> dict:
    """What a darts+sart run has learned about its prompts: DARTS's length-std EMAs, TIE's log-t fits and the
    length windows behind them, its step count and redundancy, and the idle governor's redundancy."""
    darts = driver.policy.darts
    lengths = darts.lengths
    return {
        "std": dict(lengths._std),
        "fits": {prompt: lengths.log_t(prompt) for prompt in lengths._lengths},
        "windows": {prompt: list(window) for prompt, window in lengths._lengths.items()},
        "steps": darts.steps,
        "avg_redundancy": darts.avg_redundancy,
        "governor": driver.governor.value,
    }


def test_a_resumed_darts_sart_run_restores_its_shaping_state_and_trainer(rollout_worker, tiny_model_dir, tmp_path):
    """A darts+sart run with the idle governor, resumed from its final checkpoint: the policy's statistics are
    those it had when the checkpoint was written, exactly; the trainer state loaded has the digest saved with the
    checkpoint, which is the digest of the tensors on disk (loaded here into a trainer of our own); a checkpoint
    whose weights were altered is refused with the digests unequal."""
    from rl.trainer.engine import TrainerSpec
    from rl.trainer.fsdp_engine import FSDPEngine
    from safetensors.torch import load_file, save_file

    shaped = ["shaping.policy=darts+sart", "shaping.idle_target=0.5", "train.max_steps=2"]
    cfg = small_run(tmp_path, "shaped", *shaped, "train.save_checkpoint=true", "train.checkpoint_every=null")
    warm = on_the_warm_engine(rollout_worker)
    first = Driver(cfg, start_actors=warm)
    assert asyncio.run(first.run())["steps"] == 2
    before = shaping_statistics(first)
    assert before["std"] and before["fits"] and before["steps"] > 0  # it learned something worth restoring

    resumed_cfg, saved = checkpoint.resume_config(cfg.run_dir, ["train.max_steps=3"])
    assert checkpoint.step_of(saved) == 2
    second = Driver(resumed_cfg, resume=saved, start_actors=warm)
    assert shaping_statistics(second) == before
    own = FSDPEngine(TrainerSpec(model=tiny_model_dir))
    assert own.load(str(saved)) == 2
    assert own.state_digest() == checkpoint.read_driver_state(saved)["trainer_digest"]
    assert asyncio.run(second.run())["steps"] == 3
    resumes = [r for r in read_records(cfg.run_dir / "metrics.jsonl")[0] if r["kind"] == "resume"]
    assert [(r["step"], r["trainer_digest_equal"]) for r in resumes] == [(2, 1.0)]

    damaged = checkpoint.latest_checkpoint(cfg.run_dir)  # step 3's
    weights = load_file(damaged / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 1e-3
    save_file(weights, damaged / "model.safetensors", metadata={"format": "pt"})
    third_cfg, path = checkpoint.resume_config(cfg.run_dir, ["train.max_steps=4"])
    refused = "the trainer state loaded differs from the one saved: the checkpoint is damaged; remove it to resume "
    with pytest.raises(checkpoint.CheckpointError, match=f"{refused}from step_000002"):
        asyncio.run(Driver(third_cfg, resume=path, start_actors=warm).run())
    resumes = [r for r in read_records(cfg.run_dir / "metrics.jsonl")[0] if r["kind"] == "resume"]
    assert [(r["step"], r["trainer_digest_equal"]) for r in resumes] == [(2, 1.0), (3, 0.0)]
    shutil.rmtree(damaged)  # as the refusal says: the resume then starts from the checkpoint before it
    assert checkpoint.step_of(checkpoint.resume_config(cfg.run_dir, ["train.max_steps=4"])[1]) == 2
