"""A disk that takes no more writes stops a run with one line instead of a traceback: the records' writer keeps
its first failed write for the run to stop on, and a checkpoint that cannot be written says why and leaves no
partial directory behind. Writes to /dev/full fail as on a full disk (ENOSPC)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from small_runs import on_the_warm_engine, small_run

from rl.cli.common import recipe_path
from rl.config import load_config
from rl.loop import checkpoint
from rl.loop.driver import RunFailed, run_training
from rl.output.metrics import MetricsLogger

FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this machine")


@needs_dev_full
def test_the_records_writer_keeps_its_first_failed_write_and_raises_nothing(tmp_path):
    (tmp_path / "metrics.jsonl").symlink_to(FULL)
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(1, {"reward_mean": 0.5})
    assert logger.write_error == f"No space left on device ({tmp_path})"
    logger.log(2, {"reward_mean": 0.6})  # dropped: the first failure stands
    logger.close()  # its buffered lines cannot reach the disk either; nothing raised
    assert logger.write_error == f"No space left on device ({tmp_path})"


class _Rank:
    """A trainer rank whose ``save`` writes 1 MiB of its state, then fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.save = SimpleNamespace(remote=self._save)

    async def _save(self, directory: str) -> None:
        (Path(directory) / "trainer_state.pt").write_bytes(b"x" * 2**20)
        raise self.error


@pytest.mark.parametrize(
    ("error", "free", "says"),
    [
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 4096, "the disk is full (1.0 MB written before it filled"),
        (RuntimeError("saving\nunexpected pos 1220096 vs 1219988"), 2**30, "RuntimeError: unexpected pos 1220096"),
    ],
)
def test_a_checkpoint_not_written_says_why_in_one_line_and_leaves_no_partial(tmp_path, monkeypatch, error, free, says):
    cfg = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r"])
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: SimpleNamespace(free=free))
    with pytest.raises(checkpoint.CheckpointNotWritten) as failed:
        asyncio.run(checkpoint.write(cfg, 5, [_Rank(error)], {}, {"version": 5}))
    message = str(failed.value)
    assert message.startswith(f"the checkpoint of step 5 could not be written to {cfg.run_dir / 'checkpoints'}: ")
    assert says in message and "\n" not in message
    assert not list((cfg.run_dir / "checkpoints").iterdir())  # the partial step_000005.tmp is gone


def _train(rollout_worker, tmp_path: Path, *overrides: str) -> None:
    cfg = small_run(tmp_path, "r", "train.max_steps=4", "train.max_staleness=0", *overrides)
    run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))


@pytest.mark.integration
@needs_dev_full
def test_a_run_whose_records_cannot_be_written_stops_with_one_line(rollout_worker, tmp_path, caplog):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").symlink_to(FULL)
    with pytest.raises(RunFailed) as stopped:
        _train(rollout_worker, tmp_path)
    assert str(stopped.value) == f"the run's records cannot be written: No space left on device ({tmp_path / 'r'})"
    assert stopped.value.summary["steps"] == 1  # it stops after the first step that could not be recorded
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"{stopped.value}; stopping"]  # no group failing against the closed reward pool after it


@pytest.mark.integration
@needs_dev_full
def test_a_run_whose_checkpoint_cannot_be_written_stops_with_one_line(rollout_worker, tmp_path, caplog):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "checkpoints").symlink_to(FULL)  # no folder can be made in it
    with pytest.raises(RunFailed) as stopped:
        _train(rollout_worker, tmp_path, "train.save_checkpoint=true", "train.checkpoint_every=2")
    where = tmp_path / "r" / "checkpoints"
    assert str(stopped.value).startswith(f"the checkpoint of step 2 could not be written to {where}: NotADirectory")
    assert "\n" not in str(stopped.value)
    summary = stopped.value.summary
    assert (summary["steps"], summary["checkpoint"], summary["failure"]) == (2, None, str(stopped.value))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"{stopped.value}; stopping"]


@needs_dev_full
def test_the_summary_is_printed_when_summary_json_cannot_be_written(tmp_path):
    from rl.output.console import run_summary

    (tmp_path / "summary.json").symlink_to(FULL)
    summary = {"stopped_by": None, "failure": "the run's records cannot be written", "steps": 2, "checkpoint": None}
    lines = run_summary(summary, tmp_path).splitlines()
    assert lines == [
        "warning: summary.json not written (No space left on device)",
        f"run directory: {tmp_path} (metrics.jsonl)",
    ]
