"""Tool-calling episodes on the real vLLM engine (the tiny model in the session's rollout worker): plain and async
tools, a tool that raises and one that hangs past its timeout, and the trainer's log-probs against the sampler's on a
multi-turn episode.

The tiny model's 16-character alphabet cannot spell ``<tool_call>``, so these episodes use ``EveryTurnCalls``: each
turn the model ends on its EOS token calls the named tools with the turn's text. What is shown is the loop on a real
engine (sampled ids appended as returned, result ids appended, mask, log-probs, timeouts); the ``<tool_call>`` parser
and the chat-template rendering are tested in test_tool_workflow.py.
"""

import asyncio
import itertools
import sys
import time

import pytest
import ray
import tool_chat
from rl.rollout.engine import SamplingSpec
from rl.rollout.tool_workflow import ToolWorkflow
from rl.shaping.factory import make_policy
from rl.shaping.plain import PlainController
from rl.shaping.policy import GroupPlan
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker
from small_runs import base_weights
from tool_chat import EveryTurnCalls

from rl.types import PromptRow

pytestmark = pytest.mark.integration  # starts real Ray or vLLM
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the tools below travel to the actor
ray.cloudpickle.register_pickle_by_value(tool_chat)  # and the format

ROW = PromptRow("t", "3+1=", "4")


def length(text: str) -> str:
    """The text's length.

    Args:
        text: any text
    """
    return str(len(text))


async def length_later(text: str) -> str:
    """The text's length, after a short wait.

    Args:
        text: any text
    """
    await asyncio.sleep(0.05)
    return str(len(text) + 100)


def boom(text: str) -> str:
    """Fails.

    Args:
        text: ignored
    """
    raise RuntimeError("tool broke")


def hang(text: str) -> str:
    """Hangs far past any timeout.

    Args:
        text: ignored
    """
    time.sleep(60)
    return text


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def episodes(worker, tokenizer, tools, tag: str, timeout_s: float = 5.0, n: int = 4, max_tokens: int = 80):
    """``n`` episodes of ``ROW`` whose turns call ``tools``, at most two calls each; the multi-turn ones (the tiny
    model ends its first turn on EOS nearly always; a group where none did is sampled again, up to three times)."""
    names = [t.__name__ for t in tools]
    workflow = ToolWorkflow(EveryTurnCalls(tokenizer, names), tools, None, max_tool_calls=2, timeout_s=timeout_s)
    for attempt in range(3):
        plain = PlainController(GroupPlan("t", n, n))
        sampling = SamplingSpec(max_tokens=max_tokens)
        _, _, group = ray.get(worker.generate_episodes.remote(f"{tag}-{attempt}", ROW, sampling, workflow, plain))
        multi = [e for e in group if e.turns >= 2]
        if multi:
            return multi
    pytest.fail("no episode reached a second turn")


def assert_exact_layout(episode, tokenizer) -> None:
    """Sampled turns (mask 1, the sampler's log-probs) around the results' ids (mask 0, log-prob 0.0)."""
    s = episode.sample
    assert len(s.tokens) == len(s.logprobs) == len(s.loss_mask) == len(s.versions)
    first_end = s.tokens.index(tokenizer.eos_token_id)  # the first turn ends on the model's own EOS
    results = [t for t, m in zip(s.tokens, s.loss_mask, strict=True) if m == 0]
    assert s.loss_mask[: first_end + 1] == [1] * (first_end + 1) and s.loss_mask[first_end + 1] == 0
    assert tokenizer.decode(results).startswith(";")
    assert all(lp == 0.0 for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m == 0)
    assert all(lp < 0.0 or lp == pytest.approx(0.0, abs=1e-6) for lp in s.logprobs)
    assert episode.generated_tokens == sum(s.loss_mask) < len(s.tokens)


def test_plain_and_async_tools_feed_their_results_back(rollout_worker, tokenizer):
    for episode in episodes(rollout_worker, tokenizer, [length, length_later], "tools-ok"):
        assert_exact_layout(episode, tokenizer)
        turn1 = episode.messages[0]["content"]
        assert [m["content"] for m in episode.messages[1:3]] == [str(len(turn1)), str(len(turn1) + 100)]
        assert episode.tools.calls == 2 and episode.tools.failures == {}
        s = episode.sample
        results = [t for t, m in zip(s.tokens, s.loss_mask, strict=True) if m == 0]
        assert tokenizer.decode(results) == f";{len(turn1)};{len(turn1) + 100}"  # in the calls' order


def test_a_raising_and_a_hanging_tool_return_errors_and_never_stall(rollout_worker, tokenizer):
    t0 = time.monotonic()
    found = episodes(rollout_worker, tokenizer, [boom, hang], "tools-bad", timeout_s=1.0)
    assert time.monotonic() - t0 < 30  # the hung tool sleeps 60 s; its episodes went on after 1 s
    for episode in found:
        assert_exact_layout(episode, tokenizer)
        assert episode.tools.calls == 2 and episode.tools.failures == {"raised": 1, "timeout": 1}
        errors = [m["content"] for m in episode.messages if m["role"] == "tool"]
        assert "RuntimeError: tool broke" in errors[0] and "timed out after 1 s" in errors[1]
        assert 0.95 <= episode.tools.seconds < 10.0  # the hung call was cut at 1 s, not left to its 60 (asyncio
        # may fire a timeout a fraction of a millisecond early: 0.9997 s was seen)


def test_trainer_logprobs_equal_the_engines_on_a_multi_turn_episode(rollout_worker, tokenizer, tiny_model_dir):
    episode = episodes(rollout_worker, tokenizer, [length], "tools-lp", n=2)[0]
    s = episode.sample
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir))
    recomputed = trainer.sequence_logprobs(episode.prompt_tokens, s.tokens)
    gaps = [abs(a - b) for a, b, m in zip(recomputed, s.logprobs, s.loss_mask, strict=True) if m == 1]
    assert 1 in s.loss_mask[s.loss_mask.index(0) :]  # a sampled turn after a tool's result is compared too
    assert max(gaps) < 1e-3, f"largest gap {max(gaps)}"


NAPS = itertools.count()  # tool calls made in this pickled copy: the actor's, one group's


async def fast_then_slow(text: str) -> str:
    """The text's length: the group's first two calls at once, every later one after 30 s.

    Args:
        text: any text
    """
    if next(NAPS) >= 2:
        await asyncio.sleep(30)
    return str(len(text))


def test_darts_sart_keeps_the_first_m_episodes_and_stops_the_rest(rollout_worker, tokenizer):
    """darts+sart (in warm-up: keep the first M, stop the rest) over 4 episodes of one tool call each: the two whose
    call answers at once finish, the two whose call hangs 30 s are stopped in it; the group ends at once with M kept
    and no request left on the engine."""
    policy = make_policy("darts+sart", 2, avg_redundancy=2.0, n_min=4, n_max=4, warmup_steps=1)
    controller = policy.controller(policy.plan(["t"])[0])
    workflow = ToolWorkflow(EveryTurnCalls(tokenizer, ["fast_then_slow"]), [fast_then_slow], None, 1, 60.0)
    t0 = time.monotonic()
    run = rollout_worker.generate_episodes.remote("shaped", ROW, SamplingSpec(max_tokens=80), workflow, controller, 4)
    _, result, kept = ray.get(run)
    assert time.monotonic() - t0 < 20
    stats = result.controller_stats
    assert stats["launched"] == 4 and stats["kept"] == len(kept) == 2 and stats["aborted"] + stats["pruned"] >= 1
    assert all(e.turns == 2 and e.tools.calls == 1 and e.sample.finish_reason == "stop" for e in kept)
    assert [result.all_lengths[e.sample.index] for e in kept] == [e.generated_tokens for e in kept]
    assert result.finish_reasons.count("abort") == stats["aborted"] + stats["pruned"]
    assert ray.get(rollout_worker.stats.remote())["unfinished"] == 0


async def nap_then_length(text: str) -> str:
    """The text's length, after 3 s.

    Args:
        text: any text
    """
    await asyncio.sleep(3)
    return str(len(text))


@pytest.mark.parametrize("interrupt", [False, True], ids=["keep", "resubmit"])
def test_a_weight_sync_mid_episode_follows_partial_rollouts(rollout_worker, tokenizer, tiny_model_dir, interrupt):
    """``rollout.partial_rollouts`` holds for episodes as for single samples: an episode a sync lands in (in its first
    turn, kept running or aborted and resubmitted, or in its tool call) goes on under the new weights, its tokens
    carrying the version each was sampled under, old then new; none is dropped."""
    blob = base_weights(tiny_model_dir)
    old = ray.get(rollout_worker.stats.remote())["version"]
    workflow = ToolWorkflow(EveryTurnCalls(tokenizer, ["nap_then_length"]), [nap_then_length], None, 1, 10.0)
    plain = PlainController(GroupPlan("t", 4, 4))
    run = rollout_worker.generate_episodes.remote(f"sync-{interrupt}", ROW, SamplingSpec(80), workflow, plain)
    while ray.get(rollout_worker.stats.remote())["unfinished"] == 0:  # the first turns are decoding
        time.sleep(0.01)
    try:
        ray.get(rollout_worker.load_weights.remote(blob, old + 1, interrupt))
        _, result, kept = ray.get(run)
    finally:
        ray.get(rollout_worker.load_weights.remote(blob, old))
    assert len(kept) == 4 and "abort" not in result.finish_reasons
    multi = [e.sample for e in kept if e.turns == 2]  # an episode may start after the sync: all its tokens new
    assert all(s.versions == sorted(s.versions) and s.versions[-1] == old + 1 for s in multi)
    assert any(s.versions[0] == old for s in multi), "the sync landed in no multi-turn episode"


SAW_TOOL = """
def saw_tool(completions, **columns):
    return [float(any(m["role"] == "tool" for m in c)) for c in completions]
"""


def test_held_out_evaluation_runs_episodes_with_tools(rollout_worker, tokenizer, tiny_model_dir, tmp_path):
    """With tools, evaluation runs each problem's samples as episodes whose calls run, as training does: the rewards
    read the episodes' messages (here: correct when a tool answered), lengths are the model's tokens."""
    from rl.evaluation.held_out import sample_and_score
    from rl.inputs.prompting import PromptEncoder
    from rl.rewards.pool import RewardPool

    (tmp_path / "saw.py").write_text(SAW_TOOL)
    pool = RewardPool([(f"{tmp_path / 'saw.py'}:saw_tool", 1.0)], 0)
    workflow = ToolWorkflow(EveryTurnCalls(tokenizer, ["length"]), [length], None, max_tool_calls=1, timeout_s=5.0)
    rows = [PromptRow(f"e{i}", f"{i}+1=", str(i + 1)) for i in range(4)]
    encoder = PromptEncoder(tiny_model_dir)
    try:
        run = sample_and_score(rows, [rollout_worker], encoder, pool, SamplingSpec(80, 0.0), "tools", 2, tools=workflow)
        records = asyncio.run(run)
    finally:
        pool.close()
    assert [len(r.correct) for r in records] == [2] * 4 and any(c for r in records for c in r.correct)
    assert all(0 < n < 80 for r in records for n in r.lengths)


class Tally:
    """An environment that owns its reward (TRL's ``get_reward``): the calls its episode made, async."""

    def reset(self, **row) -> None:
        self.calls = 0

    def count(self, text: str) -> str:
        """Count this call.

        Args:
            text: any text
        """
        self.calls += 1
        return str(self.calls)

    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return float(self.calls)


def test_an_environment_owned_reward_scores_each_episode_from_its_live_state(rollout_worker, tokenizer):
    """``get_reward()`` runs on each episode's live instance in the rollout worker as the episode ends; the reward
    workers' built-in ``environment`` reads it from the snapshot, one value per episode."""
    from rl.rollout.workflow import episode_columns

    from rl.rewards.pool import RewardPool

    workflow = ToolWorkflow(EveryTurnCalls(tokenizer, ["count"]), [], Tally, max_tool_calls=2, timeout_s=5.0)
    plain = PlainController(GroupPlan("t", 4, 4))
    _, _, group = ray.get(rollout_worker.generate_episodes.remote("env-reward", ROW, SamplingSpec(80), workflow, plain))
    calls = [float(e.tools.calls) for e in group]
    assert [e.environment.calls for e in group] == calls and any(calls)
    with RewardPool([("environment", 1.0)], 1) as pool:  # a worker process: the snapshot crosses to it
        scored = pool.score_sync(["3+1="] * len(group), [e.sample.text for e in group], episode_columns(group))
    assert scored.rewards == calls and sum(scored.failures.values()) == 0


class Doubler(Tally):
    """``Tally`` whose calls count twice."""

    def count(self, text: str) -> str:
        """Count this call twice.

        Args:
            text: any text
        """
        self.calls += 2
        return str(self.calls)


def test_named_environments_serve_the_rows_that_pick_them(rollout_worker, tokenizer):
    """TRL's dict of environment factories: each row's ``environment`` column picks its class, whose tool and own
    reward the episodes of that row get."""
    envs = {"one": Tally, "two": Doubler}
    workflow = ToolWorkflow(EveryTurnCalls(tokenizer, ["count"]), [], envs, max_tool_calls=2, timeout_s=5.0)
    for pick, per_call in (("one", 1), ("two", 2)):
        row = PromptRow(f"n-{pick}", "3+1=", "4", {"environment": pick})
        plain = PlainController(GroupPlan("t", 4, 4))
        run = rollout_worker.generate_episodes.remote(f"named-{pick}", row, SamplingSpec(80), workflow, plain)
        _, _, group = ray.get(run)
        assert any(e.tools.calls for e in group), pick  # (the tiny model ends its first turn on EOS nearly always)
        assert [e.environment.get_reward() for e in group] == [per_call * e.tools.calls for e in group], pick
