"""One group from a prompt: sampled on a rollout worker under the shaping policy (or, with tools, as multi-turn
episodes), then scored by the reward functions in TRL's arguments (with tools each completion is its episode's
messages and ``environments`` its environments). Failed reward calls are counted and watched (``RewardWatch``). A
group too short, with fewer than two samples scored, or without signal (DAPO's dynamic sampling) is dropped and
counted; the shaping policy observes every scored group's lengths."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from rl.algorithm.dynamic_sampling import DynamicSampling
from rl.config import RolloutConfig, RunConfig
from rl.inputs.prompting import PromptEncoder
from rl.loop.counters import RunCounters
from rl.loop.reward_watch import RewardWatch
from rl.output.metrics import correct
from rl.rewards.hooks import RewardState
from rl.rewards.pool import RewardPool
from rl.rollout.engine import SamplingSpec
from rl.rollout.episode_settings import episode_settings
from rl.rollout.scorer_worker import ScorerClient
from rl.rollout.workflow import Episode, episode_columns
from rl.shaping.factory import make_policy, shaping_options
from rl.shaping.idle_governor import IdleGovernor
from rl.shaping.policy import ShapingPolicy
from rl.types import Group, PromptRow


def rollout_sampling(r: RolloutConfig) -> SamplingSpec:
    """How a run's rollouts sample: the recipe's ``rollout`` settings."""
    return SamplingSpec(
        r.max_tokens, r.temperature, r.top_p, r.top_k, r.min_p, r.repetition_penalty, stop=tuple(r.stop)
    )


class GroupMaker:
    """Makes the run's groups. ``scorer``: SART's scorer worker, or None; ``state(weights_version)``: the rewards'
    ``trainer_state`` for samples of that version; ``fail`` hears why the run must stop when a reward function keeps
    failing."""

    def __init__(
        self,
        cfg: RunConfig,
        encoder: PromptEncoder,
        policy: ShapingPolicy,
        rewards: RewardPool,
        scorer: Any,
        counters: RunCounters,
        state: Callable[[int], RewardState],
        fail: Callable[[str], None],
    ) -> None:
        self.encoder, self.policy, self.rewards, self.scorer = encoder, policy, rewards, scorer
        self.counters, self.state, self.fail = counters, state, fail
        self.sampling = rollout_sampling(cfg.rollout)
        self.progress_every_tokens = cfg.shaping.progress_tokens
        self.episodes = episode_settings(cfg)  # None: single-turn groups under the shaping policy
        self.m_keep = cfg.shaping.m_keep
        self.watch = RewardWatch(rewards.names, cfg.train.batch_groups)
        self.dynamic_sampling = DynamicSampling(cfg.algorithm, cfg.train.batch_groups)
        self.group_ids = itertools.count()

    async def make(self, worker: Any, row: PromptRow, plan: Any, version: int) -> Group | None:
        """The group of ``row`` under ``plan`` on ``worker``, scored, while the trainer is at ``version``; None if
        it is dropped, counted."""
        prompt_tokens, result, episodes = await self.sample(worker, row, plan)
        group = await self.score(row, prompt_tokens, result, episodes, version)
        if group is None:
            return None
        self.policy.observe(row.prompt_id, result.lengths(group.samples))
        verdict = self.dynamic_sampling.verdict([s.reward for s in group.samples], correct(group))
        if verdict == "over_cap":
            self.counters.zero_variance_admitted += 1
        elif verdict != "keep":
            self.counters.drop(verdict)
            return None
        return group

    async def sample(self, worker: Any, row: PromptRow, plan: Any) -> tuple[list[int], Any, list[Episode]]:
        """One group on ``worker``: its prompt ids, its ``GroupResult`` and, with tools, its episodes (one a sample)."""
        group_id = f"g{next(self.group_ids)}-{row.prompt_id}"
        controller = self.policy.controller(plan)
        scorer = ScorerClient(self.scorer, row.prompt) if self.scorer else None
        if self.episodes is not None:
            return await worker.generate_episodes.remote(
                group_id, row, self.sampling, self.episodes, controller, self.progress_every_tokens, scorer
            )
        prompt_tokens = self.encoder.encode(row.prompt)
        result = await worker.generate_group.remote(
            group_id, prompt_tokens, self.sampling, controller, self.progress_every_tokens, scorer
        )
        return prompt_tokens, result, []

    async def score(
        self, row: PromptRow, prompt_tokens: list[int], result: Any, episodes: list[Episode], version: int
    ) -> Group | None:
        """Rewards for the group's samples; None if it is dropped, counted."""
        samples = result.samples
        if len(samples) < self.m_keep:
            self.counters.drop("short_group")
            return None
        generated_with = min((min(s.versions) for s in samples if s.versions), default=version)
        scored = await self.rewards.score(
            [row.prompt] * len(samples),
            [e.messages for e in episodes] or self.encoder.completions(row.prompt, samples),
            self.encoder.columns([row] * len(samples), samples) | episode_columns(episodes),
            self.state(generated_with),
        )
        self.counters.scored_samples += len(samples)
        for kind, n in scored.failures.items():
            if n:
                self.counters.reward_failures[kind] = self.counters.reward_failures.get(kind, 0) + n
        if failure := self.watch.failure(scored.errors):
            self.fail(failure)
        keep = [i for i, r in enumerate(scored.rewards) if r is not None]
        kept = [(samples[i], scored.rewards[i]) for i in keep]
        if len(kept) < 2:
            self.counters.drop("reward_dropped")
            return None
        for s, r in kept:
            s.reward = float(r)
        stats = {
            **result.controller_stats,
            "generated_tokens": result.generated_tokens,
            "resubmitted": result.resubmits,
            "seconds": result.seconds,
            **({"scored_texts": result.scored, "score_failures": result.score_failures} if self.scorer else {}),
        }
        return Group(
            prompt=row,
            prompt_tokens=prompt_tokens,
            samples=[s for s, _ in kept],
            stats=stats,
            reward_log=scored.log_of(keep),
        )


def new_shaping(cfg: RunConfig) -> dict[str, Any]:
    """A fresh run's shaping state: its policy and, with ``shaping.idle_target``, the idle governor that steers the
    policy's redundancy (None without); a resumed run's comes from its checkpoint (``read_shaping``)."""
    s = cfg.shaping
    governor = (
        IdleGovernor(s.avg_redundancy, s.min_redundancy, s.max_redundancy, s.steered_idle)
        if s.steered_idle is not None
        else None
    )
    return {"policy": make_policy(s.policy, **shaping_options(cfg)), "governor": governor}
