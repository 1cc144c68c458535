"""A run that learns nothing says so: steps in which every advantage is zero.

A group whose samples all got the same reward has no advantage under any group baseline, and a batch of such groups
gives the policy no reward signal at all: the loss has no policy-gradient term and the weights do not move towards
anything. It is the most common way an RL run goes quietly wrong (a reward function that returns one value for
every sample, prompts the model always or never solves), and the metrics alone do not say it. ``SignalWatch``
follows the run step by step and, once ``SILENT_STEPS`` steps in a row had no signal, gives one warning that says
which of the two it looks like and what to change; every such step is counted for the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rl.types import Group

SILENT_STEPS = 5  # steps in a row without signal before the warning (one step alone can be bad luck)


@dataclass
class SignalWatch:
    """Which recent steps had no reward signal; warns once per run."""

    streak: list[int] = field(default_factory=list)  # the steps of the current run of silent steps
    rewards: set[float] = field(default_factory=set)  # every reward value given in them
    warned: bool = False

    def after_step(self, step: int, groups: list[Group]) -> tuple[bool, str | None]:
        """Whether ``step`` (its groups with advantages assigned) had no signal, and the warning when it is due."""
        silent = all(a == 0.0 for g in groups for a in g.advantages)
        if not silent:
            self.streak, self.rewards = [], set()
            return False, None
        if self.warned:  # once per run: nothing more to gather for a warning
            return True, None
        self.streak.append(step)
        self.rewards.update(s.reward for g in groups for s in g.samples)
        if len(self.streak) < SILENT_STEPS:
            return True, None
        self.warned = True
        return True, self._warning()

    def _warning(self) -> str:
        steps = f"steps {self.streak[0]}-{self.streak[-1]}"
        if len(self.rewards) == 1:
            (value,) = self.rewards
            return (
                f"{steps}: every sample got the reward {value:g}, so every advantage is 0 and the policy learns "
                f"nothing; a reward that gives all samples one value has no signal: check the reward function "
                f"(completions.jsonl shows what it scored)"
            )
        return (
            f"{steps}: within every group all samples got the same reward (rewards {min(self.rewards):g} to "
            f"{max(self.rewards):g} across groups), so every advantage is 0 and the policy learns nothing; give "
            f"prompts nearer the model's level, more samples per prompt (shaping.m_keep), or set "
            f"algorithm.dynamic_sampling=true"
        )
