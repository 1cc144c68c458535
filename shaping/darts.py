"""DARTS: redundant sampling with adaptive budgets, dual-end selection and tail pruning (papers.md §1).

Selection rule of ``DartsController`` (K = M - L short slots, L long slots):

* A sample that finishes with ``"stop"`` while fewer than K are accepted is kept at once: the first K
  non-truncated finishers stand for the K shortest (all members of a group decode together, so finish
  order follows length; accepting on arrival lets them be streamed before the group ends, as DARTS does).
* When every launched sample has finished or been aborted, the L longest of the remaining non-truncated
  samples are kept and the middle is discarded. Length ties are broken by finish order: of two equal
  lengths the earlier finisher counts as shorter (finish order is unique, so nothing is left to the index).
* L == 0 (tail pruning, SART's early stop): once M non-truncated samples are kept, every sample still
  running is aborted and the group is done.
* ``long_wait`` (optional; not in DARTS, papers.md §1.6 note 7): bounds the wait for the long slots. Once
  the K short slots are full, the deadline is ``ceil(long_wait x`` the K-th short sample's length``)``
  tokens. When a progress report shows a running sample at the deadline, the group closes: the long slots
  keep the L longest non-truncated samples finished so far (outside the short ones); a long slot that no
  finished sample can fill takes the longest running sample, *cut* there: stopped, and kept as a truncated
  sample (its partial response, as a sample that reaches the cap is kept). Every other running sample is
  aborted. Without it the group waits for its last sample.
* Truncated (``"length"``) samples are never kept while non-truncated ones can fill the group; aborted
  ones never are. Shortfall rule: if fewer than M non-truncated samples finish, all of them are kept and
  the group is filled up with truncated samples, shortest first (the same length/finish-order key); the
  number of slots not filled by a non-truncated sample is ``stats()["shortfall"]``. If even that cannot
  reach M (samples aborted from outside), ``kept()`` is shorter than M and the caller should drop the group.

``stats()`` partitions the launched samples once the group is done:
``kept + discarded + aborted + pruned == launched``. ``aborted`` counts early-stop aborts and aborts
that came from outside; ``pruned`` counts aborts requested by a pruning scorer (see ``sart.py``); ``cut`` counts the
kept samples cut at the deadline (the rollout side stops them like aborted ones, and reports them truncated).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from rl.shaping import defaults
from rl.shaping.allocation import allocate, total_budget, uniform
from rl.shaping.length_stats import LengthStats
from rl.shaping.policy import Decision, FinishedSample, GroupPlan, RunningSample
from rl.shaping.spares import worthwhile_launch

PriorityOrder = Literal["none", "longest_first", "shortest_first"]


class DartsController:
    """Dual-end keep/discard/abort decisions for one group (rule in the module docstring)."""

    def __init__(self, plan: GroupPlan, long_wait: float | None = None) -> None:
        if long_wait is not None and long_wait < 1:
            raise ValueError(f"long_wait must be >= 1, got {long_wait}")
        self.plan = plan
        self.long_wait = long_wait
        self._deadline: int | None = None  # tokens: the group closes when a running sample reaches it
        self._short_slots = plan.m_keep - plan.long_slots
        self._running: set[int] = set(range(plan.n_launch))
        self._stopped: dict[int, str] = {}  # index -> "abort" | "prune" | "cut": told to stop (a cut one is kept)
        self._finished: dict[int, tuple[FinishedSample, int]] = {}  # finished while running, with order
        self._late: set[int] = set()  # told to stop, then reported anyway
        self._short: list[int] = []
        self._final: list[int] | None = None
        self._shortfall = 0

    @property
    def done(self) -> bool:
        """Whether the kept set is final."""
        return self._final is not None

    @property
    def prunable(self) -> bool:
        """Whether a progress report could close the long slots now (a deadline is set and not yet reached)."""
        return self._deadline is not None and not self.done

    @property
    def reads_text(self) -> bool:
        """Lengths and finish reasons are all it reads."""
        return False

    def is_running(self, index: int) -> bool:
        """Launched, not finished, and not told to stop."""
        return index in self._running

    def spare(self) -> int:
        """How many running samples may still be stopped while M non-truncated ones can still finish."""
        completed = sum(1 for s, _ in self._finished.values() if s.finish_reason == "stop")
        return max(0, completed + len(self._running) - self.plan.m_keep)

    def on_finish(self, sample: FinishedSample) -> Decision:
        index = sample.index
        if not 0 <= index < self.plan.n_launch:
            raise ValueError(f"sample index {index} outside the group of {self.plan.n_launch}")
        if index in self._finished or index in self._late:
            raise ValueError(f"sample {index} reported finished twice")
        if index in self._stopped:
            self._late.add(index)
            return Decision(done=self.done)
        self._running.discard(index)
        self._finished[index] = (sample, len(self._finished) + len(self._late))
        if sample.finish_reason == "stop" and len(self._short) < self._short_slots:
            self._short.append(index)
            if len(self._short) == self._short_slots and self.long_wait is not None and self.plan.long_slots:
                self._deadline = math.ceil(self.long_wait * sample.length)
        abort: list[int] = []
        if self.plan.long_slots == 0 and len(self._short) == self.plan.m_keep:
            abort = self._stop(self._running, "abort")
        self._finalize_if_settled()
        return Decision(abort=abort, done=self.done)

    def on_progress(self, running: list[RunningSample]) -> Decision:
        if not self.prunable or self._deadline is None:
            return Decision(done=self.done)
        live = [r for r in running if r.index in self._running]
        if max((r.length for r in live), default=0) < self._deadline:
            return Decision()
        return Decision(abort=self._close(live), done=self.done)

    def prune(self, indices: Iterable[int]) -> list[int]:
        """Mark running samples as pruned; returns those that were running (the ones to abort)."""
        pruned = self._stop((i for i in indices if i in self._running), "prune")
        self._finalize_if_settled()
        return pruned

    def kept(self) -> list[int]:
        """The final kept set once done; before that, the short samples already accepted."""
        return sorted(self._final if self._final is not None else self._short)

    def stats(self) -> dict[str, int]:
        kept = set(self.kept())
        external = sum(1 for s, _ in self._finished.values() if s.finish_reason == "abort")
        used = sum(1 for i, (s, _) in self._finished.items() if s.finish_reason != "abort" and i not in kept)
        reasons = list(self._stopped.values())
        return {
            "launched": self.plan.n_launch,
            "kept": len(kept),
            "discarded": used,
            "aborted": reasons.count("abort") + external,
            "pruned": reasons.count("prune"),
            "cut": reasons.count("cut"),
            "shortfall": self._shortfall,
        }

    def _stop(self, indices: Iterable[int], reason: str) -> list[int]:
        stopped = sorted(indices)
        for i in stopped:
            self._running.discard(i)
            self._stopped[i] = reason
        return stopped

    def _rest(self, reason: str) -> list[int]:
        """Finished samples outside the short slots that ended with ``reason``, shortest first (ties: finish order)."""
        short = set(self._short)
        by_length = sorted((s.length, order, i) for i, (s, order) in self._finished.items() if i not in short)
        return [i for _, _, i in by_length if self._finished[i][0].finish_reason == reason]

    def _close(self, live: list[RunningSample]) -> list[int]:
        """Past the deadline: the long slots keep the longest finished candidates, then the longest of ``live``
        (cut); every running sample is stopped. Returns them all (a cut one's request is aborted like the rest)."""
        rest = self._rest("stop")
        long = rest[len(rest) - min(self.plan.long_slots, len(rest)) :]
        by_length = sorted(live, key=lambda r: (-r.length, r.index))
        cut = self._stop((r.index for r in by_length[: self.plan.long_slots - len(long)]), "cut")
        self._final = self._short + long + cut
        self._shortfall = len(cut)
        return sorted(cut + self._stop(self._running, "abort"))

    def _finalize_if_settled(self) -> None:
        if self._final is not None or self._running:
            return
        rest = self._rest("stop")
        long = rest[len(rest) - min(self.plan.long_slots, len(rest)) :]
        need = self.plan.m_keep - len(self._short) - len(long)
        self._final = self._short + long + self._rest("length")[:need]
        self._shortfall = need


class DartsPolicy:
    """DARTS planning: adaptive budgets from the length-std EMA, long slots, tail pruning at the cap.

    ``plan`` is a batch-level decision: call it with a whole batch of prompts (e.g. one training step's
    worth) and hand the plans out one by one; each call counts as one step for the warm-up. During the
    first ``warmup_steps`` calls budgets are uniform and no long slots are used (keep the first M, abort
    the rest), as in the released code. Afterwards every prompt gets ``long_slots`` long slots, except
    prompts allocated the cap ``n_max`` (when ``n_max > n_min``), which get none: tail pruning.

    ``priority`` optionally orders groups in vLLM by the TIE score of the prompt's log-t length model
    (censored at ``max_tokens``, tail weight ``tie_beta``): ``longest_first`` to shorten the makespan,
    ``shortest_first`` to stream finished groups sooner. Unknown prompts use the average model; with no
    history at all every priority is 0.

    ``long_wait`` bounds how long a group's long slots wait (``DartsController``); ``None`` waits for every
    sample, as DARTS does.

    ``spare_gate`` (not in DARTS) lowers a prompt's allocated budget, never below ``n_min``, to the launch its
    own observed lengths say is worth it (``spares.worthwhile_launch``): no spares where its lengths show no
    tail. The budget it frees is not given to other prompts. An unseen prompt is judged by the lengths of all
    prompts (``LengthStats.window``); with no history at all, and during warm-up, budgets stand.
    """

    def __init__(
        self,
        m_keep: int,
        avg_redundancy: float = defaults.AVG_REDUNDANCY,
        n_min: int | None = None,
        n_max: int | None = None,
        long_slots: int = defaults.LONG_SLOTS,
        warmup_steps: int = defaults.WARMUP_STEPS,
        ema_alpha: float = 0.3,
        priority: PriorityOrder = "none",
        max_tokens: int | None = None,
        tie_beta: float = defaults.TIE_BETA,
        long_wait: float | None = None,
        spare_gate: bool = defaults.SPARE_GATE,
    ) -> None:
        self.m_keep = m_keep
        self.avg_redundancy = avg_redundancy
        self.n_min = round(defaults.MIN_REDUNDANCY * m_keep) if n_min is None else n_min
        self.n_max = round(defaults.MAX_REDUNDANCY * m_keep) if n_max is None else n_max
        if not m_keep <= self.n_min <= self.n_max:
            raise ValueError(f"need m_keep <= n_min <= n_max, got {m_keep}, {self.n_min}, {self.n_max}")
        if not 0 <= long_slots <= m_keep:
            raise ValueError(f"long_slots must be in [0, m_keep], got {long_slots}")
        if priority != "none" and max_tokens is None:
            raise ValueError("a TIE priority needs max_tokens (the censoring cap)")
        if long_wait is not None and long_wait < 1:
            raise ValueError(f"long_wait must be >= 1, got {long_wait}")
        self.long_slots = long_slots
        self.warmup_steps = warmup_steps
        self.priority = priority
        self.max_tokens = max_tokens
        self.tie_beta = tie_beta
        self.long_wait = long_wait
        self.spare_gate = spare_gate
        self.lengths = LengthStats(alpha=ema_alpha)
        self.steps = 0

    def plan(self, prompt_ids: list[str]) -> list[GroupPlan]:
        if not prompt_ids:
            return []
        total = total_budget(len(prompt_ids), self.m_keep, self.avg_redundancy, self.n_min, self.n_max)
        warmup = self.steps < self.warmup_steps
        self.steps += 1
        if warmup:
            budgets = uniform(len(prompt_ids), total)
        else:
            budgets = allocate([self.lengths.std(p) or 0.0 for p in prompt_ids], total, self.n_min, self.n_max)
        plans = []
        if self.spare_gate and not warmup:
            budgets = [self._worthwhile(p, n) for p, n in zip(prompt_ids, budgets, strict=True)]
        for prompt_id, n in zip(prompt_ids, budgets, strict=True):
            at_cap = n == self.n_max and self.n_max > self.n_min
            long_slots = 0 if warmup or at_cap else self.long_slots
            plans.append(GroupPlan(prompt_id, n, self.m_keep, long_slots, self._priority(prompt_id)))
        return plans

    def controller(self, plan: GroupPlan) -> DartsController:
        return DartsController(plan, self.long_wait)

    def observe(self, prompt_id: str, kept_lengths: list[int]) -> None:
        self.lengths.observe(prompt_id, kept_lengths)

    def _worthwhile(self, prompt_id: str, budget: int) -> int:
        if budget <= self.n_min:
            return budget
        return worthwhile_launch(self.lengths.window(prompt_id), self.m_keep, self.n_min, budget)

    def _priority(self, prompt_id: str) -> int:
        model = self.lengths.log_t(prompt_id) if self.priority != "none" else None
        if model is None or self.max_tokens is None:
            return 0
        score = math.floor(model.tie(self.max_tokens, self.tie_beta) + 0.5)
        return -score if self.priority == "longest_first" else score
