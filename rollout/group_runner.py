"""Runs one prompt's group on one engine under a shaping controller.

Every sample is its own request; each finish event goes to the controller, which answers which
running samples to abort. When pruning is on, a progress tick shows the controller the running ones.
With a model scorer (``score_texts``, a scorer worker bound to the prompt) each tick scores the running
samples in one awaited batch call, and the first completed sample is scored before the controller sees
it (SART's phase-2 threshold); the event loop keeps serving every other group meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from rl.rollout.engine import InferenceEngine, RequestTrace, SamplingSpec
from rl.shaping.policy import Decision, FinishedSample, GroupController, RunningSample

from rl.types import Sample

log = logging.getLogger("rl.rollout")

ScoreFn = Callable[[list[str]], Awaitable[list[float]]]


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
    scored: int = 0  # texts scored by the scorer worker
    score_failures: int = 0  # scorer calls that failed (their samples went unscored: not pruned)


@dataclass
class _Scorer:
    """``score_texts`` for one group, counted; a failed call yields no scores instead of failing the group."""

    score_texts: ScoreFn
    group_id: str
    scored: int = 0
    failures: int = 0

    async def __call__(self, texts: list[str]) -> list[float | None]:
        try:
            scores = await self.score_texts(texts)
        except Exception as e:  # a dead or failing scorer turns pruning off for these samples, not the run
            self.failures += 1
            if self.failures == 1:
                log.warning("group %s: scoring failed, its samples go unscored: %s", self.group_id, e)
            return [None] * len(texts)
        self.scored += len(texts)
        return list(scores)


async def run_group(
    engine: InferenceEngine,
    group_id: str,
    prompt_tokens: list[int],
    sampling: SamplingSpec,
    controller: GroupController,
    decode=None,
    progress_every_s: float = 0.0,
    score_texts: ScoreFn | None = None,
) -> GroupResult:
    """Launch ``controller.plan.n_launch`` samples, apply the controller's decisions, return kept ones."""
    plan = controller.plan
    t0 = time.monotonic()
    traces = [RequestTrace(request_id=f"{group_id}-{i}") for i in range(plan.n_launch)]
    aborted: set[int] = set()
    texts: dict[int, str] = {}
    scorer = _Scorer(score_texts, group_id) if score_texts else None
    first_scored = False  # a completed sample's score went to the controller (phase 2 needs only the first)

    async def apply(decision: Decision) -> None:
        todo = [i for i in decision.abort if i not in aborted and traces[i].finish_reason is None]
        aborted.update(todo)
        await engine.abort([traces[i].request_id for i in todo])

    position = {id(t): i for i, t in enumerate(traces)}
    stream = progress_every_s > 0  # only progress ticks read running traces; the rest need no per-token output
    tasks = [asyncio.create_task(engine.generate(t, prompt_tokens, sampling, plan.priority, stream)) for t in traces]
    ticker = (
        asyncio.create_task(_progress(traces, controller, apply, decode, progress_every_s, scorer)) if stream else None
    )
    try:
        for next_done in asyncio.as_completed(tasks):
            trace = await next_done
            i = position[id(trace)]
            texts[i] = decode(trace.tokens) if decode else ""
            score = None
            if scorer and not first_scored and trace.finish_reason == "stop" and i not in aborted:
                score = (await scorer([texts[i]]))[0]
                first_scored = score is not None
            finished = FinishedSample(i, len(trace.tokens), trace.finish_reason, texts[i], score)
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
            text=texts[i],
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
        scored=scorer.scored if scorer else 0,
        score_failures=scorer.failures if scorer else 0,
    )


async def _progress(
    traces: list[RequestTrace], controller: GroupController, apply, decode, every_s: float, scorer: _Scorer | None
) -> None:
    while True:
        await asyncio.sleep(every_s)
        if not controller.prunable:
            continue
        running = [
            RunningSample(i, len(t.tokens), decode(t.tokens) if decode else "")
            for i, t in enumerate(traces)
            if t.finish_reason is None
        ]
        if scorer:
            running = await _scored(running, scorer)
        if running:
            await apply(controller.on_progress(running))


async def _scored(running: list[RunningSample], scorer: _Scorer) -> list[RunningSample]:
    """``running`` with scores, in one call, for the samples that have generated anything."""
    todo = [r for r in running if r.length > 0]
    if not todo:
        return running
    scores = dict(zip([r.index for r in todo], await scorer([r.text for r in todo]), strict=True))
    return [replace(r, score=scores.get(r.index)) for r in running]
