"""A rollout worker dies mid-run: its groups are counted as errors, the run goes on with the other one, or with a
replacement when it was the only one."""

import asyncio
import contextlib
import json
from pathlib import Path

import pytest
import ray
from small_runs import small_run

from rl.driver import Driver

pytestmark = pytest.mark.integration  # starts real Ray or vLLM


def _mapped_semaphore_inodes() -> set[int]:
    """Inodes of the named semaphores some live process has mapped (one is mapped while in use; its creator maps it
    under the temporary name it was made as, so the inode, not the name, says which file it is)."""
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped |= {int(line.split()[4]) for line in maps.read_text().splitlines() if "/dev/shm/sem." in line}
        except OSError:  # the process ended, or is not ours to read
            continue
    return mapped


@pytest.fixture(autouse=True)
def _unlink_semaphores_of_killed_workers():
    """A SIGKILLed engine cannot unlink its multiprocessing semaphores: remove the ones a test leaves behind that no
    live process uses (another pytest worker may be starting an engine whose semaphores are new too)."""
    before = set(Path("/dev/shm").glob("sem.mp-*"))
    yield
    in_use = _mapped_semaphore_inodes()
    for path in set(Path("/dev/shm").glob("sem.mp-*")) - before:
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_ino not in in_use:
                path.unlink()


def run_killing_after_first_step(driver: Driver, victim: int) -> dict:
    """Run ``driver``, killing its rollout worker ``victim`` once the first step is done."""

    async def kill_after_first_step() -> None:
        while driver.version < 1:
            await asyncio.sleep(0.05)
        ray.kill(driver.fleet.rollout.started[victim])

    async def scenario() -> dict:
        killer = asyncio.create_task(kill_after_first_step())
        summary = await driver.run()
        await killer
        return summary

    return asyncio.run(scenario())


def test_run_survives_a_dead_rollout_worker(ray_session, tiny_model_dir, tmp_path):
    cfg = small_run(
        tmp_path,
        "dead",
        "rollout.num_workers=2",
        "rollout.max_restarts=0",
        "train.max_steps=4",
        "train.max_staleness=1",
    )
    summary = run_killing_after_first_step(Driver(cfg), victim=1)

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


def test_the_only_rollout_worker_is_replaced(ray_session, tiny_model_dir, tmp_path):
    # staleness 1 lets at most 2 steps of groups exist when the worker dies, so steps 4 and 5 need the replacement
    cfg = small_run(tmp_path, "restart", "rollout.max_restarts=1", "train.max_steps=5", "train.max_staleness=1")
    driver = Driver(cfg)
    summary = run_killing_after_first_step(driver, victim=0)

    assert summary["steps"] == 5 and summary["dead_workers"] == 1 and summary["restarted_workers"] == 1
    pool = driver.fleet.rollout
    assert len(pool.started) == 2 and pool.live == [pool.started[1]]  # the replacement is the one serving
    assert 0.0 <= summary["accuracy_after"] <= 1.0  # evaluated on the replacement
    train = [
        r
        for r in map(json.loads, (tmp_path / "restart" / "metrics.jsonl").read_text().splitlines())
        if r["kind"] == "train"
    ]
    # it joined labelled with the version it loaded (tests/test_weight_sync.py checks what a load does), so
    # admission control still bounds the staleness of every step, before and after the restart
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5] and all(r["staleness_max"] <= 1 for r in train)
