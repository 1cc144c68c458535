"""An in-process rollout worker: one vLLM engine in this process, no Ray (used by ``rl eval``)."""

from __future__ import annotations

import time

from rl.rollout.group_runner import GroupResult, run_group
from rl.rollout.vllm_adapter import EngineSpec, SamplingSpec, VllmEngine, configure_cpu_threads
from rl.shaping.policy import GroupController


class LocalRolloutWorker:
    """The rollout worker's ``generate_group`` on an engine owned by this process; build with ``start``."""

    def __init__(self, engine: VllmEngine, startup_s: float) -> None:
        from transformers import AutoTokenizer

        self.engine = engine
        self.startup_s = startup_s
        self.tokenizer = AutoTokenizer.from_pretrained(engine.spec.model)

    @classmethod
    async def start(cls, spec: EngineSpec, cpu_threads_bind: str | None = None) -> LocalRolloutWorker:
        """Build and start the engine (25-50 s on a 2-core CPU)."""
        configure_cpu_threads(cpu_threads_bind)
        t0 = time.monotonic()
        engine = VllmEngine(spec)
        await engine.start()
        return cls(engine, time.monotonic() - t0)

    async def generate_group(
        self,
        group_id: str,
        prompt_tokens: list[int],
        sampling: SamplingSpec,
        controller: GroupController,
        progress_every_s: float = 0.0,
    ) -> GroupResult:
        """Sample one group under ``controller`` (decoded samples, as ``RolloutWorker.generate_group``)."""
        return await run_group(
            self.engine,
            group_id,
            prompt_tokens,
            sampling,
            controller,
            decode=lambda tokens: self.tokenizer.decode(tokens, skip_special_tokens=True),
            progress_every_s=progress_every_s,
        )

    def shutdown(self) -> None:
        self.engine.shutdown()
