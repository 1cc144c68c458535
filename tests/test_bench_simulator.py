"""The simulated engine (rl/bench/simulator.py) on hand-computable cases, with the real shaping policies."""

from __future__ import annotations

import math
import random

import pytest
from rl.shaping.darts import DartsPolicy
from rl.shaping.factory import make_policy
from rl.shaping.plain import PlainPolicy
from rl.shaping.sart import SartPolicy

from rl.bench.simulator import (
    EngineModel,
    HostCost,
    LinearStep,
    Looks,
    NaturalSample,
    pick,
    pools_from_lengths,
    simulate_batch,
    simulate_steady,
    steady_groups_per_s,
)

MS = LinearStep(0.001, 0.0)  # 1 ms per step, whatever runs
QUARTER = LinearStep(0.25, 0.0)  # exact in binary: wall-clock comparisons without rounding
CAP = 48


def pools(*lengths: list[int]) -> list[list[NaturalSample]]:
    return pools_from_lengths(list(lengths), CAP)


def darts_k1_l1(long_wait: float) -> DartsPolicy:
    """3 launched, keep 2: one short slot, one long slot, the long slot closing at ``long_wait`` x the short length."""
    return DartsPolicy(2, n_min=3, n_max=3, long_slots=1, long_wait=long_wait)


def test_all_admitted_time_is_the_longest_sample() -> None:
    r = simulate_batch(PlainPolicy(2), pools([3, 5], [2, 4]), EngineModel(MS, max_num_seqs=1000))
    assert r.steps == 5
    assert r.seconds == pytest.approx(0.005)
    assert (r.generated_tokens, r.kept_tokens, r.max_running, r.waited) == (14, 14, 4, 0)
    assert [g.done_s for g in r.groups] == pytest.approx([0.004, 0.005])


def test_admission_cap_queues_first_come_first_served() -> None:
    # steps 0-2: g0's 3 and 5; step 3: g1's 2 enters (steps 3-4); step 5: g1's 4 enters (steps 5-8)
    r = simulate_batch(PlainPolicy(2), pools([3, 5], [2, 4]), EngineModel(MS, max_num_seqs=2))
    assert r.steps == 9
    assert r.seconds == pytest.approx(0.009)
    assert (r.max_running, r.waited) == (2, 2)
    assert [g.done_s for g in r.groups] == pytest.approx([0.005, 0.009])


def test_early_stop_aborts_the_third_once_two_have_stopped() -> None:
    policy = SartPolicy(2, redundancy=1.5)  # launch 3, keep the first 2 that stop, no pruning
    r = simulate_batch(policy, pools([2, 3, 6]), EngineModel(MS))
    assert (r.steps, r.launched, r.aborted) == (3, 3, 1)
    assert (r.generated_tokens, r.kept_tokens) == (2 + 3 + 3, 2 + 3)  # the third stopped after 3 of its 6


def test_sart_without_scores_still_stops_early_on_the_token_clock() -> None:
    policy = make_policy("sart", 2, redundancy=1.5, scorer="external")  # looks at running samples, prunes nothing
    r = simulate_batch(policy, pools([2, 3, 6]), EngineModel(MS), Looks(every_tokens=1))
    assert (r.steps, r.aborted, r.generated_tokens) == (3, 1, 8)


def test_frontend_lag_lets_the_doomed_sample_run_on() -> None:
    # the second stop (step 2) reaches the controller after step 3: the third has 4 tokens when aborted, and the
    # group is done once its abort is seen (the engine idle: at once)
    r = simulate_batch(SartPolicy(2, redundancy=1.5), pools([2, 3, 6]), EngineModel(MS, lag_steps=1))
    assert r.generated_tokens == 2 + 3 + 4
    assert r.seconds == pytest.approx(0.004)


def test_token_clock_deadline_closes_at_long_wait_times_the_short_length() -> None:
    # short slot: the 4 (deadline ceil(1.5 x 4) = 6); long candidate: the 5; the 30 is aborted at 6 tokens
    r = simulate_batch(darts_k1_l1(1.5), pools([4, 5, 30]), EngineModel(MS), Looks(every_tokens=1))
    assert r.steps == math.ceil(1.5 * 4)
    assert r.generated_tokens == 4 + 5 + 6
    assert sorted(r.groups[0].kept_lengths) == [4, 5]


def test_streamed_lengths_make_the_deadline_late_by_the_stream_interval() -> None:
    # outputs at tokens 1, 5, 9: the looks see 5 (< 6), then 9, so the 30 is aborted at 9 tokens
    engine = EngineModel(MS, stream_interval=4)
    r = simulate_batch(darts_k1_l1(1.5), pools([4, 5, 30]), engine, Looks(every_tokens=4))
    assert (r.steps, r.generated_tokens) == (9, 4 + 5 + 9)


def test_wall_clock_looks_every_period() -> None:
    # 0.25 s steps, a look every 1.125 s: after step 4 (the 30 at 5 tokens: before the deadline), after step 8 (9)
    r = simulate_batch(darts_k1_l1(1.5), pools([4, 5, 30]), EngineModel(QUARTER), Looks(every_s=1.125))
    assert (r.steps, r.generated_tokens) == (9, 4 + 5 + 9)
    assert r.seconds == pytest.approx(2.25)


def test_without_looks_the_long_slot_waits_for_the_last_sample() -> None:
    r = simulate_batch(darts_k1_l1(1.5), pools([4, 5, 30]), EngineModel(MS))
    assert (r.steps, r.aborted) == (30, 0)


@pytest.mark.parametrize(("streamed", "outputs"), [(True, 3 + 3), (False, 2)])
def test_streamed_host_term_adds_h_out_per_output(streamed: bool, outputs: int) -> None:
    # interval 2: the 5 emits at tokens 1, 3, 5 (its last); the 4 at 1, 3 and its last, 4. Unstreamed: the ends only.
    free_device = LinearStep(0.0, 0.0)
    engine = EngineModel(free_device, HostCost(per_output_s=0.5), stream_interval=2)
    r = simulate_batch(PlainPolicy(2), pools([5, 4]), engine, streamed=streamed)
    assert r.seconds == pytest.approx(0.5 * outputs)


def test_step_time_is_the_slower_of_device_and_host() -> None:
    host = HostCost(step_s=0.001, per_seq_s=0.001)  # 3 ms with 2 running, 2 ms with 1
    r = simulate_batch(PlainPolicy(2), pools([1, 2]), EngineModel(LinearStep(0.0025, 0.0), host))
    assert r.seconds == pytest.approx(0.003 + 0.0025)


def test_abort_cost_lands_in_the_step_that_decides_it() -> None:
    engine = EngineModel(LinearStep(0.0, 0.0), HostCost(per_abort_s=1.0))
    r = simulate_batch(SartPolicy(2, redundancy=1.5), pools([2, 3, 6]), engine)
    assert r.seconds == pytest.approx(1.0)


def test_prefill_cost_per_admitted_request() -> None:
    r = simulate_batch(PlainPolicy(2), pools([3, 5]), EngineModel(MS, prefill_s=0.01))
    assert r.seconds == pytest.approx(0.005 + 2 * 0.01)


def test_context_cost_counts_the_tokens_each_running_sequence_has_generated() -> None:
    # all at once: a sample of length L holds 0, 1, ..., L-1 generated tokens in its steps; 3 -> 3, 5 -> 10
    free = LinearStep(0.0, 0.0)
    r = simulate_batch(PlainPolicy(2), pools([3, 5]), EngineModel(free, context_s=1.0))
    assert r.seconds == pytest.approx(3 + 10)
    # one at a time: the 5 enters at step 3 with nothing generated, so it holds the same 10 (not 3 more per step)
    r = simulate_batch(PlainPolicy(2), pools([3, 5]), EngineModel(free, max_num_seqs=1, context_s=1.0))
    assert (r.steps, r.seconds) == (8, pytest.approx(3 + 10))
    # an early stop ends the third sample's context with its abort: 2 -> 1, 3 -> 3, the aborted 6 after 3 steps -> 3
    r = simulate_batch(SartPolicy(2, redundancy=1.5), pools([2, 3, 6]), EngineModel(free, context_s=1.0))
    assert r.seconds == pytest.approx(1 + 3 + 3)


@pytest.mark.parametrize("in_flight", [1, 3])
def test_steady_state_of_identical_groups(in_flight: int) -> None:
    group_s = 0.004  # every group: two samples of 4 tokens
    r = simulate_steady(PlainPolicy(2), pools([4, 4], [4, 4], [4, 4]), EngineModel(MS), 4, in_flight)
    assert len(r.groups) == 12
    assert steady_groups_per_s(r, in_flight) == pytest.approx(in_flight / group_s)


def test_steady_state_learns_across_batches() -> None:
    seen: list[tuple[str, list[int]]] = []

    class Watched(PlainPolicy):
        def observe(self, prompt_id: str, kept_lengths: list[int]) -> None:
            seen.append((prompt_id, sorted(kept_lengths)))

    simulate_steady(Watched(2), pools([3, 5], [2, 4]), EngineModel(MS), 3, 1)
    assert seen == [("0", [3, 5]), ("1", [2, 4])] * 3


def test_pick_takes_the_pool_then_draws_with_replacement() -> None:
    pool = pools([1, 2, 3])[0]
    assert [s.length for s in pick(pool, 2)] == [1, 2]
    drawn = pick(pool, 7, random.Random(0))
    assert sorted(s.length for s in drawn[:3]) == [1, 2, 3]
    assert {s.length for s in drawn} <= {1, 2, 3} and len(drawn) == 7


def test_a_resample_varies_as_a_fresh_pass_where_the_pool_shuffled_does_not() -> None:
    """Two runaways in a pool of four: taking 3 of the 4 always takes 1 or 2 of them (hypergeometric); a fresh pass of
    3 samples takes 0 to 3 (binomial), as the resample does."""
    pool = pools([10, 10, 512, 512])[0]

    def runaways(resample: bool) -> set[int]:
        draws = (pick(pool, 3, random.Random(seed), resample) for seed in range(200))
        return {[s.length for s in drawn].count(512) for drawn in draws}

    assert runaways(resample=False) == {1, 2}
    assert runaways(resample=True) == {0, 1, 2, 3}


def test_natural_lengths_at_the_cap_are_truncated() -> None:
    assert [s.finish_reason for s in pools([CAP - 1, CAP])[0]] == ["stop", "length"]
    with pytest.raises(ValueError):
        NaturalSample(0, "stop")
