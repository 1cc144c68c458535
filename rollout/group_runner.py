"""Runs one prompt's group on one engine under a shaping controller.

Every sample is its own request; each finish event goes to the controller, which answers which running samples
to abort (in one batched abort). When the controller watches running samples (SART pruning, DARTS's long-slot
deadline), the group is streamed and a look on the token clock (every k tokens of its longest running sample) shows
the controller the running ones; otherwise nothing is streamed. With a model scorer (``score_texts``, a scorer
worker bound to the prompt) each look scores the running samples in one awaited batch call, and the first completed
sample is scored before the controller sees it (SART's phase-2 threshold); the event loop keeps serving every other
group meanwhile.
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
    decode: Callable[[list[int]], str] | None = None,
    progress_every_tokens: int = 0,
    score_texts: ScoreFn | None = None,
) -> GroupResult:
    """Launch ``controller.plan.n_launch`` samples, apply the controller's decisions, return kept ones.

    With ``progress_every_tokens`` (k > 0) the samples are streamed and the controller sees the running ones each
    time the group's longest running sample passes a multiple of k tokens: decisions on the token clock, the same
    on any device. Without, requests are not streamed and the controller sees finish events only. Texts are
    decoded only for kept samples and for what a controller that ``reads_text`` is shown.
    """
    plan = controller.plan
    t0 = time.monotonic()
    traces = [RequestTrace(request_id=f"{group_id}-{i}") for i in range(plan.n_launch)]
    aborted: set[int] = set()
    scorer = _Scorer(score_texts, group_id) if score_texts else None
    reads_text = controller.reads_text and decode is not None
    first_scored = False  # a completed sample went to the controller with its text and score (phase 2 needs one)

    async def apply(decision: Decision) -> None:
        todo = [i for i in decision.abort if i not in aborted and traces[i].finish_reason is None]
        aborted.update(todo)
        await engine.abort([traces[i].request_id for i in todo])

    position = {id(t): i for i, t in enumerate(traces)}
    progressed = asyncio.Event()
    on_output = (lambda _trace: progressed.set()) if progress_every_tokens > 0 else None
    tasks = [asyncio.create_task(engine.generate(t, prompt_tokens, sampling, plan.priority, on_output)) for t in traces]
    ticker = None
    if on_output is not None:
        read = decode if reads_text else _no_text
        watch = _progress(traces, aborted, controller, apply, read, progress_every_tokens, scorer, progressed)
        ticker = asyncio.create_task(watch)
    try:
        for next_done in asyncio.as_completed(tasks):
            trace = await next_done
            i = position[id(trace)]
            text, score = "", None
            if reads_text and not first_scored and trace.finish_reason == "stop" and i not in aborted:
                text = decode(trace.tokens)
                first_scored = scorer is None
                if scorer:
                    score = (await scorer([text]))[0]
                    first_scored = score is not None
            await apply(controller.on_finish(FinishedSample(i, len(trace.tokens), trace.finish_reason, text, score)))
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
        scored=scorer.scored if scorer else 0,
        score_failures=scorer.failures if scorer else 0,
    )


async def _progress(
    traces: list[RequestTrace],
    aborted: set[int],
    controller: GroupController,
    apply: Callable[[Decision], Awaitable[None]],
    read: Callable[[list[int]], str],
    every_tokens: int,
    scorer: _Scorer | None,
    progressed: asyncio.Event,
) -> None:
    """Show the controller the running samples each time the longest of them passes a multiple of
    ``every_tokens`` (woken by streamed outputs; several outputs between two looks make one look), each with its
    text as ``read`` gives it."""
    next_look = every_tokens
    while True:
        await progressed.wait()
        progressed.clear()
        live = [i for i, t in enumerate(traces) if t.finish_reason is None and i not in aborted]
        clock = max((len(traces[i].tokens) for i in live), default=0)
        if clock < next_look:
            continue
        next_look = (clock // every_tokens + 1) * every_tokens
        if not controller.prunable:
            continue
        running = [RunningSample(i, len(traces[i].tokens), read(traces[i].tokens)) for i in live]
        if scorer:
            running = await _scored(running, scorer)
        await apply(controller.on_progress(running))


def _no_text(tokens: list[int]) -> str:
    """What a controller that reads no text is shown of a running sample."""
    return ""


async def _scored(running: list[RunningSample], scorer: _Scorer) -> list[RunningSample]:
    """``running`` with scores, in one call, for the samples that have generated anything."""
    todo = [r for r in running if r.length > 0]
    if not todo:
        return running
    scores = dict(zip([r.index for r in todo], await scorer([r.text for r in todo]), strict=True))
    return [replace(r, score=scores.get(r.index)) for r in running]
