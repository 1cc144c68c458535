"""vLLM's engine core in the caller's process, stepped from its event loop (CPU engines; see ``VllmEngine``).

``AsyncLLM`` runs its engine core in a process of its own and trades msgpack messages with it over ZMQ: right for a
GPU host with cores to spare, a cost on a small CPU host, where that process competes with the trainer for a core
and every step's outputs are encoded, sent and decoded. ``InprocAsyncClient`` is the client interface ``AsyncLLM``
expects, over an ``EngineCore`` built in this process: ``AsyncLLM``'s output handler steps the core itself, and
between two steps the event loop serves everything else (the requests' consumers, new requests, aborts, weight loads).
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import SimpleNamespace
from typing import Any

from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason
from vllm.v1.engine.core_client import InprocClient
from vllm.v1.request import RequestStatus


class InprocAsyncClient(InprocClient):
    """``AsyncLLM``'s engine-core client, in process: vLLM's ``InprocClient`` plus the coroutines ``AsyncLLM`` calls.

    Invariants: the core is stepped only by ``get_output_async`` (awaited by one task, ``AsyncLLM``'s output
    handler), never while paused, and it yields to the event loop before every step; every other call runs between
    two steps (one thread, no locks). With nothing to run it waits on an event, never spins. A request aborted by a
    pause in ``abort`` mode gets a final abort output, as the engine-core process sends one.

    The cost: a step, the model's forward pass included, holds the event loop, so whatever else arrives (a Ray call,
    a weight load) waits for the step in progress. On the tiny model with 384 sequences running, a Ray call that took
    2.5 ms (median) with the core in its own process took 42 ms.
    """

    def __init__(self, vllm_config: Any, executor_class: type, log_stats: bool, **_process_only: Any) -> None:
        super().__init__(vllm_config, executor_class, log_stats)
        self.engine_ranks_managed = [0]
        self.resources = SimpleNamespace(engine_dead=False)  # read by AsyncLLM.errored
        self._work = asyncio.Event()  # set whenever there may be something to step or to return
        self._outputs: deque[EngineCoreOutputs] = deque()  # outputs made outside a step (pause aborts)
        self._paused = False

    async def get_output_async(self) -> EngineCoreOutputs:
        """The next step's outputs (or outputs made outside a step), waiting while there is nothing to run."""
        scheduler = self.engine_core.scheduler
        while True:
            if self._outputs:
                return self._outputs.popleft()
            if not self._paused and scheduler.has_requests():
                await asyncio.sleep(0)  # the consumers of the last outputs run before the next step
                if not self._paused:  # a pause may have come in meanwhile
                    return self.get_output()
                continue
            self._work.clear()
            await self._work.wait()

    async def add_request_async(self, request: EngineCoreRequest) -> None:
        self.add_request(request)
        self._work.set()

    async def abort_requests_async(self, request_ids: list[str]) -> None:
        self.abort_requests(request_ids)
        self._work.set()  # the core returns the aborted ids to its workers at the next step

    async def pause_scheduler_async(self, mode: str = "abort", clear_cache: bool = True) -> None:
        if mode == "abort":
            aborted = self.engine_core.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
            if aborted:
                ids = [r.request_id for r in aborted]
                outputs = [EngineCoreOutput(i, [], finish_reason=FinishReason.ABORT) for i in ids]
                self._outputs.append(EngineCoreOutputs(outputs=outputs, finished_requests=set(ids)))
                self._work.set()
        self.engine_core.pause_scheduler(mode=mode, clear_cache=clear_cache)
        self._paused = True

    async def resume_scheduler_async(self) -> None:
        self.engine_core.resume_scheduler()
        self._paused = False
        self._work.set()

    async def sleep_async(self, level: int = 1, mode: str = "abort") -> None:
        """The core's sleep after a pause of this client's (so aborted requests get their final outputs)."""
        await self.pause_scheduler_async(mode=mode, clear_cache=True)
        self.engine_core.sleep(level, mode)

    async def wake_up_async(self, tags: list[str] | None = None) -> bool:
        awake = self.engine_core.wake_up(tags)
        if awake:
            await self.resume_scheduler_async()
        return awake

    async def is_sleeping_async(self) -> bool:
        return self.engine_core.is_sleeping()

    async def is_scheduler_paused_async(self) -> bool:
        return self._paused

    async def get_supported_tasks_async(self) -> Any:
        return self.get_supported_tasks()

    async def set_weight_version_async(self, weight_version: str) -> None:
        self.set_weight_version(weight_version)

    async def add_lora_async(self, lora_request: Any) -> bool:
        return self.add_lora(lora_request)

    async def collective_rpc_async(
        self, method: Any, timeout: float | None = None, args: tuple = (), kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        return self.collective_rpc(method, timeout, args, kwargs)
