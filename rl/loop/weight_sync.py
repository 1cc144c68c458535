"""The trainer's versions published to the rollout engines, overlapped with training where the bound allows.

Synchronous training waits for the engines. With ``max_staleness >= 1`` (and a channel that can export ahead) the
engines load while the trainer takes its next step: the export is queued on the trainer before that step's call, so
it holds exactly this version; syncs stay in version order (one in flight, the next waits for it); and admission
control learns the new version only once the engines serve it, so the staleness bound holds as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from rl.loop.admission import AdmissionControl
from rl.loop.engine_sleep import EngineSleep
from rl.loop.weight_channel import WeightChannel


class WeightSync:
    """Publishes versions through ``channel``; ``lost(worker)`` hears of each engine that died during a sync;
    ``sleep``: engines that sleep while the trainers step wake around each sync (``rl.loop.engine_sleep``)."""

    def __init__(
        self,
        channel: WeightChannel,
        admission: AdmissionControl,
        overlap: bool,
        lost: Callable[[Any], None],
        sleep: EngineSleep | None = None,
    ) -> None:
        self.channel, self.admission, self.overlap, self.lost, self.sleep = channel, admission, overlap, lost, sleep
        self.pending: asyncio.Task | None = None  # an overlapped sync still loading
        self.last: dict[str, float] = {}  # the last finished sync: whole, trainer export, engine load

    async def sync(self, version: int) -> dict[str, float]:
        """Publish ``version``; returns the sync's metrics (``weight_sync_wait_s``: the time the training loop
        waited for syncs)."""
        t0 = time.monotonic()
        await self.synced()
        if self.overlap and self.channel.overlaps:
            self.pending = asyncio.create_task(self.publish(version, self.channel.export()))
        else:
            await self.publish(version, None)
        return {**self.last, "weight_sync_wait_s": time.monotonic() - t0}

    async def publish(self, version: int, exported: Any) -> None:
        """Send ``version`` (``exported`` ahead, or None: export now) and wait until every live engine serves it
        (woken first, if asleep)."""
        if self.sleep is not None:
            await self.sleep.wake_weights()
        report = await self.channel.send(version, exported)
        for worker in report.dead:
            self.lost(worker)
        if self.sleep is not None:
            await self.sleep.wake_cache()
        await self.admission.set_trainer_version(version)
        self.last = {
            "weight_sync_s": report.seconds,
            "weight_sync_export_s": report.export_seconds,
            "weight_sync_load_s": max(report.engine_seconds, default=0.0),
            **(self.sleep.seconds if self.sleep is not None else {}),
        }

    async def synced(self) -> None:
        """Wait until the engines serve the last published version (raises what the sync raised)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            await pending

    async def load_current(self, worker: Any, version: Callable[[], int]) -> int:
        """Load the trainer's current weights (``version()``, read as it loads) into a new rollout worker; returns the
        version it serves."""
        loaded = None
        while loaded != version():  # a sync may land while this one loads: then load again
            loaded = version()
            await worker.load_weights.remote(self.channel.export_bytes(), loaded, False)
        return loaded
