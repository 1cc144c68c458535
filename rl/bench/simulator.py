"""A simulated vLLM engine on a discrete clock, driving the real shaping controllers with natural sample lengths.

The engine model and its assumptions:

* **One engine, decode steps.** Requests are admitted first come, first served, at the start of a step, while fewer
  than ``max_num_seqs`` sequences run; a waiting request enters when a running one leaves. No preemption, no KV-cache
  limit, no priorities. The admitting step gives a request its first token; its prefill costs ``prefill_s`` of device
  time in that step (0 by default: prefill ignored).
* **Tokens.** Every running sequence gains one token per step. A sample runs to its natural length and ends with its
  natural finish reason unless its controller aborts it; an aborted sample keeps what it generated up to the step the
  abort was decided in (a waiting one generated nothing).
* **Step time** ``max(g(b) + prefill_s·admitted + context_s·context, host)``: ``g(b)`` the device's step time with
  ``b`` running sequences (a ``DecodeProfile``'s per-token latency, or ``LinearStep``), ``context`` the tokens the
  running sequences have generated so far (attention reads them: what a profile measured at short outputs leaves
  out), host the CPU's work for the step (``HostCost``); vLLM's async scheduling overlaps the two, so the slower sets
  the pace.
* **Outputs.** A streamed request emits an output at its first token, whenever ``stream_interval`` tokens have
  accumulated since its last one, and at its end (vLLM's ``stream_interval`` rule); an unstreamed one only at its end.
  The frontend knows a streamed request's length as of its last output.
* **Frontend lag.** What happens in step ``s`` (finishes, outputs) reaches the controllers at the end of step
  ``s + lag_steps``; the aborts they decide then take effect from the next step and cost ``per_abort_s`` each in the
  step they are decided in. When nothing runs, the frontend catches up at once.
* **Looks** (``Looks``), as ``run_group`` makes them, only while the controller is ``prunable``: on the token clock
  each time the longest live sample of the group, as streamed, passes a multiple of ``every_tokens``; on the wall clock
  every ``every_s`` simulated seconds from the group's submission (a look due during a step sees that step's end).
  There are no texts and no scores, so a scorer cannot prune; SART's early stop and DARTS's deadline still act.
* **A group is done** when each of its samples has finished or been aborted and its controller has seen it.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rl.shaping.policy import FinishedSample, GroupController, RunningSample, ShapingPolicy

StepTime = Callable[[float], float]  # device seconds of one decode step with b running sequences


@dataclass(frozen=True)
class NaturalSample:
    """A sample's length and finish reason had nothing stopped it: ``"stop"`` below the cap, ``"length"`` at it."""

    length: int
    finish_reason: str

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"a natural sample generates at least one token, got {self.length}")
        if self.finish_reason not in ("stop", "length"):
            raise ValueError(f"a natural finish is 'stop' or 'length', got {self.finish_reason!r}")


Pool = Sequence[NaturalSample]  # one prompt's natural samples


def pools_from_lengths(lengths: Sequence[Sequence[int]], max_tokens: int) -> list[list[NaturalSample]]:
    """Pools from plain lengths per prompt (a synthetic length model): those at ``max_tokens`` are truncated."""
    return [[NaturalSample(n, "length" if n >= max_tokens else "stop") for n in prompt] for prompt in lengths]


@dataclass(frozen=True)
class LinearStep:
    """Device step time ``a + c·b`` (seconds; ``b`` running sequences): a fitted line instead of a profile."""

    a: float
    c: float

    def __call__(self, b: float) -> float:
        return self.a + self.c * b


@dataclass(frozen=True)
class HostCost:
    """Host seconds of one step: ``step_s + per_seq_s·b + per_output_s·outputs + per_abort_s·aborts``.

    ``step_s`` (h0) is the scheduler's and output loop's fixed work per step, ``per_seq_s`` (h_req) the per-running-
    sequence work (input preparation, sampling bookkeeping), ``per_output_s`` (h_out) one output streamed to the
    frontend (a RequestOutput, the consumer's wake-up and append), ``per_abort_s`` (h_abort) one aborted request.
    All 0 by default: the device alone sets the pace.
    """

    step_s: float = 0.0
    per_seq_s: float = 0.0
    per_output_s: float = 0.0
    per_abort_s: float = 0.0

    def __call__(self, running: int, outputs: int, aborts: int = 0) -> float:
        return self.step_s + self.per_seq_s * running + self.per_output_s * outputs + self.per_abort_s * aborts


@dataclass(frozen=True)
class EngineModel:
    """The simulated engine: device step time, host cost, admission cap, stream interval, frontend lag, prefill and
    context cost."""

    step_s: StepTime
    host: HostCost = HostCost()
    max_num_seqs: int = 128  # vLLM's default
    stream_interval: int = 1
    lag_steps: int = 0
    prefill_s: float = 0.0  # device seconds per request admitted in a step
    context_s: float = 0.0  # device seconds per step for each token the running sequences have generated so far

    def __post_init__(self) -> None:
        if min(self.max_num_seqs, self.stream_interval) < 1 or min(self.lag_steps, self.prefill_s, self.context_s) < 0:
            raise ValueError("need max_num_seqs, stream_interval >= 1 and lag_steps, prefill_s, context_s >= 0")

    def step_time(self, running: int, outputs: int, aborts: int = 0, admitted: int = 0, context: int = 0) -> float:
        """Seconds of one step with ``running`` sequences (``admitted`` of them new, ``context`` tokens generated
        by them so far), ``outputs`` streamed outputs and ``aborts`` aborts."""
        device = self.step_s(running) + self.prefill_s * admitted + self.context_s * context
        return max(device, self.host(running, outputs, aborts))


@dataclass(frozen=True)
class Looks:
    """When a watching controller is shown its running samples: every ``every_tokens`` of the group's longest
    (the token clock) or every ``every_s`` simulated seconds (the wall clock, as the old rollout code did)."""

    every_tokens: int = 0
    every_s: float = 0.0

    def __post_init__(self) -> None:
        if (self.every_tokens > 0) == (self.every_s > 0) or self.every_tokens < 0 or self.every_s < 0:
            raise ValueError("looks need exactly one of every_tokens > 0 and every_s > 0")


@dataclass(frozen=True)
class GroupOutcome:
    """One simulated group: when it was submitted and done, what it generated and kept."""

    prompt_id: str
    submitted_s: float
    done_s: float
    launched: int
    aborted: int
    generated_tokens: int
    kept_lengths: list[int]


@dataclass
class SimResult:
    """A simulated run: its clock, decode steps, tokens, peak running sequences and admission waits, per group."""

    seconds: float = 0.0
    steps: int = 0
    max_running: int = 0
    waited: int = 0  # requests not admitted at the first step after their submission
    groups: list[GroupOutcome] = field(default_factory=list)

    @property
    def generated_tokens(self) -> int:
        return sum(g.generated_tokens for g in self.groups)

    @property
    def kept_tokens(self) -> int:
        return sum(sum(g.kept_lengths) for g in self.groups)

    @property
    def launched(self) -> int:
        return sum(g.launched for g in self.groups)

    @property
    def aborted(self) -> int:
        return sum(g.aborted for g in self.groups)


def pick(pool: Pool, n: int, rng: random.Random | None = None, resample: bool = False) -> list[NaturalSample]:
    """``n`` samples of ``pool``: the pool in order (shuffled with ``rng``), then draws with replacement (with ``rng``,
    else seeded 0). With ``resample``, ``n`` draws with replacement from the start (a bootstrap): as a fresh pass
    draws its samples, where ``n`` of the pool without replacement varies less the closer ``n`` is to its size."""
    if not pool:
        raise ValueError("an empty pool of natural samples")
    draw = rng or random.Random(0)
    first = [] if resample else list(pool)
    if rng is not None:
        rng.shuffle(first)
    return first[:n] + [draw.choice(pool) for _ in range(n - len(first))]


def simulate_batch(
    policy: ShapingPolicy,
    pools: Sequence[Pool],
    engine: EngineModel,
    looks: Looks | None = None,
    streamed: bool | None = None,
    rng: random.Random | None = None,
    resample: bool = False,
) -> SimResult:
    """One batch, every group submitted at once (as ``rl bench rollout``'s pass): prompt ``g`` is ``str(g)``, its
    samples come from ``pools[g]`` (``pick``, ``resample`` as there). ``looks`` None: controllers see finishes only.
    ``streamed``: whether requests stream their outputs (default: when looked at). The policy ``observe``s every group
    afterwards."""
    prompt_ids = [str(g) for g in range(len(pools))]
    sim = _Engine(engine, looks, looks is not None if streamed is None else streamed)
    for plan in policy.plan(prompt_ids):
        samples = pick(pools[int(plan.prompt_id)], plan.n_launch, rng, resample)
        sim.submit(_Group(plan.prompt_id, policy.controller(plan), samples, sim.step, sim.now, looks))
    result = sim.run(lambda _: None)
    for outcome in result.groups:
        policy.observe(outcome.prompt_id, outcome.kept_lengths)
    return result


def simulate_steady(
    policy: ShapingPolicy,
    pools: Sequence[Pool],
    engine: EngineModel,
    batches: int,
    in_flight: int,
    looks: Looks | None = None,
    streamed: bool | None = None,
    rng: random.Random | None = None,
) -> SimResult:
    """``batches`` batches of every prompt back to back with ``in_flight`` groups running (a new group is submitted
    as one is done, as an asynchronous trainer's rollout side does). A batch is planned when its first group is
    submitted; the policy ``observe``s each group as it is done. ``steady_groups_per_s`` reads the result."""
    if batches < 1 or in_flight < 1:
        raise ValueError("need batches >= 1 and in_flight >= 1")
    rng = rng or random.Random(0)
    prompt_ids = [str(g) for g in range(len(pools))]
    plans = itertools.chain.from_iterable(policy.plan(prompt_ids) for _ in range(batches))  # lazy: one batch at a time
    sim = _Engine(engine, looks, looks is not None if streamed is None else streamed)

    def submit_next() -> None:
        plan = next(plans, None)
        if plan is not None:
            samples = pick(pools[int(plan.prompt_id)], plan.n_launch, rng)
            sim.submit(_Group(plan.prompt_id, policy.controller(plan), samples, sim.step, sim.now, looks))

    def done(outcome: GroupOutcome) -> None:
        policy.observe(outcome.prompt_id, outcome.kept_lengths)
        submit_next()

    for _ in range(in_flight):
        submit_next()
    return sim.run(done)


def steady_groups_per_s(result: SimResult, in_flight: int) -> float:
    """Groups done per second while the pipeline is full: between the ``in_flight``-th group done and the last
    group's submission (the ramp-up and the drain left out); over the whole run if that window holds none."""
    done = sorted(g.done_s for g in result.groups)
    if not done:
        return 0.0
    start = done[min(in_flight, len(done)) - 1]
    end = max(g.submitted_s for g in result.groups)
    inside = sum(start < t <= end for t in done)
    if end > start and inside:
        return inside / (end - start)
    return len(done) / result.seconds if result.seconds > 0 else math.inf


@dataclass(eq=False)
class _Request:
    """One sample in the engine. ``end``: the step of its last token (natural) or of its abort."""

    group: _Group
    index: int
    natural: NaturalSample
    submitted: int  # the first step it could run in
    start: int | None = None  # the step that admitted it
    end: int | None = None
    aborted: bool = False
    end_seen: bool = False  # the controller has seen its end

    @property
    def length(self) -> int:
        """Tokens generated once it has ended."""
        if self.start is None or self.end is None:
            return 0
        return self.end - self.start + 1

    def ended_by(self, step: int) -> bool:
        return self.end is not None and self.end <= step

    def seen_at(self, step: int, interval: int) -> int:
        """Its length as streamed to the frontend after ``step`` (outputs at tokens 1, 1 + k, 1 + 2k, ...)."""
        if self.start is None or self.start > step:
            return 0
        return 1 + (step - self.start) // interval * interval


class _Group:
    """One group's samples, its controller and what the frontend knows of it (``run_group``'s side)."""

    def __init__(
        self,
        prompt_id: str,
        controller: GroupController,
        samples: list[NaturalSample],
        step: int,
        now: float,
        looks: Looks | None,
    ) -> None:
        self.prompt_id = prompt_id
        self.controller = controller
        self.requests = [_Request(self, i, s, step) for i, s in enumerate(samples)]
        self.submitted_s = now
        self.looks = looks
        self.admitted: list[_Request] = []  # in admission order, i.e. by start step
        self.unseen = len(samples)  # ends the controller has not seen yet
        self.told: set[int] = set()  # indices whose abort was sent
        self._lead = 0  # admitted[: _lead] are dead for every later look
        self.next_look_tokens = looks.every_tokens if looks else 0
        self.next_look_s = now + looks.every_s if looks else math.inf

    def live_at(self, r: _Request, step: int) -> bool:
        """Live in the frontend's view after ``step``: not ended by then, no abort sent."""
        return r.index not in self.told and not r.ended_by(step)  # an aborted one was told

    def token_clock(self, step: int, interval: int) -> int:
        """The longest live sample's streamed length after ``step`` (the earliest admitted live one)."""
        while self._lead < len(self.admitted) and not self.live_at(self.admitted[self._lead], step):
            self._lead += 1
        return self.admitted[self._lead].seen_at(step, interval) if self._lead < len(self.admitted) else 0

    def running(self, step: int, interval: int) -> list[RunningSample]:
        return [RunningSample(r.index, r.seen_at(step, interval)) for r in self.requests if self.live_at(r, step)]

    def outcome(self, done_s: float) -> GroupOutcome:
        indices = self.controller.kept()
        kept = [self.requests[i].length for i in indices]
        return GroupOutcome(
            prompt_id=self.prompt_id,
            submitted_s=self.submitted_s,
            done_s=done_s,
            launched=len(self.requests),
            aborted=sum(r.aborted for r in self.requests if r.index not in indices),  # a cut one is kept
            generated_tokens=sum(r.length for r in self.requests),
            kept_lengths=kept,
        )


class _Engine:
    """The step loop: admission, tokens, outputs, lagged delivery of ends and looks to the controllers."""

    def __init__(self, model: EngineModel, looks: Looks | None, streamed: bool) -> None:
        self.model = model
        self.looks = looks
        self.streamed = streamed
        self.step = 0  # the next step to run
        self.now = 0.0
        self.result = SimResult()
        self._waiting: deque[_Request] = deque()
        self._running = 0
        self._start_sum = 0  # the start steps of the running requests, summed: their context is running·s - this
        self._ends: list[tuple[int, int, _Request]] = []  # heap of natural ends: (step, admission order, request)
        self._order = itertools.count()
        self._emitting = [0] * model.stream_interval  # running streamed requests by start step mod k
        self._events: dict[int, list[_Request]] = {}  # step -> requests that ended in it
        self._delivered = -1  # the last step the frontend has caught up with
        self._groups: list[_Group] = []  # not done yet
        self._done: list[_Group] = []  # done in the current delivery

    def submit(self, group: _Group) -> None:
        self._groups.append(group)
        self._waiting.extend(group.requests)

    def run(self, on_done: Callable[[GroupOutcome], None]) -> SimResult:
        """Step until every group (including those ``on_done`` submits) is done."""
        while self._groups:
            if self._running or self._waiting:
                self._step()
            else:  # idle engine: the frontend catches up at once
                self._deliver(self.step - 1, self.now)
                if not self._done and not self._waiting:
                    raise RuntimeError("simulated groups stuck: nothing runs and nothing is pending")
            for group in self._done:
                self._groups.remove(group)
                outcome = group.outcome(self.now)
                self.result.groups.append(outcome)
                on_done(outcome)
            self._done = []
        self.result.seconds = self.now
        self.result.steps = self.step
        return self.result

    def _step(self) -> None:
        s, k = self.step, self.model.stream_interval
        admitted = self._admit(s)
        running, context = self._running, self._running * s - self._start_sum
        outputs = self._emitting[s % k] if self.streamed else 0
        while self._ends and self._ends[0][0] == s:
            r = heapq.heappop(self._ends)[2]
            if r.aborted:
                continue
            self._leave(r)
            if not self.streamed or (s - (r.start or 0)) % k:  # its final output, unless a regular one is it
                outputs += 1
            self._events.setdefault(s, []).append(r)
        self.result.max_running = max(self.result.max_running, running)
        step_time = functools.partial(self.model.step_time, running, outputs, admitted=admitted, context=context)
        aborts = self._deliver(s - self.model.lag_steps, self.now + step_time(0))
        self.now += step_time(aborts)
        self.step += 1

    def _admit(self, s: int) -> int:
        """Admit waiting requests first come, first served, up to the cap; returns how many."""
        admitted = 0
        while self._waiting and self._running < self.model.max_num_seqs:
            r = self._waiting.popleft()
            if r.aborted:
                continue
            r.start = s
            r.group.admitted.append(r)
            self.result.waited += s > r.submitted
            self._running += 1
            self._start_sum += s
            if self.streamed:
                self._emitting[s % self.model.stream_interval] += 1
            heapq.heappush(self._ends, (s + r.natural.length - 1, next(self._order), r))
            r.end = s + r.natural.length - 1
            admitted += 1
        return admitted

    def _leave(self, r: _Request) -> None:
        self._running -= 1
        self._start_sum -= r.start or 0
        if self.streamed and r.start is not None:
            self._emitting[r.start % self.model.stream_interval] -= 1

    def _deliver(self, upto: int, now: float) -> int:
        """The frontend takes in steps up to ``upto``: ends (then token-clock looks) step by step, then wall-clock
        looks at ``now``. Returns the aborts sent."""
        aborts = 0
        token_clock = self.looks is not None and self.looks.every_tokens > 0
        for s in range(self._delivered + 1, upto + 1):
            aborts += self._drain(s)
            if token_clock:
                aborts += sum(self._token_look(g, s) for g in list(self._groups))
                aborts += self._drain(s)  # with no lag, what the looks aborted ends in this very step
        self._delivered = max(self._delivered, upto)
        if self.looks is not None and self.looks.every_s > 0:
            aborts += sum(self._wall_look(g, upto, now) for g in list(self._groups))
            aborts += self._drain(upto)
        return aborts

    def _drain(self, s: int) -> int:
        """Show the controllers the ends of step ``s``, including those of the aborts they decide meanwhile."""
        aborts = 0
        events = self._events.get(s, [])
        while events:
            aborts += self._finish(events.pop(0))
        self._events.pop(s, None)
        return aborts

    def _finish(self, r: _Request) -> int:
        reason = "abort" if r.aborted else r.natural.finish_reason
        r.end_seen = True
        decision = r.group.controller.on_finish(FinishedSample(r.index, r.length, reason))  # type: ignore[arg-type]
        r.group.unseen -= 1
        aborts = self._abort(r.group, decision.abort)
        if r.group.unseen == 0:
            self._done.append(r.group)
        return aborts

    def _token_look(self, group: _Group, s: int) -> int:
        """``run_group``'s token clock: a look each time the longest live sample passes a multiple of k tokens."""
        if group in self._done or group.looks is None:
            return 0
        clock = group.token_clock(s, self.model.stream_interval)
        if clock < group.next_look_tokens:
            return 0
        every = group.looks.every_tokens
        group.next_look_tokens = (clock // every + 1) * every
        return self._look(group, s)

    def _wall_look(self, group: _Group, s: int, now: float) -> int:
        if group in self._done or group.next_look_s > now or group.looks is None:
            return 0
        every = group.looks.every_s
        group.next_look_s += every
        if group.next_look_s <= now:  # a step longer than the period: the next look is a period after this one
            group.next_look_s = now + every
        return self._look(group, s)

    def _look(self, group: _Group, s: int) -> int:
        if not group.controller.prunable:
            return 0
        return self._abort(group, group.controller.on_progress(group.running(s, self.model.stream_interval)).abort)

    def _abort(self, group: _Group, indices: list[int]) -> int:
        """Send the aborts the frontend would (not sent before, end not seen); stop those still in the engine."""
        sent = 0
        s = self.step  # decided at the end of the current step
        for i in indices:
            r = group.requests[i]
            if i in group.told or r.end_seen:
                continue
            group.told.add(i)
            sent += 1
            if r.ended_by(s):
                continue  # ended in the engine; its end is still on its way to the frontend
            if r.start is not None:
                self._leave(r)
            r.aborted, r.end = True, s
            self._events.setdefault(s, []).append(r)
        return sent
