"""The reward of the soak in the tests: ``arith_exact``, except that the first training groups' calls raise, return
NaN and hang, one kind each, so that a soak of a few dozen steps strikes every reward fault (``rl.bench.faults``
strikes a fixed share of calls: 2.4%, too few to count on in a short run). The fault log (``TAILOR_FAULT_LOG``) says
which kinds have struck; evaluation calls (many prompts) and preflight's check (the answer as every completion) are
never struck, as neither is counted among a run's reward failures."""

from __future__ import annotations

import os
from pathlib import Path

from rl.bench.faults import FAULT_LOG_ENV, REWARD_FAULTS, strike
from rl.rewards.math import arith_exact


def each_fault_once(prompts: list, completions: list, answer: list, **columns) -> list[float | None]:
    struck = set(Path(os.environ[FAULT_LOG_ENV]).read_text().split())
    # a sampled group: one prompt, completions that differ (preflight's call repeats the answer as each completion)
    training_group = len({str(p) for p in prompts}) == 1 and len({str(c) for c in completions}) > 1
    kind = next((k for k, _ in REWARD_FAULTS if k not in struck), None) if training_group else None
    return strike(kind, len(completions)) or arith_exact(prompts, completions, answer, **columns)
