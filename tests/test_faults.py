"""Injected faults (rl/bench/faults.py) strike as asked and only then; orphaned weight exports are cleaned up."""

import math
import os

import pytest
from rl.trainer.hooks import HOOKS_ENV, loss_hooks

from rl.bench import faults
from rl.loop.weight_channel import SHARED_DIR, SHARED_PREFIX, remove_orphaned_exports


def test_nan_loss_only_at_scheduled_steps(monkeypatch):
    monkeypatch.delenv(faults.FAULTS_ENV, raising=False)
    assert not faults.scheduled("nan_loss", 30)
    monkeypatch.setenv(faults.FAULTS_ENV, "nan_loss@30,nan_loss@31")
    assert [s for s in range(1, 40) if faults.scheduled("nan_loss", s)] == [30, 31]


def test_the_nan_loss_fault_reaches_the_trainer_only_through_its_hook(monkeypatch):
    monkeypatch.delenv(HOOKS_ENV, raising=False)
    assert loss_hooks() == []  # an ordinary run: the trainer imports no fault
    monkeypatch.setenv(HOOKS_ENV, "rl.bench.faults:nan_loss")
    monkeypatch.setenv(faults.FAULTS_ENV, "nan_loss@3")
    (hook,) = loss_hooks()
    assert math.isnan(hook(1.0, 3)) and hook(1.0, 2) == 1.0
    monkeypatch.setenv(HOOKS_ENV, "rl.bench.faults:no_such_hook")
    with pytest.raises(ImportError, match="no_such_hook"):
        loss_hooks()


def test_reward_faults_strike_their_share_and_are_logged(monkeypatch, tmp_path):
    log = tmp_path / "faults.log"
    monkeypatch.setenv(faults.FAULT_LOG_ENV, str(log))
    monkeypatch.setattr(faults, "HANG_S", 0.0)
    kinds = [faults.reward_fault(f"{i}+1=", "#x") for i in range(20000)]
    for kind, share in faults.REWARD_FAULTS:
        assert abs(kinds.count(kind) / len(kinds) - share) < 0.004, kind
    assert faults.reward_fault("3+1=", "#x") == faults.reward_fault("3+1=", "#x")  # a function of the input

    by_kind = {k: f"{i}+1=" for i, k in enumerate(kinds) if k}
    completions = ["#4", "#5"]
    with pytest.raises(RuntimeError, match="injected"):
        faults.arith_exact_with_faults([by_kind["reward_raises"]] * 2, ["#x"] * 2, ["4", "5"])
    assert all(
        math.isnan(v) for v in faults.arith_exact_with_faults([by_kind["reward_nan"]] * 2, ["#x"] * 2, ["4"] * 2)
    )
    clean = next(f"{i}+1=" for i, k in enumerate(kinds) if k is None)
    assert faults.arith_exact_with_faults([clean] * 2, completions, ["4", "4"]) == [1.0, 0.0]
    assert log.read_text().split() == ["reward_raises"] + ["reward_nan"] * 2


def test_exports_of_dead_runs_are_removed():
    dead = os.path.join(SHARED_DIR, f"{SHARED_PREFIX}999999999-abc-0.safetensors")
    mine = os.path.join(SHARED_DIR, f"{SHARED_PREFIX}{os.getpid()}-abc-0.safetensors")
    for path in (dead, mine):
        open(path, "w").close()
    try:
        removed = [str(p) for p in remove_orphaned_exports()]
        assert dead in removed and os.path.exists(mine)
    finally:
        for path in (dead, mine):
            if os.path.exists(path):
                os.unlink(path)
