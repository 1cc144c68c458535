"""``rollout.workflow``: a user's own episode logic in place of the single-turn sampler or the tool loop (the
extension point of AReaL's ``RolloutWorkflow``, verl's agent loop, slime's custom generate function).

A workflow is an ``async def run(episode, row)``, or a class (made once per rollout worker, with no arguments) whose
``run(self, episode, row)`` is one. ``row`` is the dataset row as rewards see it (every column, ``prompt``,
``answer``). ``episode`` (``EpisodeContext``) starts from the row's prompt as the run renders it and grows by two
moves: ``await episode.generate()`` samples the model's next turn after everything so far (trained on, with the
sampler's log-probs), ``episode.append(text_or_ids)`` adds tokens the model did not write (feedback, an
observation; not trained on). The episode is one token sequence, never re-rendered, so what the trainer scores is
exactly what the engine sampled. ``rollout.max_tokens`` bounds everything after the prompt; a shaping controller may
stop an episode at any time (``generate`` then returns at once). Rewards get the whole text after the prompt, and
what ``run`` returns, a dict, as keyword arguments (TRL's ``rollout_func`` forwards its extra fields so).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from rl.rollout.engine import InferenceEngine, SamplingSpec
from rl.rollout.tool_workflow import reset_arguments
from rl.rollout.tools import load_named
from rl.rollout.workflow import Episode, EpisodeTrace

from rl.inputs.prompting import PromptEncoder
from rl.rewards.pool import TRL_HOOKS
from rl.types import PromptRow, Sample, decoded_message

RunFn = Callable[["EpisodeContext", dict[str, Any]], Awaitable[Any]]
# the reward keyword arguments besides the row's columns, which a workflow's returned keys may not take
REWARD_ARGUMENTS = ("prompts", "completions", "completion_ids", "completion_length", "environments", *TRL_HOOKS)


class Turn(NamedTuple):
    """One sampled turn: its ids, its text and why it ended (``stop``, ``length``, or ``abort`` when stopped)."""

    ids: list[int]
    text: str
    finish_reason: str


class WorkflowError(Exception):
    """A user's workflow raised or misused its episode; one line naming the workflow and what happened."""


class EpisodeContext:
    """What a user's workflow drives: one episode's token sequence after its prompt."""

    def __init__(
        self,
        engine: InferenceEngine,
        trace: EpisodeTrace,
        prompt_ids: list[int],
        sampling: SamplingSpec,
        tokenizer: Any,
    ) -> None:
        self.tokenizer = tokenizer
        self.prompt_ids = list(prompt_ids)
        self._engine, self._trace, self._sampling = engine, trace, sampling
        self._finish = "stop"  # the last turn's end, the episode's when it ends

    @property
    def ids(self) -> list[int]:
        """Every id after the prompt so far: sampled turns and appended ones, in order."""
        return list(self._trace.ids)

    @property
    def text(self) -> str:
        """The text of ``ids``, special tokens dropped."""
        return self.tokenizer.decode(self._trace.ids, skip_special_tokens=True)

    @property
    def remaining(self) -> int:
        """Tokens left of ``rollout.max_tokens`` after the prompt."""
        return self._sampling.max_tokens - len(self._trace.ids)

    @property
    def stopped(self) -> bool:
        """Whether the shaping controller stopped the episode: ``generate`` samples nothing more."""
        return self._trace.stopped

    async def generate(self, max_tokens: int | None = None) -> Turn:
        """Sample the model's next turn after the prompt and everything appended so far, of at most ``max_tokens``
        (and what is left of ``rollout.max_tokens``)."""
        if max_tokens is not None and max_tokens < 1:
            raise WorkflowError(f"generate(max_tokens={max_tokens}): give at least 1")
        if self._trace.current is not None:
            raise WorkflowError("generate while another turn of the episode samples: await each turn before the next")
        if self.stopped or self.remaining <= 0:
            self._finish = "abort" if self.stopped else "length"
            return Turn([], "", self._finish)
        budget = replace(self._sampling, max_tokens=min(self.remaining, max_tokens or self.remaining))
        turn = await self._trace.sample(self._engine, self.prompt_ids + self._trace.ids, budget)
        self._finish = turn.finish_reason or "abort"
        return Turn(list(turn.tokens), self.tokenizer.decode(turn.tokens, skip_special_tokens=True), self._finish)

    def ended(self) -> str:
        """Why the episode ended: its last turn's reason (``abort`` once stopped)."""
        return self._finish

    def append(self, content: str | list[int]) -> None:
        """Add text (tokenized without special tokens) or ids the model did not write; they are not trained on.
        What does not fit in ``remaining`` is cut, and the episode can sample no more."""
        if not self._trace.turns:
            raise WorkflowError("append before the first generate: put what comes first in the prompt (data.template)")
        if self._trace.current is not None:
            raise WorkflowError("append while a turn of the episode samples: await the turn first")
        ids = self.tokenizer.encode(content, add_special_tokens=False) if isinstance(content, str) else list(content)
        self._trace.appended(ids[: max(self.remaining, 0)])


@dataclass(frozen=True)
class UserWorkflowSettings:
    """``rollout.workflow`` as plain data, sent to rollout workers, which load it there."""

    spec: str
    base_dir: str  # a relative file spec is resolved against it
    template_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # data.chat_template_kwargs

    def load(self) -> RunFn:
        """The workflow's ``run``; ``ValueError`` with one line naming the spec and what is wrong."""
        return load_workflow(self.spec, self.base_dir)

    def build(self, tokenizer: Any) -> UserWorkflow:
        return UserWorkflow(self.spec, self.load(), tokenizer, self.template_kwargs)


def load_workflow(spec: str, base_dir: str) -> RunFn:
    """The ``run`` coroutine function ``spec`` names: an async function, or a class's instance's ``run`` method."""
    target = load_named(spec, "workflow", "Workflow", base_dir)
    if inspect.isclass(target):
        if not callable(getattr(target, "run", None)):
            raise ValueError(f"workflow spec {spec!r}: the class has no run(episode, row) method")
        try:
            target = target().run
        except Exception as e:
            fails = f"workflow spec {spec!r}: making it with no arguments failed"
            raise ValueError(f"{fails}: {type(e).__name__}: {e}") from None
    if not inspect.iscoroutinefunction(target):
        raise ValueError(f"workflow spec {spec!r}: run must be an async function of (episode, row)")
    if len(inspect.signature(target).parameters) != 2:
        raise ValueError(f"workflow spec {spec!r}: run takes two arguments, (episode, row)")
    return target


class UserWorkflow:
    """A ``Workflow`` that runs a user's ``run(episode, row)`` on each episode."""

    def __init__(self, spec: str, run: RunFn, tokenizer: Any, template_kwargs: dict[str, Any]) -> None:
        self.spec, self.user_run = spec, run
        self.encoder = PromptEncoder(tokenizer, template_kwargs)  # a single-turn run's rendering of the prompt

    def prompt(self, row: PromptRow) -> list[int]:
        """The ids an episode of ``row`` starts from: its prompt as a single-turn run renders it."""
        return self.encoder.encode(row.prompt)

    async def run(
        self, engine: InferenceEngine, trace: EpisodeTrace, row: PromptRow, sampling: SamplingSpec
    ) -> Episode:
        episode = EpisodeContext(engine, trace, self.prompt(row), sampling, self.encoder.tokenizer)
        arguments = reset_arguments(row)
        try:
            returned = await self.user_run(episode, arguments)
        except WorkflowError as e:
            raise WorkflowError(f"rollout.workflow {self.spec!r}: {e}") from None
        except Exception as e:
            raise WorkflowError(f"rollout.workflow {self.spec!r} raised {type(e).__name__}: {e}") from None
        if not trace.turns:
            raise WorkflowError(f"rollout.workflow {self.spec!r}: an episode ended without a generate call")
        extras = self._extras(returned, arguments)
        text = episode.text
        sample = Sample(
            index=trace.index,
            tokens=trace.ids,
            logprobs=trace.logprobs,
            versions=trace.versions,
            finish_reason=trace.end(episode.ended()),
            text=text,
            loss_mask=trace.mask,
        )
        completion = [decoded_message(text)] if isinstance(row.prompt, list) else text
        return Episode(episode.prompt_ids, sample, turns=trace.turns, messages=completion, extras=extras)

    def _extras(self, returned: Any, row: dict[str, Any]) -> dict[str, Any]:
        """What ``run`` returned, as reward keyword arguments: None, or a dict whose keys no other argument has."""
        if returned is None:
            return {}
        if not isinstance(returned, dict) or not all(isinstance(k, str) for k in returned):
            raise WorkflowError(
                f"rollout.workflow {self.spec!r} returned {type(returned).__name__}: return None, or a dict of "
                "reward keyword arguments"
            )
        taken = sorted(returned.keys() & (set(row) | set(REWARD_ARGUMENTS)))
        if taken:
            raise WorkflowError(
                f"rollout.workflow {self.spec!r} returned {taken[0]!r}, a name rewards get already; rename it"
            )
        return dict(returned)
