"""The contract between a shaping policy and the rollout side.

A policy plans how many samples each prompt gets (``plan``), hands out one ``GroupController`` per
group that decides, event by event, which finished samples are kept and which running ones are aborted,
and learns from what was kept (``observe``). Pure Python: no vLLM, Ray or torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class GroupPlan:
    """How one prompt's group is sampled: launch ``n_launch``, keep exactly ``m_keep``."""

    prompt_id: str
    n_launch: int
    m_keep: int
    long_slots: int = 0
    priority: int = 0  # vLLM priority: lower runs first

    def __post_init__(self) -> None:
        if self.m_keep < 1:
            raise ValueError(f"m_keep must be >= 1, got {self.m_keep}")
        if self.n_launch < self.m_keep:
            raise ValueError(f"n_launch ({self.n_launch}) must be >= m_keep ({self.m_keep})")
        if not 0 <= self.long_slots <= self.m_keep:
            raise ValueError(f"long_slots must be in [0, m_keep], got {self.long_slots}")


@dataclass(frozen=True)
class FinishedSample:
    """A sample that left the engine: index in the group, generated length, why it ended.

    ``text`` is the generated text; only scoring controllers (SART) read it. ``score`` is its score when
    the rollout side computed one (a scorer worker); ``None`` lets the controller score it itself.
    """

    index: int
    length: int
    finish_reason: FinishReason
    text: str = ""
    score: float | None = None


@dataclass(frozen=True)
class RunningSample:
    """A sample still decoding, as seen by a progress report on the token clock (for pruning and deadlines).

    ``score`` as in ``FinishedSample``: given by the rollout side, or ``None`` for the controller to compute.
    """

    index: int
    length: int
    text: str = ""
    score: float | None = None


@dataclass
class Decision:
    """The controller's answer to an event: indices to abort now, and whether the group is complete."""

    abort: list[int] = field(default_factory=list)
    done: bool = False


class GroupController(Protocol):
    """Per-group state machine fed by finish events (and optionally progress reports)."""

    plan: GroupPlan

    @property
    def prunable(self) -> bool:
        """Whether a progress report could abort anything now; the rollout side skips the report (and its
        decoding and scoring) when it could not."""
        ...

    @property
    def reads_text(self) -> bool:
        """Whether it reads samples' texts (a scoring controller); if not, the rollout side decodes nothing for it."""
        ...

    def on_finish(self, sample: FinishedSample) -> Decision:
        """Record a finished (or aborted) sample; say which running samples to abort."""
        ...

    def on_progress(self, running: list[RunningSample]) -> Decision:
        """Periodic look at running samples (pruning); may abort some, only while M others can still be kept (a
        group launched with no more than M samples is never shown its running ones)."""
        ...

    def kept(self) -> list[int]:
        """Indices of the samples kept for training, exactly ``plan.m_keep`` once ``done``."""
        ...

    def stats(self) -> dict[str, int]:
        """Counters for this group: launched, kept, discarded, aborted, pruned, shortfall."""
        ...


class ShapingPolicy(Protocol):
    """Plans groups, builds their controllers, learns from kept lengths."""

    def plan(self, prompt_ids: list[str]) -> list[GroupPlan]:
        """Plan a batch of prompts at once (budget allocation is a batch-level decision)."""
        ...

    def controller(self, plan: GroupPlan) -> GroupController:
        """A fresh controller for one group."""
        ...

    def observe(self, prompt_id: str, kept_lengths: list[int]) -> None:
        """Feed back the lengths of a finished group's kept samples."""
        ...
