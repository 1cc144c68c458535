"""Tool-calling episodes on the real vLLM engine (the tiny model in the session's rollout worker): plain and async
tools, a tool that raises and one that hangs past its timeout, and the trainer's log-probs against the sampler's on a
multi-turn episode.

The tiny model's 16-character alphabet cannot spell ``<tool_call>``, so these episodes use ``EveryTurnCalls``: each
turn the model ends on its EOS token calls the named tools with the turn's text. What is shown is the loop on a real
engine (sampled ids appended as returned, result ids appended, mask, log-probs, timeouts); the ``<tool_call>`` parser
and the chat-template rendering are tested in test_tool_workflow.py.
"""

import asyncio
import sys
import time

import pytest
import ray
from rl.rollout.engine import SamplingSpec
from rl.rollout.tool_workflow import ToolWorkflow
from rl.rollout.tools import ToolCall
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker
from small_runs import base_weights

from rl.types import PromptRow

pytestmark = pytest.mark.integration  # starts real Ray or vLLM
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the tools and format below travel to the actor

ROW = PromptRow("t", "3+1=", "4")


class EveryTurnCalls:
    """A tool format in the tiny model's alphabet: a turn ending on EOS calls every tool in ``names`` with
    ``text=<the turn>``; results are appended as ``;`` and their digits."""

    def __init__(self, tokenizer, names: list[str]) -> None:
        self.tokenizer, self.names, self.end_of_turn = tokenizer, names, tokenizer.eos_token_id

    def prompt(self, messages, schemas) -> list[int]:
        return self.tokenizer(messages[-1]["content"])["input_ids"]

    def calls(self, ids: list[int]) -> list[ToolCall]:
        return [ToolCall(name, {"text": self.decode(ids)}) for name in self.names]

    def results(self, results: list[tuple[str, str]]) -> list[int]:
        digits = "".join(";" + "".join(c for c in content if c.isdigit()) for _, content in results)
        return self.tokenizer(digits, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


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
        group = ray.get(
            worker.generate_episodes.remote(f"{tag}-{attempt}", ROW, SamplingSpec(max_tokens=max_tokens), workflow, n)
        )
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
        assert 1.0 <= episode.tools.seconds < 5.0


def test_trainer_logprobs_equal_the_engines_on_a_multi_turn_episode(rollout_worker, tokenizer, tiny_model_dir):
    ray.get(rollout_worker.load_weights.remote(base_weights(tiny_model_dir), 0))  # the trainer starts from these
    episode = episodes(rollout_worker, tokenizer, [length], "tools-lp", n=2)[0]
    s = episode.sample
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir))
    recomputed = trainer.sequence_logprobs(episode.prompt_tokens, s.tokens)
    gaps = [abs(a - b) for a, b, m in zip(recomputed, s.logprobs, s.loss_mask, strict=True) if m == 1]
    assert 1 in s.loss_mask[s.loss_mask.index(0) :]  # a sampled turn after a tool's result is compared too
    assert max(gaps) < 1e-3, f"largest gap {max(gaps)}"
