"""Engines that sleep while the trainers step (``rollout.sleep_while_training``): the order of a step with fakes,
then a real synchronous run whose engine goes through vLLM's sleep and wake calls (on the CPU they free nothing:
vLLM's CPU worker ignores the memory part, the scheduler's pause and the sleeping tags are real)."""

from __future__ import annotations

import asyncio
import json

import pytest
from small_runs import on_the_warm_engine, small_run

from rl.inputs.preflight import preflight
from rl.loop.admission import AdmissionControl
from rl.loop.driver import Driver
from rl.loop.engine_sleep import EngineSleep, EngineWakeFailed
from rl.loop.weight_channel import SyncReport
from rl.loop.weight_sync import WeightSync


class _Remote:
    """``actor.method.remote(*args)`` for a fake actor: records the call, returns an awaitable (raising ``error``)."""

    def __init__(self, calls: list, name: str, error: Exception | None = None) -> None:
        self.calls, self.name, self.error = calls, name, error

    def remote(self, *args):
        self.calls.append((self.name, *args))
        return self._fail() if self.error else asyncio.sleep(0)

    async def _fail(self) -> None:
        raise self.error


class _Actor:
    """A fake actor; its method ``refuses`` raises (as vLLM's sleep does without sleep mode enabled)."""

    def __init__(self, calls: list, who: str, refuses: str | None = None) -> None:
        self.calls, self.who, self.refuses = calls, who, refuses

    def __getattr__(self, method: str) -> _Remote:
        error = ValueError(f"{method} refused") if method == self.refuses else None
        return _Remote(self.calls, f"{self.who}.{method}", error)


class _Channel:
    overlaps = False

    def __init__(self, calls: list) -> None:
        self.calls = calls

    async def send(self, version: int, exported=None) -> SyncReport:
        self.calls.append(("channel.send", version))
        return SyncReport(version, 0.01, [0.01])


class _Admission(AdmissionControl):
    def __init__(self, calls: list) -> None:
        super().__init__(batch_groups=4, max_staleness=0)
        self.calls = calls

    async def set_trainer_version(self, version: int) -> None:
        self.calls.append(("admission.version", version))
        await super().set_trainer_version(version)


@pytest.mark.parametrize(("lora", "level"), [([], 2), (["train.lora.rank=4", "train.lora.sync=adapter"], 1)])
def test_engines_sleep_then_wake_weights_load_wake_cache_before_any_group_starts(tmp_path, lora, level):
    calls: list = []
    cfg = small_run(tmp_path, "order", "train.max_staleness=0", "rollout.sleep_while_training=true", *lora)
    pool = type("Pool", (), {"live": [_Actor(calls, "engine0"), _Actor(calls, "engine1")]})()
    sleep = EngineSleep(cfg, pool, [_Actor(calls, "trainer")])
    sync = WeightSync(_Channel(calls), _Admission(calls), False, lambda w: None, sleep)

    async def step() -> dict:
        await sleep.sleep()
        calls.append(("trainer.train_step",))
        return await sync.sync(1)

    metrics = asyncio.run(step())
    assert calls == [
        ("engine0.sleep", level),
        ("engine1.sleep", level),
        ("trainer.train_step",),
        ("trainer.release_memory",),
        ("engine0.wake_up", ["weights"]),
        ("engine1.wake_up", ["weights"]),
        ("channel.send", 1),
        ("engine0.wake_up", ["kv_cache"]),
        ("engine1.wake_up", ["kv_cache"]),
        ("admission.version", 1),
    ]
    assert metrics["engine_sleep_s"] >= 0 and metrics["engine_wake_s"] >= 0 and metrics["weight_sync_s"] == 0.01


def test_an_engine_that_cannot_sleep_is_logged_one_that_cannot_wake_stops_the_run(tmp_path, caplog):
    cfg = small_run(tmp_path, "faults", "train.max_staleness=0", "rollout.sleep_while_training=true")
    calls: list = []
    for refuses in ("sleep", "wake_up"):
        pool = type("Pool", (), {"live": [_Actor(calls, "engine0"), _Actor(calls, "engine1", refuses)]})()
        sleep = EngineSleep(cfg, pool, [_Actor(calls, "trainer")])
        asyncio.run(sleep.sleep())
        if refuses == "sleep":
            asyncio.run(sleep.wake_weights())
            assert "a rollout engine could not sleep, it stays awake through this step: sleep refused" in caplog.text
        else:
            with pytest.raises(EngineWakeFailed, match="a rollout engine could not wake its weights: wake_up refused"):
                asyncio.run(sleep.wake_weights())


@pytest.mark.integration
def test_a_synchronous_run_with_sleeping_engines_trains_on_policy(ray_session, rollout_worker, tmp_path, monkeypatch):
    """Each step: the engine sleeps (level 2) after the batch, wakes its weights, loads the new version while its
    scheduler stays paused, wakes its KV cache and samples the next batch with exactly the trainer's weights. The
    engine's own ``is_sleeping`` is read at each phase."""
    import ray

    seen: list[tuple[str, bool]] = []
    sleep, wake_cache = EngineSleep.sleep, EngineSleep.wake_cache

    async def sleep_and_ask(self: EngineSleep) -> None:
        await sleep(self)
        seen.append(("slept", await rollout_worker.is_sleeping.remote()))

    async def ask_around_the_wake(self: EngineSleep) -> None:
        seen.append(("loaded", await rollout_worker.is_sleeping.remote()))
        await wake_cache(self)
        seen.append(("woken", await rollout_worker.is_sleeping.remote()))

    monkeypatch.setattr(EngineSleep, "sleep", sleep_and_ask)
    monkeypatch.setattr(EngineSleep, "wake_cache", ask_around_the_wake)
    overrides = ["train.max_staleness=0", "train.max_steps=3", "eval.num_problems=4"]
    inputs = preflight(small_run(tmp_path, "sleep", *overrides))  # preflight refuses sleep on a machine without GPU
    cfg = small_run(tmp_path, "sleep", *overrides, "rollout.sleep_while_training=true")
    summary = asyncio.run(Driver(cfg, inputs, start_actors=on_the_warm_engine(rollout_worker)).run())
    assert summary["steps"] == 3 and summary["rollout_errors"] == 0 and summary["groups_unaccounted"] == 0
    records = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["staleness_max"] for r in train] == [0, 0, 0]
    assert all(r["engine_sleep_s"] > 0 and r["engine_wake_s"] > 0 for r in train)
    assert all(r["logprob_gap"] < 1e-3 for r in train)  # the woken engine samples with the trainer's weights
    assert seen == [("slept", True), ("loaded", True), ("woken", False)] * 3
    stats = ray.get(rollout_worker.stats.remote())
    assert stats["version"] == 3 and stats["unfinished"] == 0
    assert not ray.get(rollout_worker.is_sleeping.remote())  # awake for the next run
