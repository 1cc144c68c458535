"""A rollout worker dies mid-run: its groups are counted as errors, the run goes on with the other one, or with a
replacement when it was the only one."""

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import ray
from rl.rollout.engine import SamplingSpec, error_reason
from rl.shaping.plain import PlainController
from rl.shaping.policy import GroupPlan
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker
from small_runs import live_placement_groups, on_the_warm_engine, small_run

from rl.loop.driver import Driver, RunFailed, did_not_start

pytestmark = pytest.mark.integration(seconds=90)  # starts real Ray or vLLM


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
    """Run ``driver``, killing its rollout worker ``victim`` once the first step is done and a request of the
    victim's is in flight, so that groups die with it."""

    async def kill_after_first_step() -> None:
        while driver.version < 1:
            await asyncio.sleep(0.05)
        worker = driver.fleet.rollout.started[victim]
        while not (await worker.stats.remote())["unfinished"] and not driver.stopping.is_set():
            await asyncio.sleep(0.01)
        ray.kill(worker)

    async def scenario() -> dict:
        killer = asyncio.create_task(kill_after_first_step())
        summary = await driver.run()
        await killer
        return summary

    return asyncio.run(scenario())


def records(run_dir: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def assert_groups_accounted(summary: dict) -> None:
    """The groups in flight on the killed worker were counted as rollout errors, and the ledger balances."""
    assert summary["rollout_errors"] > 0  # the victim had a request in flight when it was killed
    assert summary["groups_unaccounted"] == 0
    assert summary["groups_started"] == (
        summary["groups_trained"]
        + summary["rollout_errors"]
        + sum(summary["dropped_groups"].values())
        + summary["replayed_groups"]
        + summary["groups_open"]
    )


def assert_evaluated_on_every_problem(summary: dict, run_dir: Path) -> None:
    """The final evaluation answered all 8 held-out problems on the live engine(s): none was lost to the dead one."""
    after = records(run_dir, "eval")[-1]
    assert after["num_problems"] == 8 and after["samples_per_problem"] == 1
    assert summary["accuracy_after"] == after["accuracy"] and (after["accuracy"] * 8).is_integer()


def test_run_survives_a_dead_rollout_worker(rollout_worker, tiny_model_dir, tmp_path, caplog):
    """Two engines, the session's warm one and one of the run's own; the run's own dies."""
    caplog.set_level(logging.INFO)
    cfg = small_run(
        tmp_path,
        "dead",
        "rollout.num_workers=2",
        "rollout.max_restarts=0",
        "train.max_steps=4",
        "train.max_staleness=1",
    )
    summary = run_killing_after_first_step(Driver(cfg, start_actors=on_the_warm_engine(rollout_worker)), victim=1)

    assert summary["steps"] == 4  # the run finished on the surviving worker
    assert summary["dead_workers"] == 1 and summary["restarted_workers"] == 0
    assert_groups_accounted(summary)
    assert_evaluated_on_every_problem(summary, tmp_path / "dead")
    train = records(tmp_path / "dead", "train")
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert train[-1]["rollout_errors"] == summary["rollout_errors"]  # the train records carry the same count
    # one line says the worker died, not one (with Ray's multi-line OOM hint) per group it held
    shown = [r.getMessage() for r in caplog.records if r.name.startswith("rl") and r.levelno >= logging.INFO]
    assert sum("a rollout worker died" in m for m in shown) == 1 and not [m for m in shown if "failed:" in m]
    # train.save_checkpoint=false (tests/small_runs.py): no checkpoint, not even the final one
    assert summary["checkpoint"] is None and not (tmp_path / "dead" / "checkpoints").exists()


class ProbingDriver(Driver):
    """A driver that, once a replacement engine has loaded the current weights and before it joins the rotation,
    samples from it and asks the trainer for the log-probs of the same tokens. With synchronous training
    (``max_staleness=0``) the trainer cannot step meanwhile: the batch it waits for needs the replacement."""

    def __init__(self, *args, prompt: list[int], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prompt, self.seen = prompt, {}

    async def _load_current(self, worker) -> int:
        version = await super()._load_current(worker)
        plan = PlainController(GroupPlan(prompt_id="probe", n_launch=2, m_keep=2))
        result = await worker.generate_group.remote("probe", self.prompt, SamplingSpec(max_tokens=20), plan)
        trainer = self.fleet.trainers[0]
        self.seen = {
            "loaded": version,
            "served": (await worker.stats.remote())["version"],
            "samples": result.samples,
            "trainer": [await trainer.sequence_logprobs.remote(self.prompt, s.tokens) for s in result.samples],
            "trainer_version": self.version,  # still the version loaded: the trainer did not step meanwhile
        }
        return version


def test_the_only_rollout_worker_is_replaced(ray_session, tiny_model_dir, encode, tmp_path):
    # synchronous: the groups of step 2 are in flight when the worker dies, so steps 2 to 5 need the replacement;
    # lr 1e-3 moves the weights one step away from the initial ones by more than the log-prob check's tolerance
    run = ["rollout.max_restarts=1", "train.max_steps=5", "train.max_staleness=0", "train.lr=1e-3"]
    driver = ProbingDriver(small_run(tmp_path, "restart", *run), prompt=encode("3+1="))
    summary = run_killing_after_first_step(driver, victim=0)

    assert summary["steps"] == 5 and summary["dead_workers"] == 1 and summary["restarted_workers"] == 1
    pool = driver.fleet.rollout
    assert len(pool.started) == 2 and pool.live == [pool.started[1]]  # the replacement is the one serving
    assert_groups_accounted(summary)
    assert_evaluated_on_every_problem(summary, tmp_path / "restart")
    train = records(tmp_path / "restart", "train")
    # it joined labelled with the version it loaded, so admission control still holds every step on-policy
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5] and all(r["staleness_max"] == 0 for r in train)

    # before it served anything, the replacement held the trainer's weights of that moment (step 1): its log-probs
    # are the trainer's (fp32 on both sides), and far from the initial weights' (which a replacement that skipped
    # the load, or loaded the model from disk, would serve)
    seen = driver.seen
    assert seen["loaded"] == seen["served"] == seen["trainer_version"] == 1
    base = TrainerWorker(TrainerSpec(model=tiny_model_dir))
    for sample, trainer_logprobs in zip(seen["samples"], seen["trainer"], strict=True):
        engine = np.array(sample.logprobs)
        assert np.abs(np.array(trainer_logprobs) - engine).mean() < 1e-3
        assert np.abs(np.array(base.sequence_logprobs(encode("3+1="), sample.tokens)) - engine).mean() > 1e-2


def test_a_dead_trainer_stops_the_run_with_one_line(rollout_worker, tiny_model_dir, tmp_path, caplog):
    """The trainer's process dies (the OOM killer's usual pick): the run stops with one line naming it, its summary
    counted up to there, instead of a traceback."""
    cfg = small_run(tmp_path, "dead-trainer", "train.max_steps=6", "train.max_staleness=0")
    driver = Driver(cfg, start_actors=on_the_warm_engine(rollout_worker))

    async def scenario() -> None:
        async def kill_after_first_step() -> None:
            while driver.version < 1:
                await asyncio.sleep(0.05)
            os.kill(await driver.fleet.trainers[0].__ray_call__.remote(lambda self: os.getpid()), signal.SIGKILL)

        killer = asyncio.create_task(kill_after_first_step())
        try:
            await driver.run()
        finally:
            await killer

    with pytest.raises(RunFailed) as stopped:
        asyncio.run(scenario())
    message = str(stopped.value)
    assert re.fullmatch(r"a TrainerWorker process \(pid \d+\) died; the run cannot train on without it", message)
    assert 1 <= stopped.value.summary["steps"] < 6 and stopped.value.summary["failure"] == message
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"{message}; stopping"]


def test_a_trainer_rank_that_does_not_start_stops_the_run_in_one_line(ray_session, rollout_worker, tmp_path):
    """Of two data-parallel ranks, one's constructor raises (a model its node cannot load): the run stops in one
    line naming the actor and its error, not Ray's traceback, and gives the ranks' placement group back."""
    from rl.loop import actors

    place = actors.place_trainers

    def one_refuses(cfg, model_dir):  # the real ranks and their group, rank 1 swapped for one that raises
        ranks, group = place(cfg, model_dir)
        ray.kill(ranks[1])
        return [ranks[0], refuses_to_start().remote("CUDA out of memory", False)], group

    cfg = small_run(tmp_path, "rank", "train.max_steps=2", "train.num_workers=2")
    before = live_placement_groups()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(actors, "place_trainers", one_refuses)
        with pytest.raises(RunFailed) as stopped:
            asyncio.run(Driver(cfg, start_actors=on_the_warm_engine(rollout_worker)).run())
    assert str(stopped.value).startswith("_RefusesToStart did not start: ValueError: CUDA out of memory (its"), stopped
    assert live_placement_groups() <= before


def refuses_to_start() -> type:
    """An actor class whose constructor raises ``message`` (as vLLM's ``EngineStartError`` where ``as_engine``);
    made in a function, so Ray sends it by value (the actor's process cannot import this file)."""

    class _RefusesToStart:
        def __init__(self, message: str, as_engine: bool) -> None:
            from rl.rollout.engine import EngineStartError

            try:
                raise ValueError(message)
            except ValueError as e:
                if as_engine:
                    raise EngineStartError(error_reason(e)) from e
                raise

        def stats(self) -> dict:  # asked of an engine
            return {}

        def join_process_group(self, address: str) -> None:  # asked of a trainer rank
            pass

    return ray.remote(num_cpus=0)(_RefusesToStart)


def test_an_actor_whose_constructor_raised_is_named_with_its_error(ray_session, tmp_path):
    """What a run says when an actor does not start (an engine vLLM refused): the actor, the error's last line and
    where the traceback is, from Ray's real error, not a dead process with no reason; for a rollout worker's
    ``EngineStartError``, the engine's own error, not the wrapper's name."""

    for message, as_engine, raised in [
        ("No available memory for the cache blocks.\nTry increasing it", False, "No available memory for the cache"),
        ("Model architectures ['FooForCausalLM'] are not supported.", True, "Model architectures ['FooForCausalLM']"),
    ]:
        actor = refuses_to_start().remote(message, as_engine)
        with pytest.raises(ray.exceptions.RayActorError) as e:
            ray_session.get(actor.stats.remote(), timeout=120)
        said = did_not_start(e.value, tmp_path)
        assert said.startswith(f"_RefusesToStart did not start: ValueError: {raised}"), said
        assert said.endswith(f". (its traceback: {tmp_path})"), said  # the message's first line only, then where
    assert did_not_start(ray.exceptions.RayActorError(), tmp_path) is None  # died otherwise: not this
