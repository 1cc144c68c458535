"""``rl bench soak`` in miniature: every fault kind but SIGTERM (tests/test_e2e_resume.py stops and resumes a run
with it) strikes once in a 10-step run of the tiny model, and the run comes through with each step logged once,
every group accounted for and every fault counted."""

import os
from pathlib import Path

import pytest
from small_runs import SMALL

from rl.bench.soak import SoakSchedule, run_soak, soak_table

pytestmark = pytest.mark.integration(seconds=130)  # two `rl train` processes, each with its own Ray and vLLM

# a worker killed at step 2, a NaN loss at 4, the whole run SIGKILLed at 7 (resumed from step 6)
SCHEDULE = SoakSchedule(steps=10, checkpoint_every=3, kill_worker_at=2, nan_loss_at=4, sigkill_at=7, sigterm_at=None)
SETTINGS = [
    *[s for s in SMALL if not s.startswith("train.save_checkpoint")],  # the soak resumes from checkpoints
    "reward.functions.0.fn=soak_faults:each_fault_once",  # every reward fault once, early (tests/soak_faults.py)
    "reward.num_workers=1",  # one call at a time: the fault log is read before each call
    "reward.timeout_s=4",  # the hung call is killed after 4 s (the recipe waits 10)
]


def test_a_short_soak_survives_every_fault_kind(tiny_model_dir, tmp_path, monkeypatch):
    where = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]  # where `rl train` finds soak_faults
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, where)))
    result = run_soak("arith_tiny", SCHEDULE, tmp_path, SETTINGS)
    table = soak_table(result)

    assert result.passed, table
    assert [(d["kind"], d["step"] >= at) for d, (at, _) in zip(result.delivered, SCHEDULE.events(), strict=True)] == [
        ("rollout_worker_killed", True),
        ("run_sigkilled", True),
    ], table
    assert result.launches == 2, table
    injected = {k: result.injected.get(k, 0) for k in ("reward_raises", "reward_nan", "reward_hangs")}
    assert injected == {"reward_raises": 1, "reward_nan": 4, "reward_hangs": 1}, table  # 4 NaN values: one group
    s = result.summary
    # struck at step 1, before every checkpoint: none was rolled back by the SIGKILL, so each is counted exactly
    counted = {k: s.get(f"reward_failures_{k}", 0) for k in ("raised", "nan", "timeout")}
    assert counted == {"raised": 1, "nan": 4, "timeout": 1}, table
    assert (s["steps"], s["dead_workers"], s["restarted_workers"]) == (10, 1, 1), table
    assert s["groups_unaccounted"] == 0 and s["groups_trained"] == 10 * 4, table
    assert s["groups_started"] == (
        s["groups_trained"]
        + s["rollout_errors"]
        + sum(v for k, v in s.items() if k.startswith("dropped_groups_"))
        + s["replayed_groups"]
        + s["groups_open"]
    ), table
