"""The group runner: decisions on the token clock (the same on a fast and a slow engine), texts decoded only where
read, and with an async model scorer: batched scores per look, the first completion scored, generation going on
while a call is pending, and a failing scorer leaving the group unpruned."""

from __future__ import annotations

import asyncio

from rl.rollout.engine import RequestTrace, SamplingSpec
from rl.rollout.group_runner import OnOutput, run_group
from rl.shaping.darts import DartsController
from rl.shaping.policy import GroupPlan
from rl.shaping.sart import SartController
from rl.shaping.scorers import ExternalScorer


class FakeEngine:
    """Steps like vLLM's engine: every ``step_s`` one step appends a token to each running sample, all at once, so
    the samples never drift apart however late the event loop runs. Sample ``i`` emits ``i`` as its tokens and stops
    at ``lengths[i]`` (``script``); an abort ends a request at once, one made before it starts too."""

    version = 0

    def __init__(self, lengths: list[int], step_s: float = 0.005) -> None:
        self.lengths = lengths
        self.step_s = step_s
        self.aborted: set[str] = set()
        self.traces: list[RequestTrace] = []
        self.streamed: list[bool] = []  # each request's ``stream`` argument
        self.running: dict[str, tuple[RequestTrace, list[int], OnOutput | None, asyncio.Future]] = {}
        self.stepper: asyncio.Task | None = None

    def script(self, trace: RequestTrace) -> list[int]:
        """The ids request ``trace`` streams unless aborted."""
        index = int(trace.request_id.rsplit("-", 1)[1])
        return [index] * self.lengths[index]

    async def generate(self, trace: RequestTrace, prompt_tokens, sampling, priority=0, on_output=None) -> RequestTrace:
        self.traces.append(trace)
        self.streamed.append(on_output is not None)
        script = self.script(trace)
        if trace.request_id in self.aborted or not script:
            trace.finish_reason = "abort" if trace.request_id in self.aborted else "stop"
            return trace
        done = asyncio.get_running_loop().create_future()
        self.running[trace.request_id] = (trace, script, on_output, done)
        if self.stepper is None or self.stepper.done():
            self.stepper = asyncio.create_task(self.step_all())
        return await done

    async def step_all(self) -> None:
        while self.running:
            await asyncio.sleep(self.step_s)
            for request_id, (trace, script, on_output, _) in list(self.running.items()):
                trace.tokens.append(script[len(trace.tokens)])
                trace.logprobs.append(-1.0)
                if on_output is not None:
                    on_output(trace)
                if len(trace.tokens) == len(script):
                    self.finish(request_id, "stop")

    def finish(self, request_id: str, reason: str) -> None:
        trace, _, _, done = self.running.pop(request_id)
        trace.finish_reason = reason
        done.set_result(trace)

    async def abort(self, request_ids: list[str]) -> None:
        self.aborted.update(request_ids)
        for request_id in request_ids:
            if request_id in self.running:
                self.finish(request_id, "abort")

    def generated(self) -> int:
        return sum(len(t.tokens) for t in self.traces)


def decode(tokens: list[int]) -> str:
    return f"{tokens[0]}:{len(tokens)}" if tokens else ""


BAD = {0, 1}  # samples the fake scorer rates low


class SlowScorer:
    """Scores texts by sample (``BAD`` ones -5, the rest -0.5) after ``delay_s``; records calls, the answered ones
    and progress."""

    def __init__(self, engine: FakeEngine, delay_s: float = 0.03) -> None:
        self.engine = engine
        self.delay_s = delay_s
        self.calls: list[list[str]] = []
        self.answered: list[list[str]] = []  # calls that returned (one pending when its group ends is cancelled)
        self.generated_during: list[int] = []

    async def __call__(self, texts: list[str]) -> list[float]:
        self.calls.append(texts)
        before = self.engine.generated()
        await asyncio.sleep(self.delay_s)
        self.generated_during.append(self.engine.generated() - before)
        self.answered.append(texts)
        return [-5.0 if int(t.split(":")[0]) in BAD else -0.5 for t in texts]


def sart_group(engine, score_texts, n=6, m=2):
    controller = SartController(DartsController(GroupPlan("p", n, m)), ExternalScorer(), alpha=-1.0, beta=2)
    run = run_group(engine, "g", [1, 2], SamplingSpec(max_tokens=400), controller, decode, 2, score_texts)
    return asyncio.run(run)


def test_running_samples_are_scored_in_batches_and_pruned_without_stalling_generation():
    engine = FakeEngine([400, 400, 20, 24, 400, 400])
    scorer = SlowScorer(engine)
    result = sart_group(engine, scorer)
    assert [s.index for s in result.samples] == [2, 3]
    assert [s.text for s in result.samples] == ["2:20", "3:24"]
    stats = result.controller_stats
    assert stats["pruned"] == 2 and stats["aborted"] == 2 and stats["kept"] == 2
    assert result.finish_reasons[:2] == ["abort", "abort"] and max(result.all_lengths[:2]) < 100
    # the first tick scores every running sample in one call and prunes the two bad ones (beta = 2)
    assert len(scorer.calls[0]) == 6
    # the first completion is scored alone, before the controller sets phase 2's threshold from it
    assert ["2:20"] in scorer.calls
    assert result.scored == sum(len(c) for c in scorer.answered) and result.score_failures == 0
    # every scoring call was awaited while the engine kept generating
    assert all(n > 0 for n in scorer.generated_during)
    assert engine.streamed == [True] * 6  # the ticks read running samples: every request streams its tokens


def test_a_group_without_progress_ticks_asks_for_unstreamed_requests():
    engine = FakeEngine([30, 12, 20, 40])
    run = run_group(engine, "g", [1, 2], SamplingSpec(max_tokens=400), DartsController(GroupPlan("p", 4, 2)), decode)
    result = asyncio.run(run)
    assert engine.streamed == [False] * 4  # nothing reads a running trace: one output per request is enough
    assert [s.index for s in result.samples] == [1, 2]
    assert result.finish_reasons == ["abort", "stop", "stop", "abort"]


def test_a_group_with_no_spare_is_not_streamed_though_its_controller_watches():
    """Launched = M: no controller may stop a running sample (M must still be kept), so the ticks would have nothing
    to act on and the requests go unstreamed; with one spare they stream."""

    def group(n: int) -> tuple[FakeEngine, object]:
        engine = FakeEngine([30, 12, 20, 40, 60][:n])
        base = DartsController(GroupPlan("p", n, 4, long_slots=1), long_wait=1.5)
        controller = SartController(base, ExternalScorer(), alpha=-1.0, beta=2)
        run = run_group(engine, "g", [1, 2], SamplingSpec(max_tokens=400), controller, decode, 2, SlowScorer(engine))
        return engine, asyncio.run(run)

    engine, result = group(4)
    assert engine.streamed == [False] * 4
    assert [s.index for s in result.samples] == [0, 1, 2, 3]  # the scorer rates 0 and 1 low: none could be pruned
    assert group(5)[0].streamed == [True] * 5


def test_a_failing_scorer_leaves_the_group_unpruned_but_complete():
    engine = FakeEngine([400, 400, 20, 24, 400, 400])

    async def broken(texts: list[str]) -> list[float]:
        raise RuntimeError("scorer gone")

    result = sart_group(engine, broken)
    assert [s.index for s in result.samples] == [2, 3]
    assert result.controller_stats["pruned"] == 0 and result.controller_stats["aborted"] == 4
    assert result.score_failures >= 2 and result.scored == 0


class CountingDecode:
    """``decode`` that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, tokens: list[int]) -> str:
        self.calls += 1
        return decode(tokens)


def deadline_group(step_s: float, every: int = 4) -> tuple[FakeEngine, object, CountingDecode]:
    """DARTS with one long slot and long_wait 1.5: short slots filled at 10 and 12 tokens, a long candidate at 15,
    the deadline at 18 tokens."""
    engine = FakeEngine([10, 12, 200, 200, 15, 200], step_s=step_s)
    controller = DartsController(GroupPlan("p", 6, 3, long_slots=1), long_wait=1.5)
    counting = CountingDecode()
    run = run_group(engine, "g", [1, 2], SamplingSpec(max_tokens=400), controller, counting, every)
    return engine, asyncio.run(run), counting


def test_the_long_slot_deadline_acts_on_the_token_clock_whatever_the_engine_speed():
    fast, fast_result, _ = deadline_group(step_s=0.0005)
    slow, slow_result, _ = deadline_group(step_s=0.004)
    for result in (fast_result, slow_result):
        assert [s.index for s in result.samples] == [0, 1, 4]
        assert result.finish_reasons == ["stop", "stop", "abort", "abort", "stop", "abort"]
    # the doomed samples are stopped at the first look past the deadline (18): the look at 20 tokens (k = 4), on an
    # engine eight times slower too (a 0.5 s wall-clock tick would let the fast one run to 200)
    doomed = [2, 3, 5]
    assert [fast_result.all_lengths[i] for i in doomed] == [20, 20, 20]
    assert [slow_result.all_lengths[i] for i in doomed] == [20, 20, 20]
    assert fast.streamed == [True] * 6


def test_a_long_slot_no_finisher_fills_by_the_deadline_keeps_a_cut_sample_reported_truncated():
    engine = FakeEngine([10, 12, 200, 200, 300, 200], step_s=0.0005)
    controller = DartsController(GroupPlan("p", 6, 3, long_slots=1), long_wait=1.5)  # deadline 18 tokens
    result = asyncio.run(run_group(engine, "g", [1, 2], SamplingSpec(max_tokens=400), controller, decode, 4))
    assert [s.index for s in result.samples] == [0, 1, 2]  # the running ones are equally long: the lowest index
    cut = result.samples[2]
    assert cut.finish_reason == "length" and cut.truncated
    assert 18 <= len(cut.tokens) == len(cut.logprobs) <= 18 + 4 + 1  # its partial response, stopped at the look
    assert cut.text == f"2:{len(cut.tokens)}"
    assert result.finish_reasons == ["stop", "stop", "length", "abort", "abort", "abort"]
    assert result.controller_stats["cut"] == 1 and result.controller_stats["aborted"] == 3
    assert [fate for *_, fate in result.timeline] == ["kept", "kept", "kept", "aborted", "aborted", "aborted"]


def test_a_controller_that_reads_no_text_gets_none_decoded_but_kept_samples_are():
    _, result, counting = deadline_group(step_s=0.0005)
    assert counting.calls == 3  # the three kept samples, for their training text; no look or finish decoded one
    assert [s.text for s in result.samples] == ["0:10", "1:12", "4:15"]
