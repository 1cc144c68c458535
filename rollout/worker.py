"""The rollout worker: an async Ray actor hosting one inference engine (vLLM).

Every method is a coroutine on the actor's event loop (Ray allows 1000 concurrent calls), so a weight
load or a stats call never queues behind generation: they interleave at each ``await``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from rl.rollout.engine import EngineSpec, InferenceEngine, SamplingSpec, start_engine
from rl.rollout.episode_settings import EpisodeSettings
from rl.rollout.group_runner import GroupResult, ScoreFn, run_group
from rl.rollout.vllm_adapter import configure_cpu_threads
from rl.rollout.workflow import Episode, Workflow, kept_episodes, run_episodes
from rl.shaping.policy import GroupController

from rl.types import PromptRow


def _to_engine(name: str) -> Callable[..., Awaitable[Any]]:
    """A worker method that hands its call, arguments unchanged, to the engine's method ``name``."""

    async def call(self: RolloutWorker, *args: Any) -> Any:
        return await getattr(self.engine, name)(*args)

    call.__name__ = call.__qualname__ = name
    return call


class RolloutWorker:
    """One engine, many groups in flight. Wrap with ``ray.remote`` (see ``remote_rollout_worker``)."""

    async def __init__(self, spec: EngineSpec, cpu_threads_bind: str | None = None) -> None:
        configure_cpu_threads(cpu_threads_bind)
        t0 = time.monotonic()
        self.engine: InferenceEngine = start_engine(spec)
        await self.engine.start()
        self.startup_s = time.monotonic() - t0
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(spec.model, **spec.load_kwargs)
        self.sync_seconds: list[float] = []
        self.workflows: dict[EpisodeSettings, Workflow] = {}  # built once per settings, on first use

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    async def generate_group(
        self,
        group_id: str,
        prompt_tokens: list[int],
        sampling: SamplingSpec,
        controller: GroupController,
        progress_every_tokens: int = 0,
        score_texts: ScoreFn | None = None,
    ) -> GroupResult:
        """Sample one group under ``controller``; returns kept samples (decoded) and group stats.

        ``score_texts`` (a ``ScorerClient``) scores the samples in a scorer worker for pruning.
        """
        return await run_group(
            self.engine,
            group_id,
            prompt_tokens,
            sampling,
            controller,
            decode=self._decode,
            progress_every_tokens=progress_every_tokens,
            score_texts=score_texts,
        )

    async def generate_episodes(
        self,
        group_id: str,
        row: PromptRow,
        sampling: SamplingSpec,
        workflow: Workflow | EpisodeSettings,
        controller: GroupController,
        progress_every_tokens: int = 0,
        score_texts: ScoreFn | None = None,
    ) -> tuple[list[int], GroupResult, list[Episode]]:
        """``generate_group`` for episodes of ``row`` under ``workflow`` (multi-turn, tools): their prompt ids, the
        group's result and the kept episodes (``run_episodes``). Settings (``ToolSettings``, ``UserWorkflowSettings``)
        are built here into their workflow on this worker's tokenizer."""
        if isinstance(workflow, EpisodeSettings):
            if workflow not in self.workflows:
                self.workflows[workflow] = workflow.build(self.tokenizer)
            workflow = self.workflows[workflow]
        prompt, result, episodes = await run_episodes(
            self.engine, group_id, workflow, row, sampling, controller, self._decode, progress_every_tokens, score_texts
        )
        return prompt, result, kept_episodes(result, episodes)

    async def load_weights(self, weights: bytes | str, version: int, interrupt: bool = False) -> float:
        """Load new policy weights (safetensors bytes, or a safetensors file's path on this host); in-flight
        requests continue, or are aborted and resubmitted with ``interrupt``. Returns seconds."""
        seconds = await self.engine.load_weights(weights, version, interrupt)
        self.sync_seconds.append(seconds)
        return seconds

    async def pause(self, interrupt: bool = False) -> None:
        await self.engine.pause(interrupt)

    async def resume(self) -> None:
        await self.engine.resume()

    # synchronous runs on one GPU (rollout.sleep_while_training): the engine's memory goes to the trainer for a step
    sleep = _to_engine("sleep")
    wake_up = _to_engine("wake_up")
    is_sleeping = _to_engine("is_sleeping")

    # vLLM's VLLMWeightSyncClient protocol (native GPU weight transfer): the trainer's sender calls these by name
    init_weight_transfer_engine = _to_engine("init_weight_transfer_engine")
    start_weight_update = _to_engine("start_weight_update")
    update_weights = _to_engine("update_weights")
    finish_weight_update = _to_engine("finish_weight_update")

    async def update_weight_version(self, version: str) -> None:
        await self.engine.set_version(int(version))

    async def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    async def stats(self) -> dict[str, float]:
        return {
            "startup_s": self.startup_s,
            "version": self.engine.version,
            "unfinished": self.engine.num_unfinished(),
            "syncs": len(self.sync_seconds),
        }

    async def shutdown(self) -> None:
        """Stop the engine and its processes (frees vLLM's shared-memory queues)."""
        self.engine.shutdown()


def remote_rollout_worker(num_cpus: float = 1.0, num_gpus: float = 0.0):
    """The Ray actor class for ``RolloutWorker``."""
    import ray

    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(RolloutWorker)
