"""The weight-sync channel: the trainer publishes a version, every rollout engine loads it.

``cpu``: rank 0 serializes its HF-named parameters to safetensors bytes, the bytes go through Ray's
object store once (the trainer call's return value), and each rollout worker loads them with the
layer-wise reload (pause -> load -> version bump -> resume). Works on any device. In-flight requests
are kept across the load, or (``interrupt``) aborted and resubmitted with their partial responses.

``nccl`` / ``ipc`` (GPU): vLLM's native weight transfer. Not implemented yet: the GPU machines lent to
this project have no vLLM, so nothing of that path could be run; see the issue note.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ray.exceptions import RayActorError


@dataclass
class SyncReport:
    version: int
    seconds: float  # wall time of the whole sync, trainer side included
    engine_seconds: list[float]  # per live engine: pause -> load -> resume
    dead: list[Any] = field(default_factory=list)  # rollout workers that died (their actor is gone)


class WeightChannel(Protocol):
    async def send(self, version: int) -> SyncReport:
        """Make every rollout engine serve the trainer's current weights as ``version``."""
        ...


class CpuWeightChannel:
    def __init__(self, trainer: Any, rollout_workers: list[Any], interrupt: bool = False) -> None:
        self.trainer = trainer  # rank-0 TrainerWorker actor handle
        self.rollout_workers = rollout_workers
        self.interrupt = interrupt  # abort in-flight requests and resubmit them, instead of keeping them

    async def send(self, version: int) -> SyncReport:
        t0 = time.monotonic()
        blob_ref = self.trainer.weights_for_sync.remote()  # stays in the object store; workers fetch it
        workers = list(self.rollout_workers)
        results = await asyncio.gather(
            *[w.load_weights.remote(blob_ref, version, self.interrupt) for w in workers], return_exceptions=True
        )
        dead = [w for w, r in zip(workers, results, strict=True) if isinstance(r, RayActorError)]
        failed = [r for r in results if isinstance(r, BaseException) and not isinstance(r, RayActorError)]
        if failed:
            raise failed[0]
        seconds = [float(r) for r in results if not isinstance(r, BaseException)]
        return SyncReport(version, time.monotonic() - t0, seconds, dead)


def make_weight_channel(
    transport: str, trainer: Any, rollout_workers: list[Any], interrupt: bool = False
) -> WeightChannel:
    """The channel for ``transport`` (``cpu`` works everywhere; ``nccl``/``ipc`` are not built yet)."""
    if transport == "cpu":
        return CpuWeightChannel(trainer, rollout_workers, interrupt)
    raise NotImplementedError(f"weight_sync.transport={transport!r} is not implemented yet; use 'cpu'")
