"""What a reward function gets besides its columns, as TRL's ``GRPOTrainer`` passes it: ``trainer_state`` and the
``log_metric`` / ``log_extra`` hooks.

``RewardState`` holds the ``TrainerState`` fields reward functions read. It is current at the call: the trainer's
step when the group is scored and the policy version its samples came from; it is pickled to the reward workers.
``CallLog`` collects what one call logs, in the process that runs it, and travels back with the call's result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RewardState:
    """TRL's ``TrainerState`` fields for one reward call (``log_history`` is empty: records go to metrics.jsonl)."""

    global_step: int = 0  # optimizer steps the trainer has taken when the samples are scored
    max_steps: int = 0  # train.max_steps
    epoch: float = 0.0  # passes over the training rows the trainer has made at global_step
    num_train_epochs: int = 0  # passes over the training rows max_steps make (rounded up)
    weights_version: int = 0  # the policy version the samples were generated with (their oldest token's)
    log_history: list[dict] = field(default_factory=list)

    @classmethod
    def at(
        cls, step: int, max_steps: int, batch_groups: int, num_rows: int, weights_version: int | None = None
    ) -> RewardState:
        """The state at trainer step ``step`` of a run over ``num_rows`` rows, ``batch_groups`` prompts a step (a
        pass holds the whole batches the rows fill); ``weights_version`` defaults to ``step`` (on-policy)."""
        per_pass = max(num_rows // batch_groups, 1) * batch_groups
        return cls(
            global_step=step,
            max_steps=max_steps,
            epoch=step * batch_groups / per_pass,
            num_train_epochs=math.ceil(max_steps * batch_groups / per_pass),
            weights_version=step if weights_version is None else weights_version,
        )


@dataclass
class CallLog:
    """``log_metric`` values (any number per name) and ``log_extra`` columns (the last one given per name) of one
    call; its two bound methods are the hooks the call gets."""

    metrics: dict[str, list[float]] = field(default_factory=dict)
    extra: dict[str, list] = field(default_factory=dict)

    def log_metric(self, name: str, value: float) -> None:
        """Record ``value`` under ``name``; a step's values are averaged into metrics.jsonl as ``reward/NAME``."""
        self.metrics.setdefault(str(name), []).append(float(value))

    def log_extra(self, column: str, values: list) -> None:
        """Record a column of one value per completion for completions.jsonl."""
        self.extra[str(column)] = list(values)
