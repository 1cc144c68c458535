"""Stall warnings (rl/loop/stall.py): when nothing finishing outlasts the limit, and a real run whose reward stops for a
while saying so, with how its rollouts stand, counted once in the summary, then training on."""

from __future__ import annotations

import asyncio
import logging

import pytest
from small_runs import on_the_warm_engine, small_run

from rl.loop import stall
from rl.loop.driver import Driver
from rl.loop.stall import StallWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_wait_is_overdue_past_the_floor_or_five_of_the_slowest_steps_then_at_each_multiple():
    clock = Clock()
    watch = StallWatch(clock)
    clock.now = stall.STALL_FLOOR_S - 1
    assert watch.overdue() is None
    clock.now = stall.STALL_FLOOR_S + 1
    assert watch.overdue() == stall.STALL_FLOOR_S + 1 and watch.warnings == 1
    assert watch.overdue() is None  # warned once for this multiple of the limit
    clock.now = 2 * stall.STALL_FLOOR_S
    assert watch.overdue() == 2 * stall.STALL_FLOOR_S and watch.warnings == 2

    watch.waiting_for("the checkpoint of step 3")  # a new wait: warned of afresh, slow steps raise the limit
    watch.step_took(60.0)
    assert watch.limit() == 5 * 60.0 and watch.warnings == 0 and not watch.rollouts
    clock.now += 299
    assert watch.overdue() is None
    clock.now += 2
    assert watch.overdue() == 301 and watch.what == "the checkpoint of step 3"
    watch.progressed()  # a group finished: the same wait, but its clock of no progress starts again
    clock.now += 299
    assert watch.overdue() is None and watch.what == "the checkpoint of step 3"


SLOW_REWARD = """
import time
from rl.rewards.math import arith_exact

slept = False


def r(trainer_state=None, **kwargs):
    global slept
    if trainer_state is not None and trainer_state.global_step == 1 and not slept:  # a group of step 2
        slept = True
        time.sleep(8.0)
    return arith_exact(**kwargs)
"""


@pytest.mark.integration(seconds=60)
def test_a_run_whose_reward_stops_warns_once_and_trains_on(
    rollout_worker, tiny_model_dir, tmp_path, caplog, monkeypatch
):
    monkeypatch.setattr(stall, "STALL_FLOOR_S", 3.0)  # the limit: 3 s, or the slowest step where that is longer
    monkeypatch.setattr(stall, "STALL_STEPS", 1.0)
    monkeypatch.setattr(stall, "STALL_CHECK_S", 0.2)
    reward = tmp_path / "slow_reward.py"
    reward.write_text(SLOW_REWARD)
    cfg = small_run(
        tmp_path,
        "stall",
        "train.max_steps=3",
        "train.max_staleness=0",  # step 2 waits for its own groups
        f"reward.functions=[{{fn: '{reward}:r'}}]",
        "reward.num_workers=1",  # one process: it sleeps once
        "reward.timeout_s=30",
    )
    caplog.set_level(logging.WARNING, logger="rl.stall")
    progress = []
    progressed = StallWatch.progressed
    monkeypatch.setattr(StallWatch, "progressed", lambda self: progress.append(1) or progressed(self))
    summary = asyncio.run(Driver(cfg, start_actors=on_the_warm_engine(rollout_worker)).run())

    assert summary["steps"] == 3
    # every group's end, every problem of the two evaluations (before training and after it, 8 problems each)
    assert len(progress) == summary["groups_started"] + 2 * 8
    warnings = [r.getMessage() for r in caplog.records if r.name == "rl.stall"]
    waits = [w.split(" while waiting for ")[1].split(";")[0] for w in warnings]
    assert "step 2 (its batch, then the trainers)" in waits, warnings
    assert summary["stalls"] == len(set(waits))  # each stall counted once, however often it was warned of
    first = warnings[waits.index("step 2 (its batch, then the trainers)")]
    assert first.startswith("stalled: nothing has finished for ") and "(no group, no step)" in first
    assert "of the 4 groups a step takes" in first and "groups are being sampled" in first, first
