"""The episode seam: a ``Workflow`` turns one prompt row into one trainable episode on an engine.

``SingleTurn`` is the plain sampler as a workflow (one request, every token the model's); ``ToolWorkflow``
(rollout/tool_workflow.py) runs a tool-calling conversation. Either way the episode is one token sequence after its
prompt, with the sampler's log-prob and a loss-mask bit per token, ready for the trainer as a ``Sample``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rl.rollout.engine import InferenceEngine, RequestTrace, SamplingSpec
from rl.rollout.group_runner import GroupResult
from rl.rollout.tools import ToolStats

from rl.types import PromptRow, Sample


@dataclass
class Episode:
    """One episode: its prompt's ids, the sample the trainer learns from, and what it cost."""

    prompt_tokens: list[int]
    sample: Sample
    turns: int = 1
    tools: ToolStats = field(default_factory=ToolStats)
    environment: Any = None  # the episode's environment as rewards see it (TRL's ``environments``): a snapshot
    messages: list[dict[str, Any]] = field(default_factory=list)  # the completion as chat messages, TRL's form

    @property
    def generated_tokens(self) -> int:
        """Tokens the model sampled, over all turns (a tool's result excluded)."""
        mask = self.sample.loss_mask
        return len(self.sample.tokens) if mask is None else sum(mask)


class Workflow(Protocol):
    """Produces one episode for one prompt row; the token budget is ``sampling.max_tokens`` for the whole episode."""

    async def run(
        self, engine: InferenceEngine, request_id: str, index: int, row: PromptRow, sampling: SamplingSpec
    ) -> Episode:
        """Run the episode to its end; ``request_id`` names its engine requests, ``index`` is its place in the group."""


class SingleTurn:
    """One completion per episode: the prompt as ``encode`` gives it, one request."""

    def __init__(self, encode: Callable[[Any], list[int]], decode: Callable[[list[int]], str]) -> None:
        self.encode = encode
        self.decode = decode

    async def run(
        self, engine: InferenceEngine, request_id: str, index: int, row: PromptRow, sampling: SamplingSpec
    ) -> Episode:
        prompt = self.encode(row.prompt)
        trace = await engine.generate(RequestTrace(request_id), prompt, sampling)
        sample = Sample(
            index=index,
            tokens=trace.tokens,
            logprobs=trace.logprobs,
            versions=trace.token_versions(engine.version),
            finish_reason=trace.finish_reason or "abort",
            text=self.decode(trace.tokens),
        )
        return Episode(prompt, sample, messages=[{"role": "assistant", "content": sample.text}])


def episode_group(episodes: list[Episode], seconds: float) -> tuple[list[int], GroupResult]:
    """A group's episodes as the single-turn path reports a group: their shared prompt ids and a ``GroupResult``
    (every episode kept; the tool counts among the stats). Raises ``ValueError`` if the prompts differ (an
    environment whose ``reset`` observation varies within a group: one group, one prompt)."""
    prompt = episodes[0].prompt_tokens
    if any(e.prompt_tokens != prompt for e in episodes):
        raise ValueError("the episodes of one group have different prompts (an environment's reset() differed)")
    samples = [e.sample for e in episodes]
    failures: dict[str, int] = {}
    for e in episodes:
        for reason, n in e.tools.failures.items():
            failures[reason] = failures.get(reason, 0) + n
    stats = {
        "launched": len(episodes),
        "kept": len(episodes),
        "turns": sum(e.turns for e in episodes),
        "tool_calls": sum(e.tools.calls for e in episodes),
        "tool_ms": round(1000 * sum(e.tools.seconds for e in episodes)),
        **{f"tool_failures_{reason}": n for reason, n in sorted(failures.items())},
    }
    result = GroupResult(
        samples=samples,
        controller_stats=stats,
        all_lengths=[len(s.tokens) for s in samples],
        finish_reasons=[s.finish_reason for s in samples],
        generated_tokens=sum(e.generated_tokens for e in episodes),
        kept_tokens=sum(e.generated_tokens for e in episodes),
        seconds=seconds,
    )
    return prompt, result
