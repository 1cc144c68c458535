"""The weight-sync channel: the trainer publishes a version, every rollout engine loads it.

``cpu``: rank 0 serializes its HF-named parameters to safetensors bytes, the bytes go through Ray's
object store once (the trainer call's return value), and each rollout worker loads them with the
layer-wise reload (pause -> load -> version bump -> resume). Works on any device. In-flight requests
are kept across the load, or (``interrupt``) aborted and resubmitted with their partial responses.

``nccl`` / ``ipc`` (GPU): vLLM's native weight transfer (``NativeWeightChannel``), written against vLLM
0.32's documented trainer API; the GPU machines lent to this project have no vLLM, so it has not run.
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
    overlaps: (
        bool  # whether ``export`` fixes the weights a later ``send`` delivers (the load may then overlap training)
    )

    async def start(self) -> None:
        """Open the channel once, after the actors are up."""
        ...

    def export(self) -> Any:
        """Queue the trainer's export of its current weights now, ahead of any later trainer call; a handle for
        ``send`` (None where the transport cannot export ahead: ``send`` then reads the trainer itself)."""
        ...

    async def send(self, version: int, exported: Any = None) -> SyncReport:
        """Make every rollout engine serve ``exported`` (default: the trainer's current weights) as ``version``."""
        ...


class CpuWeightChannel:
    overlaps = True

    def __init__(self, trainer: Any, rollout_workers: list[Any], interrupt: bool = False) -> None:
        self.trainer = trainer  # rank-0 TrainerWorker actor handle
        self.rollout_workers = rollout_workers
        self.interrupt = interrupt  # abort in-flight requests and resubmit them, instead of keeping them

    async def start(self) -> None:
        """Nothing to open: every sync goes through the object store."""

    def export(self) -> Any:
        """The trainer's weights as an object reference: Ray runs an actor's calls in submission order, so the
        export holds the weights of every step submitted before it and of none after."""
        return self.trainer.weights_for_sync.remote()

    async def send(self, version: int, exported: Any = None) -> SyncReport:
        t0 = time.monotonic()
        blob_ref = self.export() if exported is None else exported  # stays in the object store; workers fetch it
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


class NativeWeightChannel:
    """vLLM's native GPU weight transfer (``nccl`` broadcast or colocated ``ipc``), driven by trainer rank 0.

    Each sync: pause every engine (keep, or abort for resubmission) -> the trainer's sender runs vLLM's
    start/update/finish phases -> version bump -> resume. ``start`` opens the transfer once (NCCL rendezvous).
    The trainer sends while the engines wait, so a sync cannot overlap the next training step.
    """

    overlaps = False

    def __init__(self, backend: str, trainer: Any, rollout_workers: list[Any], interrupt: bool = False) -> None:
        self.backend = backend
        self.trainer = trainer
        self.rollout_workers = rollout_workers
        self.interrupt = interrupt

    async def start(self) -> None:
        await self.trainer.init_native_weight_sync.remote(self.backend, list(self.rollout_workers))

    def export(self) -> None:
        return None

    async def send(self, version: int, exported: Any = None) -> SyncReport:
        t0 = time.monotonic()
        workers = list(self.rollout_workers)
        await asyncio.gather(*[w.pause.remote(self.interrupt) for w in workers])
        try:
            await self.trainer.send_native_weights.remote()
            await asyncio.gather(*[w.update_weight_version.remote(str(version)) for w in workers])
        finally:
            await asyncio.gather(*[w.resume.remote() for w in workers])
        seconds = time.monotonic() - t0
        return SyncReport(version, seconds, [seconds] * len(workers))


def make_weight_channel(
    transport: str, trainer: Any, rollout_workers: list[Any], interrupt: bool = False
) -> WeightChannel:
    """The channel for ``transport``: ``cpu`` works everywhere, ``nccl``/``ipc`` need GPUs and vLLM on them."""
    if transport == "cpu":
        return CpuWeightChannel(trainer, rollout_workers, interrupt)
    if transport in ("nccl", "ipc"):
        return NativeWeightChannel(transport, trainer, rollout_workers, interrupt)
    raise ValueError(f"unknown weight_sync.transport {transport!r}; use cpu, nccl or ipc")
