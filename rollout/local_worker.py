"""An in-process rollout worker: one vLLM engine in this process, no Ray (used by ``rl eval``)."""

from __future__ import annotations

from rl.rollout.engine import EngineSpec
from rl.rollout.worker import RolloutWorker


class LocalRolloutWorker(RolloutWorker):
    """``RolloutWorker`` (same ``generate_group``, ``stats``, ``shutdown``) owned by this process."""

    @classmethod
    async def start(cls, spec: EngineSpec, cpu_threads_bind: str | None = None) -> LocalRolloutWorker:
        """Build and start the engine (25-50 s on a 2-core CPU)."""
        worker = cls.__new__(cls)
        await RolloutWorker.__init__(worker, spec, cpu_threads_bind)  # a coroutine: Ray's async-actor constructor
        return worker
