"""Held-out evaluation through rollout engines: k samples per problem, scored by the run's rewards.

``evaluate`` gives the summary the driver logs during training (k=1 by default); ``sample_and_score`` gives
the per-problem records behind it, which ``rl eval`` also writes out. A sample is correct when the first
reward function (the recipe's accuracy reward) scores it above 0, so shaping terms such as a format bonus
or an overlong penalty never change accuracy or pass@k. With tools (a recipe's ``rollout.tools`` or
``environment``) every sample is an episode whose calls run, as in training: rewards read its messages (and
``environments``), and its length is the tokens its model sampled.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rl.config import RolloutConfig
from rl.inputs.prompting import PromptEncoder
from rl.loop.groups import rollout_sampling
from rl.output.console import error_line
from rl.output.metrics import length_stats
from rl.output.progress import Progress
from rl.output.trl_metrics import aliases
from rl.rewards.hooks import RewardState
from rl.rewards.pool import RewardPool
from rl.rollout.engine import SamplingSpec
from rl.rollout.episode_settings import EpisodeSettings
from rl.rollout.workflow import Episode, Workflow, episode_columns
from rl.shaping.plain import PlainController
from rl.shaping.policy import GroupPlan
from rl.types import PromptRow


class EvaluationFailed(Exception):
    """No held-out problem could be sampled; one line with the last error."""


log = logging.getLogger("rl.eval")


@dataclass(frozen=True)
class GroupFailed:
    """A held-out problem whose group could not be sampled, and why (one line)."""

    error: str


@dataclass
class ProblemRecord:
    """One problem's samples: combined reward, correctness, length and finish reason of each."""

    prompt_id: str
    answer: str
    rewards: list[float]
    correct: list[bool]
    lengths: list[int]
    finish_reasons: list[str]
    first_text: str  # the first sample's response, for reading
    unscored: int = 0  # samples the accuracy reward gave no value (it failed, or returned None): counted wrong
    error: str | None = None  # why no sample could be drawn (its group failed): the figures leave the problem out

    @property
    def num_correct(self) -> int:
        return sum(self.correct)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def k_values(n: int) -> list[int]:
    """The k reported for ``n`` samples per problem: 1, 2, 4, ... up to ``n``, and ``n`` itself."""
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else [*ks, n]


async def sample_and_score(
    rows: list[PromptRow],
    workers: list[Any],
    encoder: PromptEncoder,
    rewards: RewardPool,
    sampling: SamplingSpec,
    tag: str,
    samples: int = 1,
    progress: str | None = None,
    state: RewardState | None = None,
    tools: Workflow | EpisodeSettings | None = None,
    on_problem: Callable[[], None] | None = None,
) -> list[ProblemRecord]:
    """Sample ``samples`` responses per row (one group per row, spread over ``workers``) and score them, with
    ``state`` as the rewards' ``trainer_state`` (default: a run's start); with ``tools``, episodes of that workflow.

    A worker is a Ray rollout-worker handle or an in-process object with the same async ``generate_group`` and
    ``generate_episodes``. ``progress``: the label of a progress bar over the problems (none when None);
    ``on_problem``: called as each problem's samples are in (a run's stall watch counts it as progress).
    """

    def launch(worker: Any, row: PromptRow) -> Any:
        """The awaitable of ``row``'s group on ``worker``."""
        controller = PlainController(GroupPlan(prompt_id=row.prompt_id, n_launch=samples, m_keep=samples))
        group_id = f"eval-{tag}-{row.prompt_id}"
        if tools is not None:
            return _method(worker, "generate_episodes")(group_id, row, sampling, tools, controller)
        return _method(worker, "generate_group")(group_id, encoder.encode(row.prompt), sampling, controller)

    bar = Progress(len(rows), progress, "problem") if progress is not None else None

    async def counted(i: int, row: PromptRow) -> Any:
        # the call is made here: a stop before this task starts leaves none unawaited (Python warns of those)
        try:
            result = await launch(workers[i % len(workers)], row)
        except Exception as e:  # its group failed (a workflow or environment that raised, a dead worker): left out
            result = GroupFailed(error_line(e))
        if bar is not None:
            bar.advance()
        if on_problem is not None:
            on_problem()
        return result

    try:
        every = await asyncio.gather(*(counted(i, row) for i, row in enumerate(rows)))
    finally:
        if bar is not None:
            bar.close()
    failed = [out for out in every if isinstance(out, GroupFailed)]
    if failed:
        log.warning(
            "held-out evaluation %s: %d of %d problems could not be sampled and are left out of its figures; the "
            "last error: %s",
            tag,
            len(failed),
            len(rows),
            failed[-1].error,
        )
    sampled = [(row, out) for row, out in zip(rows, every, strict=True) if not isinstance(out, GroupFailed)]
    scored = iter(await _scored(sampled, encoder, rewards, state, tools is not None) if sampled else [])
    return [
        ProblemRecord(row.prompt_id, row.answer, [], [], [], [], "", error=out.error)
        if isinstance(out, GroupFailed)
        else next(scored)
        for row, out in zip(rows, every, strict=True)
    ]


async def _scored(
    sampled: list[tuple[PromptRow, Any]],
    encoder: PromptEncoder,
    rewards: RewardPool,
    state: RewardState | None,
    episodic: bool,
) -> list[ProblemRecord]:
    """The records of the sampled problems: each row with its group's result (``episodic``: the episodes' call's
    ``(prompt, result, kept)``), scored by ``rewards``."""
    rows = [row for row, _ in sampled]
    outs = [out for _, out in sampled]
    results = outs if not episodic else [result for _, result, _ in outs]
    episodes: list[Episode] = [] if not episodic else [e for _, _, kept in outs for e in kept]
    groups = [r.samples for r in results]
    flat_rows = [row for row, group in zip(rows, groups, strict=True) for _ in group]
    flat = [s for group in groups for s in group]
    scored = await rewards.score(
        [r.prompt for r in flat_rows],
        [e.messages for e in episodes]
        or [c for row, group in zip(rows, groups, strict=True) for c in encoder.completions(row.prompt, group)],
        encoder.columns(flat_rows, flat) | episode_columns(episodes),
        state,
    )
    primary = next(iter(scored.per_function.values()))
    records, start = [], 0
    for row, result, group in zip(rows, results, groups, strict=True):
        end = start + len(group)
        records.append(
            ProblemRecord(
                prompt_id=row.prompt_id,
                answer=row.answer,
                rewards=[v if v is not None else 0.0 for v in scored.rewards[start:end]],
                correct=[v is not None and v > 0 for v in primary[start:end]],
                lengths=result.lengths(group),
                finish_reasons=[s.finish_reason for s in group],
                first_text=group[0].text if group else "",
                unscored=sum(v is None for v in primary[start:end]),
            )
        )
        start = end
    return records


def held_out_sampling(rollout: RolloutConfig, samples: int, temperature: float, max_tokens: int) -> SamplingSpec:
    """How held-out problems are sampled: one sample plainly at ``temperature`` (0: greedy); pass@k samples as the
    run's rollouts are (its top_p, top_k, min_p, repetition_penalty) at ``temperature``; both stop on its stop
    strings."""
    if samples == 1:
        return SamplingSpec(max_tokens, temperature, stop=tuple(rollout.stop))
    return replace(rollout_sampling(rollout), max_tokens=max_tokens, temperature=temperature)


def summarize(records: list[ProblemRecord]) -> dict[str, float]:
    """``accuracy`` (= pass@1), pass@k for ``k_values(n)``, mean reward, response lengths, truncated fraction, and
    TRL's names for those it has one for (``rl.output.trl_metrics``), over the problems that could be sampled
    (``failed_problems``: those that could not). Raises ``EvaluationFailed`` when none could."""
    if not records:
        raise ValueError("no problems to summarize")
    failed = [r for r in records if r.error is not None]
    records = [r for r in records if r.error is None]
    if not records:
        raise EvaluationFailed(f"none of the {len(failed)} held-out problems could be sampled: {failed[-1].error}")
    n = min(len(r.correct) for r in records)
    pass_k = {k: np.mean([pass_at_k(len(r.correct), r.num_correct, k) for r in records]) for k in k_values(n)}
    lengths = [length for r in records for length in r.lengths]
    out = {
        "accuracy": float(np.mean([r.num_correct / len(r.correct) for r in records])),
        **{f"pass@{k}": float(v) for k, v in pass_k.items()},
        "reward_mean": float(np.mean([v for r in records for v in r.rewards])),
        "truncated_frac": float(np.mean([f == "length" for r in records for f in r.finish_reasons])),
        "unscored_frac": float(sum(r.unscored for r in records) / sum(len(r.correct) for r in records)),
        "num_problems": float(len(records)),
        "failed_problems": float(len(failed)),
        "samples_per_problem": float(n),
        **length_stats(lengths),
    }
    return out | aliases(out)  # TRL's names too: eval/reward, eval/completions/mean_length in W&B


async def evaluate(
    rows: list[PromptRow],
    workers: list[Any],
    encoder: PromptEncoder,
    rewards: RewardPool,
    sampling: SamplingSpec,
    tag: str,
    samples: int = 1,
    state: RewardState | None = None,
    tools: Workflow | EpisodeSettings | None = None,
    on_problem: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Summary metrics (see ``summarize``) of ``samples`` responses per row (``state``, ``tools``, ``on_problem``:
    see ``sample_and_score``)."""
    records = await sample_and_score(
        rows, workers, encoder, rewards, sampling, tag, samples, state=state, tools=tools, on_problem=on_problem
    )
    return summarize(records)


def _method(worker: Any, name: str) -> Any:
    """The awaitable-returning method ``name`` of a Ray actor handle (``.remote``) or a local worker."""
    method = getattr(worker, name)
    return getattr(method, "remote", method)
