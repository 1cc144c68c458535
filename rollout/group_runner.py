"""Runs one prompt's group on one engine under a shaping controller.

Every sample is its own request; each finish event goes to the controller, which answers which
running samples to abort. When pruning is on, a progress tick shows the controller the running ones.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from rl.rollout.vllm_adapter import RequestTrace, SamplingSpec, VllmEngine
from rl.shaping.policy import Decision, FinishedSample, GroupController, RunningSample

from rl.types import Sample


@dataclass
class GroupResult:
    """Kept samples plus what the whole group cost."""

    samples: list[Sample]
    controller_stats: dict[str, int]
    all_lengths: list[int]  # every launched sample's generated length (kept or not)
    finish_reasons: list[str]
    generated_tokens: int
    kept_tokens: int
    seconds: float
    resubmits: int = 0  # samples resubmitted after a weight sync interrupted them
    timeline: list[tuple[int, float, float, str]] = field(default_factory=list)  # index, start, end, fate


async def run_group(
    engine: VllmEngine,
    group_id: str,
    prompt_tokens: list[int],
    sampling: SamplingSpec,
    controller: GroupController,
    decode=None,
    progress_every_s: float = 0.0,
) -> GroupResult:
    """Launch ``controller.plan.n_launch`` samples, apply the controller's decisions, return kept ones."""
    plan = controller.plan
    t0 = time.monotonic()
    traces = [RequestTrace(request_id=f"{group_id}-{i}") for i in range(plan.n_launch)]
    aborted: set[int] = set()

    async def apply(decision: Decision) -> None:
        todo = [i for i in decision.abort if i not in aborted and traces[i].finish_reason is None]
        aborted.update(todo)
        await engine.abort([traces[i].request_id for i in todo])

    position = {id(t): i for i, t in enumerate(traces)}
    tasks = [asyncio.create_task(engine.generate(t, prompt_tokens, sampling, plan.priority)) for t in traces]
    ticker = (
        asyncio.create_task(_progress(traces, controller, apply, decode, progress_every_s))
        if progress_every_s > 0
        else None
    )
    try:
        for next_done in asyncio.as_completed(tasks):
            trace = await next_done
            finished = FinishedSample(position[id(trace)], len(trace.tokens), trace.finish_reason)
            await apply(controller.on_finish(finished))
    finally:
        if ticker:
            ticker.cancel()
    kept = controller.kept()
    samples = [
        Sample(
            index=i,
            tokens=traces[i].tokens,
            logprobs=traces[i].logprobs,
            versions=traces[i].token_versions(engine.version),
            finish_reason=traces[i].finish_reason,
            text=decode(traces[i].tokens) if decode else "",
        )
        for i in kept
    ]
    fates = {i: "kept" for i in kept}
    timeline = [
        (
            i,
            t.started - t0,
            (t.finished or t.started) - t0,
            fates.get(i, "aborted" if t.finish_reason == "abort" else "discarded"),
        )
        for i, t in enumerate(traces)
    ]
    return GroupResult(
        samples=samples,
        controller_stats=controller.stats(),
        all_lengths=[len(t.tokens) for t in traces],
        finish_reasons=[t.finish_reason or "abort" for t in traces],
        generated_tokens=sum(len(t.tokens) for t in traces),
        kept_tokens=sum(len(s.tokens) for s in samples),
        seconds=time.monotonic() - t0,
        resubmits=sum(t.resubmits for t in traces),
        timeline=timeline,
    )


async def _progress(traces: list[RequestTrace], controller: GroupController, apply, decode, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        running = [
            RunningSample(i, len(t.tokens), decode(t.tokens) if decode else "")
            for i, t in enumerate(traces)
            if t.finish_reason is None
        ]
        if running:
            await apply(controller.on_progress(running))
