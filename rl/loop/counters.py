"""What happens outside any one step, counted for the run summary and kept by checkpoints (``RunCounters``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunCounters:
    """Things that happen outside any one step, counted for the run summary (and kept by checkpoints).

    Group accounting, an invariant of every run: ``groups_started == groups_trained + rollout_errors +
    sum(dropped_groups) + replayed_groups + groups in flight or buffered now``.
    """

    groups_started: int = 0
    groups_trained: int = 0
    rollout_errors: int = 0  # groups whose sampling call failed (a dead worker, a failed call)
    dead_workers: int = 0
    restarted_workers: int = 0
    zero_variance_admitted: int = 0  # due a dynamic-sampling drop past its cap: trained on anyway
    replayed_groups: int = 0  # in flight or buffered at the checkpoint a run resumed from: sampled again
    dropped_groups: dict[str, int] = field(default_factory=dict)
    reward_failures: dict[str, int] = field(default_factory=dict)
    scored_samples: int = 0  # samples given to the reward functions (reward_failures["none"] counts those unscored)
    stalls: int = 0  # waits that outlasted the stall limit (rl.loop.stall), each warned of
    steps_without_signal: int = 0  # steps whose every advantage was 0 (rl.loop.signal_watch)
    tokens_trained: int = 0  # prompt and response tokens of every trained sample (TRL's num_tokens)

    def drop(self, reason: str) -> None:
        self.dropped_groups[reason] = self.dropped_groups.get(reason, 0) + 1

    def unaccounted(self, open_groups: int) -> int:
        """Started groups the invariant does not place, given ``open_groups`` in flight or buffered: 0."""
        placed = self.groups_trained + self.rollout_errors + sum(self.dropped_groups.values()) + self.replayed_groups
        return self.groups_started - placed - open_groups
