"""A rollout worker dies mid-run: its groups are counted as errors, the run goes on with the other one."""

import asyncio
import json

import ray
from small_runs import small_run

from rl.driver import Driver


def test_run_survives_a_dead_rollout_worker(ray_session, tiny_model_dir, tmp_path):
    cfg = small_run(tmp_path, "dead", "rollout.num_workers=2", "train.max_steps=4", "train.max_staleness=1")
    driver = Driver(cfg)

    async def kill_one_after_first_step() -> None:
        while driver.version < 1:
            await asyncio.sleep(0.05)
        ray.kill(driver.workers[1])

    async def scenario() -> dict:
        killer = asyncio.create_task(kill_one_after_first_step())
        summary = await driver.run()
        await killer
        return summary

    summary = asyncio.run(scenario())

    assert summary["steps"] == 4  # the run finished on the surviving worker
    assert summary["dead_workers"] == 1
    assert 0.0 <= summary["accuracy_after"] <= 1.0  # evaluated on the survivor
    train = [
        r
        for r in map(json.loads, (tmp_path / "dead" / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    ]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert train[-1]["rollout_errors"] == summary["rollout_errors"]  # failed groups are counted, not lost silently
