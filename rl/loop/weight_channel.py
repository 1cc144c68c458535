"""The weight-sync channel: the trainer publishes a version, every rollout engine loads it.

``cpu``: rank 0 exports its HF-named parameters in safetensors format and each rollout worker loads them with
the layer-wise reload (pause -> load -> version bump -> resume). When the driver, the trainer and every rollout
worker share one host, the export is a file in shared memory (``/dev/shm``) that the engine memory-maps: no
bytes cross Ray or the engine's process boundary (SmolLM2-135M: about 0.7 s a sync, against 6 s as 513 MB of
bytes through the object store and the engine core's socket). Otherwise the bytes go through Ray's object
store once (the trainer call's return value). Works on any device. In-flight requests are kept across the
load, or (``interrupt``) aborted and resubmitted with their partial responses.

``nccl`` / ``ipc`` (GPU): vLLM's native weight transfer (``NativeWeightChannel``): vLLM 0.27+'s trainer engines,
or 0.26's rendezvous and broadcast driven by hand. On one H200 (vLLM 0.26) the NCCL rendezvous ran on both sides
until NCCL refused two ranks on one GPU (``invalid usage``): a full transfer needs the trainer and the engines on
separate GPUs and has not been run yet (benchmarks/README.md, "Native weight transfer on one GPU").
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ray.exceptions import RayActorError

from rl.loop.checkpoint import on_every_rank

log = logging.getLogger("rl.weight_channel")


@dataclass
class SyncReport:
    version: int
    seconds: float  # wall time of the whole sync, trainer side included
    engine_seconds: list[float]  # per live engine: pause -> load -> resume
    dead: list[Any] = field(default_factory=list)  # rollout workers that died (their actor is gone)
    export_seconds: float = 0.0  # until the trainer's export was ready (0 where the transport has no export)


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


SHARED_DIR = "/dev/shm"  # a RAM-backed folder every process on the host can map
SHARED_EXPORTS = 2  # exports in shared memory at once: one being loaded while the next is written (overlapped sync)
SHARED_PREFIX = "tailor-weights-"  # then the driver's pid: a killed run's exports are found by the next one


def remove_orphaned_exports() -> list[Path]:
    """Delete the shared-memory exports of runs whose driver process is gone (a SIGKILL skips the cleanup);
    returns what was deleted."""
    removed = []
    for path in Path(SHARED_DIR).glob(f"{SHARED_PREFIX}*"):
        pid = path.name[len(SHARED_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


@dataclass(frozen=True)
class CpuExport:
    """One export of the trainer's weights: the trainer call's object reference (bytes, or the file's path) and
    the shared-memory file it writes, if any (deleted once the sync is over)."""

    ref: Any
    path: str | None = None


class CpuWeightChannel:
    overlaps = True

    def __init__(
        self, trainer: Any, rollout_workers: list[Any], interrupt: bool = False, peers: Sequence[Any] = ()
    ) -> None:
        self.trainer = trainer  # rank-0 TrainerWorker actor handle
        self.peers = list(peers)  # the other data-parallel ranks: each export's gather needs every rank
        self.rollout_workers = rollout_workers
        self.interrupt = interrupt  # abort in-flight requests and resubmit them, instead of keeping them
        self.host: str | None = None  # the node id every party shares, when they do: exports go through a file
        self.nodes: dict[Any, str] = {}  # rollout worker -> its node id
        self.prefix = os.path.join(SHARED_DIR, f"{SHARED_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}")
        self.exports = itertools.count()

    async def start(self) -> None:
        """Choose the route: a shared-memory file when the driver, the trainer and every rollout worker are on one
        host, else bytes through the object store."""
        import ray

        remove_orphaned_exports()
        here = ray.get_runtime_context().get_node_id()
        trainer = await self.trainer.node_id.remote()
        if trainer == here and os.path.isdir(SHARED_DIR) and await self._on_host(list(self.rollout_workers), here):
            nbytes = await on_every_rank([self.trainer, *self.peers], "export_nbytes")  # the export's gather
            free = shutil.disk_usage(SHARED_DIR).free
            if free >= SHARED_EXPORTS * nbytes:
                self.host = here
            else:  # a container's /dev/shm holds 64 MB unless it is given more
                log.warning(
                    "weights: %s has %.0f MB free, less than the %d exports of %.0f MB a sync may hold there at once; "
                    "they go through Ray's object store instead (slower; in a container, give it more shared "
                    "memory: docker run --shm-size=%dg)",
                    SHARED_DIR,
                    free / 2**20,
                    SHARED_EXPORTS,
                    nbytes / 2**20,
                    math.ceil(SHARED_EXPORTS * nbytes / 2**30),
                )
                return
        log.info(
            "weights: %s",
            "a shared-memory file (driver, trainer and engines on one node)"
            if self.host
            else "Ray's object store (the trainer and the engines are not all on the driver's node)",
        )

    def export(self) -> CpuExport:
        """The trainer's weights: Ray runs an actor's calls in submission order, so the export holds the weights
        of every step submitted before it and of none after."""
        path = None if self.host is None else f"{self.prefix}-{next(self.exports)}.safetensors"
        ref = self.trainer.weights_for_sync.remote(path)
        for peer in self.peers:  # queued on every rank in the same order as rank 0's: their gathers meet
            peer.weights_for_sync.remote(None)
        return CpuExport(ref, path)

    def export_bytes(self) -> Any:
        """The trainer's weights as safetensors bytes (an object reference), for one engine joining late."""
        ref = self.trainer.weights_for_sync.remote(None)
        for peer in self.peers:
            peer.weights_for_sync.remote(None)
        return ref

    async def send(self, version: int, exported: CpuExport | None = None) -> SyncReport:
        import ray

        t0 = time.monotonic()
        exported = self.export() if exported is None else exported
        workers = list(self.rollout_workers)
        try:
            await asyncio.to_thread(ray.wait, [exported.ref], fetch_local=False)  # ready, not fetched here
            export_seconds = time.monotonic() - t0
            weights = exported.ref
            if exported.path and not await self._on_host(workers, self.host):  # a replacement started elsewhere
                weights = ray.put(Path(await exported.ref).read_bytes())
            results = await asyncio.gather(
                *[w.load_weights.remote(weights, version, self.interrupt) for w in workers], return_exceptions=True
            )
        finally:
            if exported.path:
                for leftover in (exported.path, f"{exported.path}.tmp"):
                    Path(leftover).unlink(missing_ok=True)
        dead = [w for w, r in zip(workers, results, strict=True) if isinstance(r, RayActorError)]
        failed = [r for r in results if isinstance(r, BaseException) and not isinstance(r, RayActorError)]
        if failed:
            raise failed[0]
        seconds = [float(r) for r in results if not isinstance(r, BaseException)]
        return SyncReport(version, time.monotonic() - t0, seconds, dead, export_seconds)

    async def _on_host(self, workers: list[Any], host: str | None) -> bool:
        """Whether every one of ``workers`` runs on node ``host`` (node ids asked once per worker)."""
        unknown = [w for w in workers if w not in self.nodes]
        nodes = await asyncio.gather(*[w.node_id.remote() for w in unknown], return_exceptions=True)
        for worker, node in zip(unknown, nodes, strict=True):
            self.nodes[worker] = "" if isinstance(node, BaseException) else node  # a dead one: bytes, then counted
        return all(self.nodes[w] == host for w in workers)


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
        from rl.rollout.vllm_weight_sender import NativeWeightSender

        make_sender = functools.partial(NativeWeightSender, self.backend)  # built in the trainer's process
        await self.trainer.init_native_weight_sync.remote(make_sender, list(self.rollout_workers))

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
    transport: str, trainers: list[Any], rollout_workers: list[Any], interrupt: bool = False
) -> WeightChannel:
    """The channel for ``transport``: ``cpu`` works everywhere, ``nccl``/``ipc`` need GPUs and vLLM on them."""
    if transport == "cpu":
        return CpuWeightChannel(trainers[0], rollout_workers, interrupt, peers=trainers[1:])
    if transport in ("nccl", "ipc"):
        return NativeWeightChannel(transport, trainers[0], rollout_workers, interrupt)
    raise ValueError(f"unknown weight_sync.transport {transport!r}; use cpu, nccl or ipc")
