"""Runs one prompt's group on one engine under a shaping controller.

Every sample is its own request (``run_group``), or its own multi-turn episode (``run_episodes`` in
rollout/workflow.py); both go through ``run_members``: each finish event goes to the controller, which answers which
running samples to stop (their live requests in one batched abort). An episode's length is the tokens its model
sampled over all its turns (tool results and tool time are no decode tokens). When the controller watches running
samples (SART pruning, DARTS's long-slot deadline), the group is streamed and a look on the token clock (every k
generated tokens of its longest running sample) shows the controller the running ones; otherwise nothing is
streamed. With a model scorer (``score_texts``, a scorer worker bound to the prompt) each look scores the running
samples in one awaited batch call, and the first completed sample is scored before the controller sees it (SART's
phase-2 threshold); the event loop keeps serving every other group meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from rl.rollout.engine import InferenceEngine, RequestTrace, SamplingSpec
from rl.shaping.policy import Decision, FinishedSample, GroupController, RunningSample

from rl.types import Sample

log = logging.getLogger("rl.rollout")

CUT = "length"  # the finish reason of a kept sample its controller cut: a truncated one
ScoreFn = Callable[[list[str]], Awaitable[list[float]]]
OnOutput = Callable[[RequestTrace], None]


class Live(Protocol):
    """One of a group's samples as the runner reads it while it runs: a request (``RequestTrace``) or a multi-turn
    episode (``EpisodeTrace``)."""

    request_id: str
    finish_reason: str | None  # None while it runs
    started: float
    finished: float | None
    resubmits: int

    @property
    def tokens(self) -> list[int]:
        """Its tokens so far (what a scorer reads, decoded)."""
        ...

    @property
    def generated(self) -> int:
        """Tokens the model has sampled so far: the length the controller sees."""
        ...

    def stop(self) -> list[str]:
        """Stop it for good; the ids of the engine requests to abort now."""
        ...


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

    def lengths(self, samples: list[Sample]) -> list[int]:
        """The generated lengths of some of its ``samples`` (an episode's: its model's tokens), as a shaping policy
        observes them."""
        return [self.all_lengths[s.index] for s in samples]


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
    """Launch ``controller.plan.n_launch`` samples, one request each, apply the controller's decisions, return kept
    ones (``run_members``). Texts are decoded for kept samples and for what a controller that ``reads_text`` is shown.
    """
    plan = controller.plan
    traces = [RequestTrace(request_id=f"{group_id}-{i}") for i in range(plan.n_launch)]

    def launch(i: int, on_output: OnOutput | None) -> Awaitable[object]:
        return engine.generate(traces[i], prompt_tokens, sampling, plan.priority, on_output)

    t0 = time.monotonic()
    kept, scorer = await run_members(
        engine, group_id, traces, launch, controller, decode, progress_every_tokens, score_texts
    )
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
    return group_result(traces, kept, samples, controller, t0, scorer)


async def run_members(
    engine: InferenceEngine,
    group_id: str,
    traces: Sequence[Live],
    launch: Callable[[int, OnOutput | None], Awaitable[object]],
    controller: GroupController,
    decode: Callable[[list[int]], str] | None = None,
    progress_every_tokens: int = 0,
    score_texts: ScoreFn | None = None,
) -> tuple[list[int], _Scorer | None]:
    """Run the group's samples (``launch(i, on_output)`` runs sample ``i``, whose live state is ``traces[i]``) under
    ``controller``; returns the kept indices and the scorer used.

    With ``progress_every_tokens`` (k > 0) the samples are streamed and the controller sees the running ones each
    time the group's longest running sample passes a multiple of k generated tokens: decisions on the token clock,
    the same on any device. Without, or when the group has no spare (launched ≤ M: a controller stops a running
    sample only while M others can still be kept), requests are not streamed and the controller sees finish events
    only. If a sample's run raises, the others are stopped, and every request still decoding (one the failed run
    left behind too) is aborted before the error goes on.
    """
    aborted: set[int] = set()
    scorer = _Scorer(score_texts, group_id) if score_texts else None
    reads_text = controller.reads_text and decode is not None
    first_scored = False  # a completed sample went to the controller with its text and score (phase 2 needs one)

    async def apply(decision: Decision) -> None:
        todo = [i for i in decision.abort if i not in aborted and traces[i].finish_reason is None]
        aborted.update(todo)
        await engine.abort([r for i in todo for r in traces[i].stop()])

    async def run(i: int) -> int:
        await launch(i, on_output)
        return i

    progressed = asyncio.Event()
    watched = progress_every_tokens > 0 and len(traces) > controller.plan.m_keep
    on_output = (lambda _trace: progressed.set()) if watched else None
    tasks = [asyncio.create_task(run(i)) for i in range(len(traces))]
    for task in tasks:  # where one sample's run raised and ended the group, the others' errors are not news
        task.add_done_callback(_retrieved)
    ticker = None
    if on_output is not None:
        read = decode if reads_text else _no_text
        watch = _progress(traces, aborted, controller, apply, read, progress_every_tokens, scorer, progressed)
        ticker = asyncio.create_task(watch)
    try:
        for next_done in asyncio.as_completed(tasks):
            i = await next_done
            trace = traces[i]
            text, score = "", None
            if reads_text and not first_scored and trace.finish_reason == "stop" and i not in aborted:
                text = decode(trace.tokens)
                first_scored = scorer is None
                if scorer:
                    score = (await scorer([text]))[0]
                    first_scored = score is not None
            finish = trace.finish_reason or "abort"
            await apply(controller.on_finish(FinishedSample(i, trace.generated, finish, text, score)))
    finally:
        if ticker:
            ticker.cancel()
        # a sample's run raised (or the group was cancelled): nothing may keep running on the engine, neither the
        # samples still pending nor a turn an episode that raised left decoding (asyncio.gather's other half)
        live = [r for t in traces if t.finish_reason is None for r in t.stop()]
        if live:
            await engine.abort(live)
        for task in tasks:
            if not task.done():
                task.cancel()
    return controller.kept(), scorer


def _retrieved(task: asyncio.Task) -> None:
    """Mark a finished task's exception as seen (asyncio logs "exception was never retrieved" otherwise)."""
    if not task.cancelled():
        task.exception()


def group_result(
    traces: Sequence[Live],
    kept: list[int],
    samples: list[Sample],
    controller: GroupController,
    t0: float,
    scorer: _Scorer | None,
) -> GroupResult:
    """The ``GroupResult`` of a group that ``run_members`` ran from ``t0``: its ``kept`` samples, every launched one's
    generated length, fate and time span. A kept sample whose request was aborted was cut by its controller (DARTS's
    long-slot deadline): it is reported truncated (``"length"``), as a sample stopped by the cap is."""
    fates = {i: "kept" for i in kept}
    samples = [replace(s, finish_reason=CUT) if s.finish_reason == "abort" else s for s in samples]
    reasons = [
        CUT if i in fates and t.finish_reason in (None, "abort") else t.finish_reason or "abort"
        for i, t in enumerate(traces)
    ]
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
        all_lengths=[t.generated for t in traces],
        finish_reasons=reasons,
        generated_tokens=sum(t.generated for t in traces),
        kept_tokens=sum(traces[i].generated for i in kept),
        seconds=time.monotonic() - t0,
        resubmits=sum(t.resubmits for t in traces),
        timeline=timeline,
        scored=scorer.scored if scorer else 0,
        score_failures=scorer.failures if scorer else 0,
    )


async def _progress(
    traces: Sequence[Live],
    aborted: set[int],
    controller: GroupController,
    apply: Callable[[Decision], Awaitable[None]],
    read: Callable[[list[int]], str],
    every_tokens: int,
    scorer: _Scorer | None,
    progressed: asyncio.Event,
) -> None:
    """Show the controller the running samples each time the longest of them passes a multiple of ``every_tokens``
    generated tokens (woken by streamed outputs; several outputs between two looks make one look), each with its text
    as ``read`` gives it."""
    next_look = every_tokens
    while True:
        await progressed.wait()
        progressed.clear()
        live = [i for i, t in enumerate(traces) if t.finish_reason is None and i not in aborted]
        clock = max((traces[i].generated for i in live), default=0)
        if clock < next_look:
            continue
        next_look = (clock // every_tokens + 1) * every_tokens
        if not controller.prunable:
            continue
        running = [RunningSample(i, traces[i].generated, read(traces[i].tokens)) for i in live]
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
