"""Shaping per episode on a scripted engine: controllers see an episode's generated tokens over all its turns (tool
results and tool time are not decode tokens), early stop keeps the first M episodes, and a stopped episode, in a
turn or waiting on a tool, ends at once: its partial result is dropped and counted, nothing is left on the engine.
An episode that raises fails its group, its running siblings aborted."""

from __future__ import annotations

import asyncio
import time

import pytest
from rl.rollout.engine import RequestTrace, SamplingSpec
from rl.rollout.tool_workflow import ToolWorkflow
from rl.rollout.tools import ToolCall
from rl.rollout.workflow import kept_episodes, run_episodes
from rl.shaping.darts import DartsController
from rl.shaping.policy import GroupPlan
from rl.shaping.sart import SartPolicy
from test_group_runner_scoring import FakeEngine

from rl.types import PromptRow

EOT, CALL, RESULT = 0, 9, 7  # end of turn; a turn holding CALL calls ``nap``; a result is RESULT_LEN RESULT ids
RESULT_LEN = 20
ROW = PromptRow("p", [{"role": "user", "content": "go"}], "")


async def nap(s: float) -> str:
    """Sleep, then say so.

    Args:
        s: seconds
    """
    await asyncio.sleep(s)
    return "ok"


class Marks:
    """A tool format on bare ids: a turn holding ``CALL`` calls ``nap`` for as many seconds as the turn's id after
    ``CALL``; results are ``RESULT_LEN`` ids."""

    turn_ends = frozenset({EOT})

    def prompt(self, messages, schemas) -> list[int]:
        return [1, 2]

    def calls(self, ids: list[int], schemas: list) -> list[ToolCall]:
        return [ToolCall("nap", {"s": float(ids[ids.index(CALL) + 1])})] if CALL in ids else []

    def prose(self, ids: list[int]) -> str:
        return "" if CALL in ids else self.decode(ids)

    def results(self, results, ids=None) -> list[int]:
        return [RESULT] * RESULT_LEN

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


class TurnEngine(FakeEngine):
    """Episode ``i``'s turn ``k`` (request ``g-i-tk``) streams ``turns[i][k]``, one id per ``step_s``, unless aborted
    (also before it started)."""

    def __init__(self, turns: dict[int, list[list[int]]], step_s: float = 0.004) -> None:
        super().__init__([], step_s)
        self.turns = turns

    def script(self, trace: RequestTrace) -> list[int]:
        episode, turn = trace.request_id.split("-")[1:]
        return self.turns[int(episode)][int(turn[1:])]


def group(engine: TurnEngine, controller, progress_every_tokens: int = 0):
    workflow = ToolWorkflow(Marks(), [nap], None, max_tool_calls=4, timeout_s=30.0)
    run = run_episodes(engine, "g", workflow, ROW, SamplingSpec(400), controller, None, progress_every_tokens)
    prompt, result, episodes = asyncio.run(run)
    assert [e.sample.index for e in episodes] == list(range(controller.plan.n_launch))
    return prompt, result, kept_episodes(result, episodes)


def test_an_episodes_length_is_its_generated_tokens_over_all_turns():
    """Dual-end selection (1 short, 1 long slot) keeps the longest by generated tokens: episode 1's two turns and a
    long tool result make the longest sequence, episode 2's one turn the most generated tokens."""
    engine = TurnEngine(
        {
            0: [[5, 5, EOT]],
            1: [[5, CALL, 0, EOT], [5, EOT]],  # 4 + 2 generated, 26 tokens with the result
            2: [[5] * 9 + [EOT]],  # 10 generated
        }
    )
    prompt, result, kept = group(engine, DartsController(GroupPlan("p", 3, 2, long_slots=1)))
    assert result.all_lengths == [3, 6, 10] and result.generated_tokens == 19 and result.kept_tokens == 13
    assert [e.sample.index for e in kept] == [0, 2] and [s.index for s in result.samples] == [0, 2]
    assert result.controller_stats["turns"] == 4 and result.controller_stats["tool_calls"] == 1
    assert result.controller_stats["discarded"] == 1 and prompt == [1, 2]


def test_early_stop_keeps_the_first_m_episodes_and_stops_the_rest_in_a_turn_or_a_tool_call():
    """SART's early stop, M=2 of 4: episodes 0 and 1 finish first; episode 2 is napping in a 10 s tool call and
    episode 3 decoding a long turn when they are stopped. The group ends at once, their partial results dropped and
    counted as aborted, no request left running; the tool call made still counts."""
    engine = TurnEngine(
        {
            0: [[5, EOT]],
            1: [[5, 5, 5, 5, EOT]],
            2: [[CALL, 10, EOT], [5, EOT]],  # would nap 10 s, then answer
            3: [[5] * 300],
        }
    )
    policy = SartPolicy(2, redundancy=2.0)
    t0 = time.monotonic()
    _, result, kept = group(engine, policy.controller(policy.plan(["p"])[0]))
    assert time.monotonic() - t0 < 3
    assert [e.sample.index for e in kept] == [0, 1] and all(e.sample.finish_reason == "stop" for e in kept)
    assert result.finish_reasons == ["stop", "stop", "abort", "abort"]
    stats = result.controller_stats
    assert stats["launched"] == 4 and stats["kept"] == 2 and stats["aborted"] == 2 and stats["tool_calls"] == 1
    assert all(t.finish_reason for t in engine.traces)  # nothing left running on the engine
    assert "g-2-t1" not in [t.request_id for t in engine.traces]  # no turn followed the stopped tool call
    assert 0 < result.all_lengths[3] < 300 and result.generated_tokens == sum(result.all_lengths)


class Fragile:
    """An environment whose third instance fails its reset."""

    made = 0

    def __init__(self) -> None:
        Fragile.made += 1
        self.number = Fragile.made

    def reset(self, **row) -> None:
        if self.number == 3:
            raise RuntimeError("reset broke")

    def nap(self, s: float) -> str:
        """Never called here.

        Args:
            s: seconds
        """
        return "ok"


def test_an_episode_that_raises_fails_the_group_and_aborts_the_running_ones():
    engine = TurnEngine({i: [[5] * 300] for i in range(4)})
    workflow = ToolWorkflow(Marks(), [], Fragile, max_tool_calls=4, timeout_s=30.0)
    controller = SartPolicy(2, redundancy=2.0).controller(GroupPlan("p", 4, 2))
    with pytest.raises(RuntimeError, match="reset broke"):
        asyncio.run(run_episodes(engine, "g", workflow, ROW, SamplingSpec(400), controller))
    assert {"g-0-t0", "g-1-t0"} <= engine.aborted
