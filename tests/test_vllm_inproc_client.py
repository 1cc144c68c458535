"""The CPU engine core in the rollout worker's process: where it runs, and how its client steps it (``get_output_async``
steps only with work to do and not paused, waits otherwise, and ends the requests a pause aborts)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.integration


def test_the_cpu_engine_core_runs_in_the_rollout_workers_process(rollout_worker, encode):
    import ray
    from rl.rollout.engine import SamplingSpec
    from rl.shaping.plain import PlainController
    from rl.shaping.policy import GroupPlan

    def layout(worker):
        import multiprocessing

        return type(worker.engine.engine.engine_core).__name__, len(multiprocessing.active_children())

    assert ray.get(rollout_worker.__ray_call__.remote(layout)) == ("InprocAsyncClient", 0)
    plan = GroupPlan(prompt_id="p", n_launch=4, m_keep=4)
    result = ray.get(
        rollout_worker.generate_group.remote("inproc", encode("3+1="), SamplingSpec(20), PlainController(plan))
    )
    assert len(result.samples) == 4 and all(len(s.tokens) == len(s.logprobs) > 0 for s in result.samples)


class FakeCore:
    """The ``EngineCore`` surface the client drives: requests are ids; a step emits one output per running id."""

    def __init__(self, *_args, **_kwargs) -> None:
        self.running: list[str] = []
        self.steps = 0
        self.paused_with: str | None = None
        self.looks = 0  # has_requests calls: a client that spins makes thousands while it should wait
        self.scheduler = SimpleNamespace(has_requests=self._has_requests, finish_requests=self._finish_all)

    def _has_requests(self) -> bool:
        self.looks += 1
        return bool(self.running)

    def _finish_all(self, ids, status):
        assert ids is None
        aborted, self.running = [SimpleNamespace(request_id=r) for r in self.running], []
        return aborted

    def preprocess_add_request(self, request):
        return request, 0

    def add_request(self, request, wave=0):
        self.running.append(request)

    def abort_requests(self, ids):
        self.running = [r for r in self.running if r not in ids]

    def step_fn(self):
        from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs

        self.steps += 1
        return {0: EngineCoreOutputs(outputs=[EngineCoreOutput(r, [1]) for r in self.running])}, True

    def post_step(self, model_executed):
        pass

    def pause_scheduler(self, mode, clear_cache):
        self.paused_with = mode

    def resume_scheduler(self):
        self.paused_with = None

    def shutdown(self):
        pass


@pytest.fixture
def client(monkeypatch):
    import vllm.v1.engine.core_client as core_client
    from rl.rollout.vllm_inproc_client import InprocAsyncClient

    monkeypatch.setattr(core_client, "EngineCore", FakeCore)
    return InprocAsyncClient(vllm_config=None, executor_class=object, log_stats=False)


async def waiting_output(client) -> asyncio.Task:
    """``get_output_async`` started and seen to wait 50 ms: no step, no spinning (at most two looks at the core)."""
    core = client.engine_core
    steps, looks = core.steps, core.looks
    waiting = asyncio.create_task(client.get_output_async())
    await asyncio.sleep(0.05)
    assert not waiting.done() and core.steps == steps and core.looks - looks <= 2
    return waiting


async def ids_of(waiting: asyncio.Task) -> list[str]:
    return [o.request_id for o in (await asyncio.wait_for(waiting, 1)).outputs]


def test_an_idle_client_waits_for_work_instead_of_stepping(client):
    async def run():
        waiting = await waiting_output(client)
        await client.add_request_async("a")
        assert await ids_of(waiting) == ["a"] and client.engine_core.steps == 1

    asyncio.run(run())


def test_a_paused_client_never_steps_and_ends_the_requests_an_abort_pause_stopped(client):
    async def run():
        core = client.engine_core
        await client.add_request_async("a")
        await client.add_request_async("b")
        await client.pause_scheduler_async(mode="abort", clear_cache=True)
        assert core.paused_with == "abort" and await client.is_scheduler_paused_async()
        ended = await asyncio.wait_for(client.get_output_async(), 1)  # outputs made by the pause, not by a step
        assert sorted(o.request_id for o in ended.outputs) == ["a", "b"] and core.steps == 0
        assert all(str(o.finish_reason) == "abort" for o in ended.outputs)
        await client.add_request_async("c")  # queued while paused
        waiting = await waiting_output(client)
        await client.resume_scheduler_async()
        assert await ids_of(waiting) == ["c"] and core.steps == 1

    asyncio.run(run())


def test_a_keep_pause_keeps_requests_and_they_step_again_on_resume(client):
    async def run():
        await client.add_request_async("a")
        await client.pause_scheduler_async(mode="keep", clear_cache=True)
        waiting = await waiting_output(client)
        assert client.engine_core.running == ["a"] and client.engine_core.steps == 0
        await client.resume_scheduler_async()
        assert await ids_of(waiting) == ["a"]

    asyncio.run(run())
