"""Plain data records that cross actor boundaries: prompts, samples, groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Messages = list[dict[str, str]]


@dataclass
class PromptRow:
    """One dataset row ready for rollout.

    ``prompt`` is the text (or chat messages) given to the policy, ``answer`` the reference answer
    used by rewards, ``columns`` every other dataset column (passed to reward functions as keywords).
    """

    prompt_id: str
    prompt: str | Messages
    answer: str
    columns: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    """One generated response with what the trainer needs to learn from it."""

    index: int  # position in the group's launch order
    tokens: list[int]
    logprobs: list[float]  # behaviour log-probs of the sampled tokens
    versions: list[int]  # policy version that produced each token
    finish_reason: str  # "stop" | "length" | "abort"
    text: str = ""
    reward: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class Group:
    """A prompt's kept samples plus everything measured while producing them."""

    prompt: PromptRow
    prompt_tokens: list[int]
    samples: list[Sample]
    advantages: list[float] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    position: int = -1  # the prompt's position in the training stream (``PromptStream``); -1 outside training

    @property
    def min_version(self) -> int:
        """Oldest policy version that produced any token of this group."""
        return min((min(s.versions) for s in self.samples if s.versions), default=0)
