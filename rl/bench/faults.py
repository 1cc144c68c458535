"""Faults injected on purpose, for the fault soak (``rl bench soak``). Nothing here acts unless it is asked to.

- ``TAILOR_FAULTS="nan_loss@30,nan_loss@31"``: the trainer's loss is NaN at those steps (``scheduled``), through the
  trainer hook ``nan_loss`` (``TAILOR_TRAINER_HOOKS=rl.bench.faults:nan_loss``, see ``rl.trainer.hooks``).
- ``arith_exact_with_faults``: the ``arith_exact`` reward, except that a call raises, returns NaN or hangs for
  a fixed share of its inputs (chosen by a hash of the group's first prompt and completion, so a rerun injects
  the same faults on the same inputs).
- ``TAILOR_FAULT_LOG=PATH``: each injected reward fault appends its kind to PATH as many times as the
  reward pool counts it (a raised or hung call once, a NaN once per value), for the soak's count.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from typing import Any

from rl.rewards.math import arith_exact

FAULTS_ENV = "TAILOR_FAULTS"
FAULT_LOG_ENV = "TAILOR_FAULT_LOG"
# shares of reward calls that fail, by kind, in this order over [0, 1)
REWARD_FAULTS = (("reward_raises", 0.01), ("reward_nan", 0.01), ("reward_hangs", 0.004))
HANG_S = 3600.0  # longer than any reward timeout: the pool must kill the call


def scheduled(kind: str, step: int) -> bool:
    """Whether ``TAILOR_FAULTS`` asks for fault ``kind`` at ``step``."""
    return f"{kind}@{step}" in os.environ.get(FAULTS_ENV, "").split(",")


def nan_loss(loss: Any, step: int) -> Any:
    """A trainer loss hook (``rl.trainer.hooks``): ``loss`` turned NaN at the steps ``TAILOR_FAULTS`` schedules."""
    return loss * math.nan if scheduled("nan_loss", step) else loss


def record(kind: str, count: int) -> None:
    """Append ``kind`` to the fault log ``count`` times, if there is a log (one short write)."""
    path = os.environ.get(FAULT_LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{kind}\n" * count)


def reward_fault(prompt: str, completion: str) -> str | None:
    """The fault a reward call on this input gets, or None."""
    digest = hashlib.sha256(f"{prompt}\0{completion}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    for kind, share in REWARD_FAULTS:
        if u < share:
            return kind
        u -= share
    return None


def arith_exact_with_faults(prompts: list, completions: list, answer: list, **columns) -> list[float | None]:
    """``arith_exact``, with the faults of ``reward_fault`` injected (and recorded)."""
    kind = reward_fault(str(prompts[0]), str(completions[0]))
    return strike(kind, len(completions)) or arith_exact(prompts, completions, answer, **columns)


def strike(kind: str | None, n: int) -> list[float | None] | None:
    """Fault ``kind`` (one of ``REWARD_FAULTS``, or None: no fault) on a reward call of ``n`` completions, recorded
    as the reward pool counts it (a call that raises or hangs once, NaN once per value): raises, sleeps ``HANG_S``
    (the pool kills the call first) or returns the NaN rewards; None when the call should score as usual."""
    if kind:
        record(kind, n if kind == "reward_nan" else 1)
    if kind == "reward_raises":
        raise RuntimeError("injected reward fault")
    if kind == "reward_nan":
        return [math.nan] * n
    if kind == "reward_hangs":
        time.sleep(HANG_S)
    return None
