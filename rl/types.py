"""Plain data records that cross actor boundaries: prompts, samples, groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Messages = list[dict[str, str]]
THINK_START, THINK_END = "<think>", "</think>"  # a reasoning model's think block (Qwen3, DeepSeek-R1, distills)


def decoded_message(text: str) -> dict[str, str]:
    """A model's turn as TRL's ``GRPOTrainer`` passes a chat completion it does not parse (no tools, no
    ``response_template``): the decoded text, a think block and all, as ``content``."""
    return {"role": "assistant", "content": text}


def assistant_message(text: str, in_thought: bool = False) -> dict[str, str]:
    """A model's turn as TRL's response parsing reads one (its tool episodes): a think block (up to the first
    ``</think>``, its ``<think>`` dropped) as ``reasoning_content`` where it is not empty, the rest as ``content``; a
    text without one is all ``content``, or, ``in_thought`` (what came before it opened a think block: Qwen3.5's
    generation prompt), all ``reasoning_content``."""
    if THINK_END in text:
        reasoning, _, content = text.partition(THINK_END)
        reasoning = reasoning.strip().removeprefix(THINK_START)
    else:
        reasoning, content = (text, "") if in_thought else ("", text)
    message = {"role": "assistant", "content": content.strip()}
    return message | ({"reasoning_content": reasoning.strip()} if reasoning.strip() else {})


def opens_thought(text: str) -> bool:
    """Whether ``text`` (a prompt's end) leaves a think block open: what follows it starts inside the thought."""
    return text.rfind(THINK_START) > text.rfind(THINK_END)


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
    loss_mask: list[int] | None = None  # per token: 1 the model wrote it, 0 a tool's result; None: all the model's

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class RewardLog:
    """What scoring a group recorded besides its rewards: each reward function's values and each ``log_extra``
    column (one value per kept sample, in sample order), and the ``log_metric`` values by name."""

    functions: dict[str, list[float | None]] = field(default_factory=dict)
    extra: dict[str, list[Any]] = field(default_factory=dict)
    metrics: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Group:
    """A prompt's kept samples plus everything measured while producing them."""

    prompt: PromptRow
    prompt_tokens: list[int]
    samples: list[Sample]
    advantages: list[float] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    position: int = -1  # the prompt's position in the training stream (``PromptStream``); -1 outside training
    reward_log: RewardLog = field(default_factory=RewardLog)

    @property
    def min_version(self) -> int:
        """Oldest policy version that produced any token of this group."""
        return min((min(s.versions) for s in self.samples if s.versions), default=0)
