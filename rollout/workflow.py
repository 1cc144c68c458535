"""The episode seam: a ``Workflow`` turns one prompt row into one trainable episode on an engine.

``ToolWorkflow`` (rollout/tool_workflow.py) runs a tool-calling conversation, ``UserWorkflow``
(rollout/user_workflow.py) a user's own episode; plain sampling needs none (one request a sample, in the group
runner). Either way the episode is one token sequence after its prompt, with the sampler's log-prob and a loss-mask
bit per token, ready for the trainer as a ``Sample``.

An episode runs on an ``EpisodeTrace``, its live state: the group runner reads its generated tokens and stops it as it
does a single request's, so a shaping controller keeps, stops and prunes episodes by the tokens their model sampled
over all turns (``run_episodes``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from rl.rollout.engine import InferenceEngine, RequestTrace, SamplingSpec
from rl.rollout.group_runner import GroupResult, OnOutput, ScoreFn, group_result, run_members
from rl.rollout.tools import ToolStats
from rl.shaping.policy import GroupController

from rl.types import PromptRow, Sample

T = TypeVar("T")


@dataclass
class Episode:
    """One episode: its prompt's ids, the sample the trainer learns from, and what it cost."""

    prompt_tokens: list[int]
    sample: Sample
    turns: int = 1
    tools: ToolStats = field(default_factory=ToolStats)
    environment: Any = None  # the episode's environment as rewards see it (TRL's ``environments``): a snapshot
    # the completion as rewards get it, TRL's form: chat messages (text after a text prompt, from a user's workflow)
    messages: list[dict[str, Any]] | str = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)  # a user workflow's reward keyword arguments (its return)

    @property
    def generated_tokens(self) -> int:
        """Tokens the model sampled, over all turns (a tool's result excluded)."""
        mask = self.sample.loss_mask
        return len(self.sample.tokens) if mask is None else sum(mask)


@dataclass
class EpisodeTrace:
    """An episode while it runs (``RequestTrace``'s multi-turn counterpart): its place in the group, its requests'
    priority and listener, the turns and results appended so far with a log-prob, loss-mask bit and version per token,
    the turn decoding now, and whether it was told to stop."""

    request_id: str
    index: int = 0  # its place in the group
    priority: int = 0  # its requests' vLLM priority
    on_output: OnOutput | None = None  # set: its turns are streamed to it
    ids: list[int] = field(default_factory=list)  # the ended turns' sampled ids and the results' ids
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1: sampled, 0: a tool's result
    versions: list[int] = field(default_factory=list)
    current: RequestTrace | None = None  # the turn decoding now
    turns: int = 0
    finish_reason: str | None = None
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    resubmits: int = 0  # over its turns
    _stop: asyncio.Event = field(default_factory=asyncio.Event)  # set: it was told to stop

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def tokens(self) -> list[int]:
        return self.ids + self.current.tokens if self.current is not None else self.ids

    @property
    def generated(self) -> int:
        """Tokens the model sampled so far, over all turns (the results' excluded)."""
        return sum(self.mask) + (len(self.current.tokens) if self.current is not None else 0)

    async def sample(self, engine: InferenceEngine, prompt_tokens: list[int], sampling: SamplingSpec) -> RequestTrace:
        """Sample the next turn after ``prompt_tokens`` and append it, its ids exactly as the engine returned them
        (mask 1, the sampler's log-probs and versions); returns its request."""
        turn = self.current = RequestTrace(f"{self.request_id}-t{self.turns}")
        self.turns += 1
        await engine.generate(turn, prompt_tokens, sampling, self.priority, self.on_output)
        self.current = None
        self.ids += turn.tokens
        self.logprobs += turn.logprobs
        self.mask += [1] * len(turn.tokens)
        self.versions += turn.token_versions(engine.version)
        self.resubmits += turn.resubmits
        return turn

    def appended(self, ids: list[int]) -> None:
        """Append a tool result's ids: mask 0, log-prob 0.0, the version of the sampled id before them."""
        self.ids += ids
        self.logprobs += [0.0] * len(ids)
        self.mask += [0] * len(ids)
        self.versions += [self.versions[-1]] * len(ids)

    def stop(self) -> list[str]:
        """Stop it for good: no turn starts after this; returns the turn to abort now (none between turns)."""
        self._stop.set()
        turn = self.current
        return [turn.request_id] if turn is not None and turn.finish_reason is None else []

    async def unless_stopped(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or None (``work`` cancelled) once the episode is stopped: a stopped episode waits for
        no tool call."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.create_task(self._stop.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if self.stopped:
            task.cancel()
            return None
        return task.result()

    def end(self, finish: str) -> str:
        """The episode ended with ``finish`` (``abort`` if it was stopped); returns that reason."""
        self.finish_reason = "abort" if self.stopped else finish
        self.finished = time.monotonic()
        return self.finish_reason


class Workflow(Protocol):
    """Produces one episode for one prompt row; the token budget is ``sampling.max_tokens`` for the whole episode."""

    def prompt(self, row: PromptRow) -> list[int]:
        """The ids every episode of ``row`` starts from."""

    async def run(
        self, engine: InferenceEngine, trace: EpisodeTrace, row: PromptRow, sampling: SamplingSpec
    ) -> Episode:
        """Run the episode on ``trace`` (each turn ``trace.sample``) to its end, or until ``trace`` is stopped."""


async def run_episodes(
    engine: InferenceEngine,
    group_id: str,
    workflow: Workflow,
    row: PromptRow,
    sampling: SamplingSpec,
    controller: GroupController,
    decode: Callable[[list[int]], str] | None = None,
    progress_every_tokens: int = 0,
    score_texts: ScoreFn | None = None,
) -> tuple[list[int], GroupResult, list[Episode]]:
    """``run_group`` for episodes: launch ``controller.plan.n_launch`` episodes of ``row`` under ``workflow``; the
    controller keeps, stops and prunes them by the tokens their model sampled. Returns their shared prompt ids, the
    group's result (kept samples; tool counts over every launched episode among its stats) and every launched
    episode, by index (the kept ones: ``kept_episodes``). A stopped episode's partial result is not kept, unless its
    controller cut it (kept truncated, counted ``cut``); it is counted ``aborted`` or ``pruned``.

    Raises ``ValueError`` if the prompts differ (an environment whose ``reset`` observation varies within a group:
    one group, one prompt)."""
    plan = controller.plan
    traces = [EpisodeTrace(f"{group_id}-{i}", i, plan.priority) for i in range(plan.n_launch)]
    episodes: dict[int, Episode] = {}

    async def launch(i: int, on_output: OnOutput | None) -> None:
        traces[i].on_output = on_output
        episodes[i] = await workflow.run(engine, traces[i], row, sampling)

    t0 = time.monotonic()
    kept, scorer = await run_members(
        engine, group_id, traces, launch, controller, decode, progress_every_tokens, score_texts
    )
    ran = [episodes[i] for i in range(plan.n_launch)]
    prompt = ran[0].prompt_tokens
    if any(e.prompt_tokens != prompt for e in ran):
        raise ValueError("the episodes of one group have different prompts (an environment's reset() differed)")
    result = group_result(traces, kept, [episodes[i].sample for i in kept], controller, t0, scorer)
    result.controller_stats.update(tool_stats(ran))
    return prompt, result, ran


def kept_episodes(result: GroupResult, episodes: list[Episode]) -> list[Episode]:
    """The episodes of ``result.samples``, in their order (``run_episodes``'s ``episodes``: all launched)."""
    return [episodes[s.index] for s in result.samples]


def episode_columns(episodes: list[Episode]) -> dict[str, list[Any]]:
    """The reward keyword arguments ``episodes`` add, one value a completion: TRL's ``environments`` (runs with an
    environment) and each key a user's workflow returned (``None`` for an episode that returned none under it)."""
    columns = {"environments": [e.environment for e in episodes]} if any(e.environment for e in episodes) else {}
    keys = sorted({k for e in episodes for k in e.extras})
    return columns | {k: [e.extras.get(k) for e in episodes] for k in keys}


def tool_stats(episodes: list[Episode]) -> dict[str, int]:
    """What ``episodes`` cost in turns and tools: ``turns``, ``tool_calls``, ``tool_ms``, ``tool_failures_<reason>``."""
    failures: dict[str, int] = {}
    for e in episodes:
        for reason, n in e.tools.failures.items():
            failures[reason] = failures.get(reason, 0) + n
    return {
        "turns": sum(e.turns for e in episodes),
        "tool_calls": sum(e.tools.calls for e in episodes),
        "tool_ms": round(1000 * sum(e.tools.seconds for e in episodes)),
        **{f"tool_failures_{reason}": n for reason, n in sorted(failures.items())},
    }
