"""The driver's logic on an in-process fleet: stand-ins with the actors' async methods, no Ray, no vLLM, no torch
training. What they show is the driver's bookkeeping (round robin, staleness bound, weight versions, a dead worker
replaced or the run stopped, every group accounted for); real runs are in the test_e2e_* files."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import signal
import time
from typing import Any

import pytest
from ray.exceptions import RayActorError
from rl.rollout.group_runner import GroupResult
from small_runs import small_run

from rl.inputs.preflight import preflight
from rl.loop.buffer import TrajectoryBuffer
from rl.loop.driver import Driver, RunFailed
from rl.loop.fleet import Fleet, RolloutPool
from rl.loop.weight_channel import SyncReport
from rl.types import Sample


class Remote:
    """An in-process object behind Ray's call syntax: ``handle.method.remote(*args)`` starts the call at once and
    returns an awaitable of its result (or of its exception)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.obj, name)

        def remote(*args: Any) -> asyncio.Future:
            try:
                result = method(*args)
            except Exception as e:  # raised at the await, as Ray does
                future = asyncio.get_running_loop().create_future()
                future.set_exception(e)
                return future
            if inspect.isawaitable(result):
                return asyncio.ensure_future(result)
            future = asyncio.get_running_loop().create_future()
            future.set_result(result)
            return future

        return type("Method", (), {"remote": staticmethod(remote)})


class FakeRolloutWorker:
    """Answers every group with samples stamped with the version it last loaded; dies after ``dies_after`` groups."""

    def __init__(self, seed: int, dies_after: int | None = None, train_group_s: float = 0.01) -> None:
        self.rng = random.Random(seed)
        self.version = 0
        self.loads: list[int] = []  # versions loaded, in order
        self.groups = 0
        self.dies_after = dies_after
        self.train_group_s = train_group_s  # at most this long for a training group, 0.01 s for an evaluation one
        self.generating = 0  # groups being generated now

    def _alive(self) -> None:
        if self.dies_after is not None and self.groups >= self.dies_after:
            raise RayActorError()

    async def generate_group(self, group_id: str, prompt_tokens: list[int], sampling: Any, controller: Any, *_) -> Any:
        self._alive()
        self.groups += 1
        self.generating += 1
        try:
            await asyncio.sleep(self.rng.uniform(0.0, self.train_group_s if "-train-" in group_id else 0.01))
        finally:
            self.generating -= 1
        n = controller.plan.m_keep
        samples = [
            Sample(i, [5, 6, 7], [-1.0] * 3, [self.version] * 3, "stop", text=self.rng.choice(["4", "5", "12"]))
            for i in range(n)
        ]
        return GroupResult(samples, {"launched": n}, [3] * n, ["stop"] * n, 3 * n, 3 * n, 0.01)

    async def load_weights(self, weights: Any, version: int, interrupt: bool = False) -> float:
        self._alive()
        self.version = version
        self.loads.append(version)
        return 0.001

    async def stats(self) -> dict[str, float]:
        return {"startup_s": 0.0}

    async def shutdown(self) -> None:
        """Like an engine that finishes its requests before it stops (the tests' lent warm engine does)."""
        while self.generating:
            await asyncio.sleep(0.01)


class FakeTrainer:
    """Records the staleness of every sample it trains on (its version minus the sample's)."""

    def __init__(self) -> None:
        self.version = 0
        self.staleness: list[int] = []

    def train_step(self, groups: list) -> dict[str, float]:
        self.staleness += [self.version - v for g in groups for s in g.samples for v in s.versions]
        self.version += 1
        return {"seconds": 0.001, "dp_wait_s": 0.0, "loss": 0.0}

    def release_memory(self) -> None:
        pass


class FakeChannel:
    """Loads each new version into every live worker (reports the dead ones), like the cpu channel."""

    overlaps = False

    def __init__(self, pool: RolloutPool) -> None:
        self.pool = pool

    async def start(self) -> None:
        pass

    def export(self) -> None:
        return None

    def export_bytes(self) -> None:
        return None

    async def send(self, version: int, exported: Any = None) -> SyncReport:
        workers = list(self.pool.live)
        results = await asyncio.gather(*[w.load_weights.remote(None, version) for w in workers], return_exceptions=True)
        dead = [w for w, r in zip(workers, results, strict=True) if isinstance(r, RayActorError)]
        return SyncReport(version, 0.001, [0.001], dead)


def in_process_fleet(workers: list[FakeRolloutWorker], replacements: list[FakeRolloutWorker], trainer: FakeTrainer):
    """An actor starter for ``Driver``: the given stand-ins; restarts take the next of ``replacements``."""

    def start(cfg, model_dir, counters) -> Fleet:
        spare = iter(replacements)
        pool = RolloutPool(
            [Remote(w) for w in workers], counters, lambda i: Remote(next(spare)), cfg.rollout.max_restarts
        )
        buffer = TrajectoryBuffer((cfg.train.max_staleness + 1) * cfg.train.batch_groups, cfg.train.max_staleness)
        return Fleet(pool, [Remote(trainer)], Remote(buffer), FakeChannel(pool), kill=lambda actor: None)

    return start


def test_groups_go_round_robin_and_every_step_keeps_the_staleness_bound(tmp_path):
    cfg = small_run(tmp_path, "fleet", "rollout.num_workers=2", "train.max_steps=6", "train.max_staleness=1")
    workers, trainer = [FakeRolloutWorker(0), FakeRolloutWorker(1)], FakeTrainer()
    summary = asyncio.run(Driver(cfg, start_actors=in_process_fleet(workers, [], trainer)).run())

    assert summary["steps"] == 6 and trainer.version == 6
    assert summary["groups_trained"] == 6 * 4 and summary["groups_unaccounted"] == 0
    assert max(trainer.staleness) <= 1 and 1 in trainer.staleness  # the bound holds and is used
    assert abs(workers[0].groups - workers[1].groups) <= 1 + 8 // 2  # round robin (eval groups alternate too)
    assert all(w.loads == list(range(1, 7)) for w in workers)  # every version reached every engine, in order


def test_a_dead_worker_is_replaced_and_serves_only_after_loading_the_current_version(tmp_path):
    cfg = small_run(tmp_path, "fleet", "rollout.max_restarts=1", "train.max_steps=5", "train.max_staleness=1")
    # 8 evaluation groups, then 3 steps of 4: it dies while sampling ahead for step 4 or 5
    dying, spare, trainer = FakeRolloutWorker(0, dies_after=8 + 12), FakeRolloutWorker(1), FakeTrainer()
    driver = Driver(cfg, start_actors=in_process_fleet([dying], [spare], trainer))
    summary = asyncio.run(driver.run())

    assert summary["steps"] == 5 and summary["dead_workers"] == 1 and summary["restarted_workers"] == 1
    assert driver.fleet.rollout.live[0].obj is spare and len(driver.fleet.rollout.started) == 2
    assert spare.loads[0] >= 2 and spare.groups > 0  # joined with the version current when it started
    assert max(trainer.staleness) <= 1  # the bound holds across the replacement
    assert summary["groups_unaccounted"] == 0  # its lost groups, if any, counted as rollout errors


def test_with_the_only_worker_dead_and_no_restarts_the_run_stops_cleanly(tmp_path):
    cfg = small_run(tmp_path, "fleet", "rollout.max_restarts=0", "train.max_steps=5", "train.max_staleness=0")
    dying, trainer = FakeRolloutWorker(0, dies_after=10), FakeTrainer()
    summary = asyncio.run(Driver(cfg, start_actors=in_process_fleet([dying], [], trainer)).run())

    assert summary["steps"] == trainer.version < 5  # stopped early, no traceback, a summary
    assert summary["dead_workers"] == 1 and summary["restarted_workers"] == 0
    assert summary["groups_unaccounted"] == 0


def test_groups_in_flight_at_the_end_stay_open_instead_of_failing(tmp_path, caplog):
    cfg = small_run(tmp_path, "fleet", "train.max_steps=3", "train.max_staleness=2")
    worker, trainer = FakeRolloutWorker(0, train_group_s=0.5), FakeTrainer()
    driver = Driver(cfg, start_actors=in_process_fleet([worker], [], trainer))
    summary = asyncio.run(driver.run())

    assert summary["steps"] == 3 and summary["groups_open"] > 0  # sampling ahead: groups were in flight at the end
    # they were cancelled with the run, not scored later against the closed reward pool as failed groups
    assert driver.counters.rollout_errors == 0, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert summary["groups_unaccounted"] == 0


def test_after_a_run_sigterm_reaches_the_commands_own_handler_again(tmp_path):
    """During a run SIGTERM asks for a checkpoint and a clean stop; after it, a command that goes on (a bench's next
    phase, TRL's process) must still unwind on SIGTERM, not die at once with its children orphaned."""

    def commands_handler(signum, frame):
        raise SystemExit(128 + signum)

    cfg = small_run(tmp_path, "fleet", "train.max_steps=2", "train.max_staleness=1")
    before = signal.signal(signal.SIGTERM, commands_handler)
    before_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a command started in the background
    # (`cmd &`, as CI may be) inherits SIGINT ignored

    def no_actors(cfg, model_dir, counters):
        raise RuntimeError("no engine")

    try:
        asyncio.run(Driver(cfg, start_actors=in_process_fleet([FakeRolloutWorker(0)], [], FakeTrainer())).run())
        assert signal.getsignal(signal.SIGTERM) is commands_handler
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(RuntimeError, match="no engine"):  # a run that fails while starting gives them back too
            asyncio.run(Driver(cfg, start_actors=no_actors).run())
        assert signal.getsignal(signal.SIGTERM) is commands_handler
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, before_int)


class StartingWorker(FakeRolloutWorker):
    """An engine that takes its time to start: a stop signal comes meanwhile (``signum``, sent to this process), while
    it is being built (``stats``) or once it is up, during the evaluation before training (``generate_group``). Its
    shutdown call, were it made, would hang (bounded: a failing test ends)."""

    def __init__(self, signum: int, stops_in: str = "stats") -> None:
        super().__init__(0)
        self.signum, self.stops_in = signum, stops_in
        self.shutdown_calls = 0

    async def stats(self) -> dict[str, float]:
        if self.stops_in == "stats":
            os.kill(os.getpid(), self.signum)
        await asyncio.sleep(0.05)
        return {"startup_s": 0.05}

    async def generate_group(self, *args: Any) -> Any:
        if self.stops_in == "generate_group":
            self.stops_in = "nowhere"  # once: a second signal stops a run at once
            os.kill(os.getpid(), self.signum)
            await asyncio.sleep(60)  # the evaluation is cancelled meanwhile
        return await super().generate_group(*args)

    async def shutdown(self) -> None:
        self.shutdown_calls += 1
        await asyncio.sleep(60)


@pytest.mark.parametrize(
    ("signum", "command_ignores_it", "stops"),
    [(signal.SIGINT, False, True), (signal.SIGHUP, False, True), (signal.SIGHUP, True, False)],
    ids=["ctrl_c", "terminal_closed", "terminal_closed_under_nohup"],
)
def test_a_stop_signal_while_starting_ends_the_run_before_training(
    tmp_path, monkeypatch, caplog, signum, command_ignores_it, stops
):
    """Ctrl-C or a closed terminal while the engines are built: no evaluation, no step, the engines ended at once
    (one still being built cannot answer a shutdown call), a summary that says so. Under nohup (SIGHUP ignored) the
    run goes on and stays deaf to it."""
    cfg = small_run(tmp_path, "fleet", "train.max_steps=2", "train.max_staleness=1")
    worker, trainer = StartingWorker(signum), FakeTrainer()
    # the command's handler: ignored (nohup), or the default, whatever this process inherited (CI may run under nohup)
    default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
    command = signal.SIG_IGN if command_ignores_it else default
    before = signal.signal(signum, command)
    try:
        if not stops:
            worker.shutdown = FakeRolloutWorker.shutdown.__get__(worker)  # a run that ends normally shuts down
        driver = Driver(cfg, start_actors=in_process_fleet([worker], [], trainer))
        started = time.monotonic()
        summary = asyncio.run(driver.run())
        assert signal.getsignal(signum) is command
    finally:
        signal.signal(signum, before)
    if not stops:
        assert summary["stopped_by"] is None and summary["steps"] == 2 and trainer.version == 2
        return
    assert summary["stopped_by"] == signal.Signals(signum).name
    assert summary["steps"] == 0 and trainer.version == 0 and worker.groups == 0  # not even the evaluation before
    assert summary["checkpoint"] is None and summary["groups_unaccounted"] == 0
    assert worker.shutdown_calls == 0 and time.monotonic() - started < 2
    assert "did not shut down within" not in caplog.text


def test_a_stop_signal_during_the_evaluation_before_training_gives_the_engines_a_bounded_wait(
    tmp_path, monkeypatch, caplog
):
    """Ctrl-C once the engines are up: they are asked to shut down, waited for ``SHUTDOWN_WAIT_S`` at most, then
    ended."""
    monkeypatch.setattr("rl.loop.driver.SHUTDOWN_WAIT_S", 0.2)
    cfg = small_run(tmp_path, "fleet", "train.max_steps=2", "train.max_staleness=1")
    worker, trainer = StartingWorker(signal.SIGINT, stops_in="generate_group"), FakeTrainer()
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        started = time.monotonic()
        summary = asyncio.run(Driver(cfg, start_actors=in_process_fleet([worker], [], trainer)).run())
    finally:
        signal.signal(signal.SIGINT, before)
    assert summary["stopped_by"] == "SIGINT" and summary["steps"] == 0 and trainer.version == 0
    assert worker.shutdown_calls == 1 and time.monotonic() - started < 5
    assert "did not shut down within" in caplog.text


class SlowStartWorker(FakeRolloutWorker):
    """An engine that takes a second to start (its first ``stats`` call: the driver's wait for the engines)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.up = False

    async def stats(self) -> dict[str, float]:
        if not self.up:
            await asyncio.sleep(1.0)
            self.up = True
        return {"startup_s": 1.0}


def test_a_start_far_longer_than_the_limit_is_warned_of_as_the_start(tmp_path, monkeypatch, caplog):
    """The stall watch covers the start-up: an engine that takes longer than the limit to come up is named."""
    from rl.loop import stall

    monkeypatch.setattr(stall, "STALL_FLOOR_S", 0.3)
    monkeypatch.setattr(stall, "STALL_CHECK_S", 0.05)
    caplog.set_level(logging.WARNING, logger="rl.stall")
    cfg = small_run(tmp_path, "slow", "train.max_steps=1", "train.max_staleness=1")
    summary = asyncio.run(Driver(cfg, start_actors=in_process_fleet([SlowStartWorker()], [], FakeTrainer())).run())
    warned = [r.getMessage() for r in caplog.records if r.name == "rl.stall"]
    assert any(w.endswith("while waiting for the rollout engines and the trainers to start") for w in warned), warned
    assert summary["steps"] == 1 and summary["stalls"] >= 1


def test_engines_and_trainers_share_the_gpus_when_there_are_fewer_gpus_than_actors():
    from rl.loop.actors import gpu_share

    assert gpu_share(0, 2) == 0.0  # CPU cluster
    assert gpu_share(1, 2) == 0.5  # one GPU: one engine and one trainer side by side
    assert gpu_share(8, 2) == 1.0 and gpu_share(2, 2) == 1.0  # a whole GPU each where there are enough
    assert gpu_share(3, 4) == 0.5  # 4 actors at 0.5 fit on 3 GPUs (at 0.75 only 3 would: no two share a GPU)
    assert gpu_share(1, 3) == 1 / 3
    assert gpu_share(1 - 0.2, 2) == 1 / 3  # one GPU, 0.2 of it for SART's scorer: 1/3 + 1/3 + 0.2 fit on it


class SleepyWorker(FakeRolloutWorker):
    """Sleeps and wakes as an engine is asked to (``rollout.sleep_while_training``); its ``fail_wake``-th wake raises,
    and a group asked of it while any of it sleeps fails."""

    def __init__(self, seed: int, fail_wake: int | None = None) -> None:
        super().__init__(seed)
        self.asleep: set[str] = set()
        self.calls: list[tuple] = []
        self.wakes, self.fail_wake = 0, fail_wake

    async def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level, self.generating))
        self.asleep = {"weights", "kv_cache"}

    async def wake_up(self, tags: list[str]) -> None:
        self.wakes += 1
        if self.wakes == self.fail_wake:
            raise ValueError("CUDA out of memory")
        self.calls.append(("wake", *tags))
        self.asleep.difference_update(tags)

    async def load_weights(self, weights: Any, version: int, interrupt: bool = False) -> float:
        self.calls.append(("load", version, sorted(self.asleep)))
        return await super().load_weights(weights, version, interrupt)

    async def generate_group(self, group_id: str, *args: Any) -> Any:
        assert not self.asleep, f"{group_id} asked of a sleeping engine"
        return await super().generate_group(group_id, *args)


def test_sleeping_engines_sleep_each_step_and_wake_before_any_group(tmp_path):
    steps = ["train.max_steps=3", "train.max_staleness=0"]
    inputs = preflight(small_run(tmp_path, "sleep", *steps))  # preflight refuses sleep on a machine without GPU
    cfg = small_run(tmp_path, "sleep", *steps, "rollout.sleep_while_training=true")
    worker = SleepyWorker(0)
    summary = asyncio.run(Driver(cfg, inputs, start_actors=in_process_fleet([worker], [], FakeTrainer())).run())
    assert summary["steps"] == 3 and summary["rollout_errors"] == 0 and summary["groups_unaccounted"] == 0
    # each step: asleep with no group running, weights woken, the version loaded while the KV cache sleeps, then it
    step = [[("sleep", 2, 0), ("wake", "weights"), ("load", v, ["kv_cache"]), ("wake", "kv_cache")] for v in (1, 2, 3)]
    assert worker.calls == [call for calls in step for call in calls]


def test_an_engine_that_cannot_wake_stops_the_run_in_one_line(tmp_path):
    steps = ["train.max_steps=3", "train.max_staleness=0"]
    inputs = preflight(small_run(tmp_path, "sleep", *steps))
    cfg = small_run(tmp_path, "sleep", *steps, "rollout.sleep_while_training=true")
    worker = SleepyWorker(0, fail_wake=3)  # the weights of step 2
    with pytest.raises(RunFailed) as failed:
        asyncio.run(Driver(cfg, inputs, start_actors=in_process_fleet([worker], [], FakeTrainer())).run())
    assert str(failed.value) == "a rollout engine could not wake its weights: CUDA out of memory"
    assert failed.value.summary["steps"] == 2 and failed.value.summary["failure"] == str(failed.value)
