"""The group runner with an async model scorer: batched scores per tick, the first completion scored,
generation going on while a call is pending, and a failing scorer leaving the group unpruned."""

from __future__ import annotations

import asyncio

from rl.rollout.group_runner import run_group
from rl.rollout.vllm_adapter import RequestTrace, SamplingSpec
from rl.shaping.darts import DartsController
from rl.shaping.policy import GroupPlan
from rl.shaping.sart import SartController
from rl.shaping.scorers import ExternalScorer


class FakeEngine:
    """One token per sample every ``step_s``; sample ``i`` emits ``i`` as its tokens and stops at ``lengths[i]``."""

    version = 0

    def __init__(self, lengths: list[int], step_s: float = 0.005) -> None:
        self.lengths = lengths
        self.step_s = step_s
        self.aborted: set[str] = set()
        self.traces: list[RequestTrace] = []
        self.streamed: list[bool] = []  # each request's ``stream`` argument

    async def generate(self, trace: RequestTrace, prompt_tokens, sampling, priority=0, stream=True) -> RequestTrace:
        self.traces.append(trace)
        self.streamed.append(stream)
        index = int(trace.request_id.rsplit("-", 1)[1])
        while len(trace.tokens) < self.lengths[index] and trace.request_id not in self.aborted:
            await asyncio.sleep(self.step_s)
            trace.tokens.append(index)
            trace.logprobs.append(-1.0)
        trace.finish_reason = "abort" if trace.request_id in self.aborted else "stop"
        return trace

    async def abort(self, request_ids: list[str]) -> None:
        self.aborted.update(request_ids)

    def generated(self) -> int:
        return sum(len(t.tokens) for t in self.traces)


def decode(tokens: list[int]) -> str:
    return f"{tokens[0]}:{len(tokens)}" if tokens else ""


BAD = {0, 1}  # samples the fake scorer rates low


class SlowScorer:
    """Scores texts by sample (``BAD`` ones -5, the rest -0.5) after ``delay_s``; records calls and progress."""

    def __init__(self, engine: FakeEngine, delay_s: float = 0.03) -> None:
        self.engine = engine
        self.delay_s = delay_s
        self.calls: list[list[str]] = []
        self.generated_during: list[int] = []

    async def __call__(self, texts: list[str]) -> list[float]:
        self.calls.append(texts)
        before = self.engine.generated()
        await asyncio.sleep(self.delay_s)
        self.generated_during.append(self.engine.generated() - before)
        return [-5.0 if int(t.split(":")[0]) in BAD else -0.5 for t in texts]


def sart_group(engine, score_texts, n=6, m=2):
    controller = SartController(DartsController(GroupPlan("p", n, m)), ExternalScorer(), alpha=-1.0, beta=2)
    run = run_group(engine, "g", [1, 2], SamplingSpec(max_tokens=400), controller, decode, 0.01, score_texts)
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
    assert result.scored == sum(len(c) for c in scorer.calls) and result.score_failures == 0
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


def test_a_failing_scorer_leaves_the_group_unpruned_but_complete():
    engine = FakeEngine([400, 400, 20, 24, 400, 400])

    async def broken(texts: list[str]) -> list[float]:
        raise RuntimeError("scorer gone")

    result = sart_group(engine, broken)
    assert [s.index for s in result.samples] == [2, 3]
    assert result.controller_stats["pruned"] == 0 and result.controller_stats["aborted"] == 4
    assert result.score_failures >= 2 and result.scored == 0
