"""``builtin:calc-tiny`` on the real vLLM engine: the model writes a real ``<tool_call>``, the Qwen / Hermes parser
reads it, the calculator runs, and its result goes back to the model as the chat template's tool turn, token for token.

Unlike tests/test_tool_episodes.py (the arith-tiny model, a stand-in format), nothing here is a stand-in: the model's
own tokenizer and template (``ChatTemplateFormat``), the recipe's tool (``rl.recipes.calculator:add``)."""

import asyncio

import pytest
from rl.recipes.calculator import add
from rl.rollout.engine import SamplingSpec
from rl.rollout.tool_format import ChatTemplateFormat
from rl.rollout.tool_workflow import ToolSettings
from rl.rollout.tools import tool_schema
from rl.shaping.plain import PlainController
from rl.shaping.policy import GroupPlan

from rl.types import PromptRow

pytestmark = pytest.mark.integration(seconds=100)  # starts real vLLM; builds calc-tiny on a fresh machine

ROW = PromptRow("c", [{"role": "user", "content": "417+385="}], "802")
SETTINGS = ToolSettings(("rl.recipes.calculator:add",), None, max_tool_calls=2, timeout_s=5.0, base_dir=".")


@pytest.fixture(scope="module")
def calc_model_dir():
    from rl.models import resolve_model

    return resolve_model("builtin:calc-tiny")


@pytest.fixture(scope="module")
def calc_worker(calc_model_dir):
    """A rollout worker serving calc-tiny in this process, and the event loop its engine lives on (the session's
    rollout worker serves arith-tiny)."""
    from rl.rollout.engine import EngineSpec
    from rl.rollout.local_worker import LocalRolloutWorker

    loop = asyncio.new_event_loop()
    worker = loop.run_until_complete(LocalRolloutWorker.start(EngineSpec(model=calc_model_dir, max_model_len=128)))
    yield loop, worker
    loop.run_until_complete(worker.shutdown())
    loop.close()


def called(calc_worker, n: int = 8) -> list:
    """Episodes of ``ROW`` (temperature 1) whose first turn was a call that parsed; a group without one is sampled
    again, up to three times (the warm start calls in about 6 episodes of 10 where it is offered the tool)."""
    loop, worker = calc_worker
    for attempt in range(3):
        plain = PlainController(GroupPlan("c", n, n))
        episodes = worker.generate_episodes(f"calc-{attempt}", ROW, SamplingSpec(max_tokens=64), SETTINGS, plain)
        _, _, group = loop.run_until_complete(episodes)
        found = [e for e in group if e.tools.calls and not e.tools.failures]
        if found:
            return found
    pytest.fail("no episode made a call that parsed")


def test_a_real_tool_call_is_parsed_and_its_result_comes_back_token_for_token(calc_worker, calc_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(calc_model_dir)
    fmt = ChatTemplateFormat(tok)
    assert " add<|im_end|>" in tok.decode(fmt.prompt(ROW.prompt, [tool_schema(add)]), skip_special_tokens=False)
    episode = called(calc_worker)[0]
    s = episode.sample
    end = s.tokens.index(tok.eos_token_id)  # the model's first turn: a call, ended on its own <|im_end|>
    [call] = fmt.calls(s.tokens[: end + 1], [tool_schema(add)])
    assert s.tokens[0] == tok.convert_tokens_to_ids("<tool_call>")  # the tag is one token the model sampled
    assert call.name == "add" and set(call.arguments) == {"a", "b"}
    result = str(add(**call.arguments))
    back = fmt.results([("add", result)])
    assert s.tokens[end + 1 : end + 1 + len(back)] == back  # the template's tool turn, ids as rendered
    assert s.loss_mask[: end + 1] == [1] * (end + 1) and s.loss_mask[end + 1 : end + 1 + len(back)] == [0] * len(back)
    assert all(lp == 0.0 for lp in s.logprobs[end + 1 : end + 1 + len(back)])
    assert episode.messages[1] == {"role": "tool", "name": "add", "content": result}
    assert episode.turns == 2 and 1 in s.loss_mask[end + 1 + len(back) :]  # the model answered after the result


def test_vllms_hermes_parser_reads_the_models_calls_in_the_rollout_worker(calc_worker, calc_model_dir):
    """``rollout.tool_parser=hermes``: the rollout worker reads the real model's calls with vLLM's parser, which
    finds the same calls in the same turns as Tailor's own reader."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    loop, worker = calc_worker
    plain = PlainController(GroupPlan("h", 8, 8))
    settings = replace(SETTINGS, tool_parser="hermes")
    _, _, group = loop.run_until_complete(
        worker.generate_episodes("calc-hermes", ROW, SamplingSpec(max_tokens=64), settings, plain)
    )
    fmt = ChatTemplateFormat(AutoTokenizer.from_pretrained(calc_model_dir))
    calling = [e for e in group if e.tools.calls]
    assert calling, "no episode of 8 made a call"
    for episode in calling:
        first = episode.sample.tokens[: episode.sample.tokens.index(fmt.end_of_turn) + 1]
        ours = [c.message() for c in fmt.calls(first, [tool_schema(add)]) if c.arguments is not None]
        assert episode.messages[0].get("tool_calls", []) == ours
    unknown = replace(SETTINGS, tool_parser="nope")  # the worker builds its format with the parser named
    with pytest.raises(ValueError, match="vLLM has no tool parser named 'nope'"):
        loop.run_until_complete(worker.generate_episodes("calc-nope", ROW, SamplingSpec(max_tokens=64), unknown, plain))
