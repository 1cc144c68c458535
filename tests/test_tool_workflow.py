"""Tool-calling episodes without an engine: the ``<tool_call>`` format on a chat template, tool calls (plain, async,
raising, hanging), bad tool specs, the episode's tokens / mask / log-probs on a scripted engine, and the loss mask."""

import asyncio
import time

import pytest
import torch
from rl.rollout.engine import RequestTrace, SamplingSpec
from rl.rollout.tool_format import ChatTemplateFormat
from rl.rollout.tool_workflow import ToolWorkflow
from rl.rollout.tools import ToolBox, ToolCall, ToolStats, load_environment, load_tool
from rl.rollout.workflow import Episode, EpisodeTrace, run_episodes
from rl.shaping.plain import PlainController
from rl.shaping.policy import GroupPlan
from rl.trainer.batching import collate
from tool_chat import byte_chat_tokenizer, saved_chat_tokenizer
from transformers import AutoTokenizer, GenerationConfig

from rl.algorithm.losses import LossSpec, policy_loss
from rl.output.metrics import summarize_groups
from rl.types import Group, PromptRow, Sample

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


async def add_later(a: int, b: int) -> int:
    """Add two integers, a little later.

    Args:
        a: the first
        b: the second
    """
    await asyncio.sleep(0.01)
    return a + b


def boom(a: int) -> int:
    """Always fails.

    Args:
        a: ignored
    """
    raise ZeroDivisionError("no luck")


def hang(a: int) -> int:
    """Never answers in time.

    Args:
        a: ignored
    """
    time.sleep(5)
    return a


class Counter:
    """A TRL-style environment: reset(**row), one tool method, state read by rewards."""

    def reset(self, **row) -> str:
        self.total = int(row["answer"])
        return " (start from the answer)"

    def add(self, a: int, b: int) -> int:
        """Add two integers to the running total.

        Args:
            a: the first
            b: the second
        """
        self.total += a + b
        return self.total


@pytest.fixture(scope="module")
def fmt():
    return ChatTemplateFormat(byte_chat_tokenizer())


def ids(fmt, text: str) -> list[int]:
    return fmt.tokenizer.encode(text, add_special_tokens=False)


class ScriptedEngine:
    """An engine whose turns are given: each request returns the next scripted ids (log-prob -0.5 each, ``stop``)
    and records the prompt it was sent."""

    def __init__(self, turns: list[list[int]]) -> None:
        self.turns, self.prompts, self.version = list(turns), [], 3

    async def generate(self, trace: RequestTrace, prompt_tokens, sampling, priority=0, on_output=None):
        self.prompts.append(list(prompt_tokens))
        out = self.turns.pop(0)[: sampling.max_tokens]
        trace.tokens, trace.logprobs = list(out), [-0.5] * len(out)
        trace.finish_reason = "stop" if len(out) < sampling.max_tokens or not self.turns else "length"
        return trace


def run(workflow, engine, max_tokens=400, row=None):
    row = row or PromptRow("p", [{"role": "user", "content": "2+3?"}], "7")
    return asyncio.run(workflow.run(engine, EpisodeTrace("e"), row, SamplingSpec(max_tokens=max_tokens)))


# the format


def test_calls_are_read_from_tool_call_markers(fmt):
    text = f'I will add. {CALL} and <tool_call>{{"name": "mul", "arguments": "{{\\"x\\": 1}}"}}</tool_call>'
    assert fmt.calls(ids(fmt, text), []) == [ToolCall("add", {"a": 2, "b": 3}), ToolCall("mul", {"x": 1})]
    assert fmt.calls(ids(fmt, "The answer is 5."), []) == []
    bad = fmt.calls(ids(fmt, '<tool_call>{"name": "add", "arguments": [1]}</tool_call><tool_call>nope</tool_call>'), [])
    assert bad == [ToolCall("add", None), ToolCall("?", None)]


def test_episode_tokens_are_the_templates_rendering_of_the_conversation(fmt):
    """Prompt + the model's ids + the results' ids, appended, equal the chat template's ids for the whole
    conversation: the results' tokens join the sampled end-of-turn token exactly."""
    turn = ids(fmt, f"Let me add. {CALL}") + [fmt.end_of_turn]
    prompt = fmt.prompt([{"role": "user", "content": "2+3?"}], [])
    appended = prompt + turn + fmt.results([("add", "5")])
    conversation = [
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": f"Let me add. {CALL}"},
        {"role": "tool", "name": "add", "content": "5"},
    ]
    whole = fmt.tokenizer.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert appended == list(whole)


# tools


def test_toolbox_returns_results_and_errors_and_counts_them():
    box = ToolBox([add, add_later, boom, hang], timeout_s=0.2)

    async def calls():
        t0 = time.monotonic()
        out = await asyncio.gather(
            box.call(ToolCall("add", {"a": 1, "b": 2})),
            box.call(ToolCall("add_later", {"a": 2, "b": 2})),
            box.call(ToolCall("boom", {"a": 0})),
            box.call(ToolCall("hang", {"a": 0})),
            box.call(ToolCall("nope", {})),
            box.call(ToolCall("add", None)),
            box.call(ToolCall("add", {"c": 1})),
        )
        return out, time.monotonic() - t0

    out, seconds = asyncio.run(calls())
    assert out[:2] == ["3", "4"]
    assert "ZeroDivisionError: no luck" in out[2] and out[2].startswith("{'error'")
    assert "timed out after 0.2 s" in out[3]
    assert "no tool named 'nope'" in out[4] and "could not parse" in out[5] and "TypeError" in out[6]
    assert seconds < 4  # the hung call did not hold the others (it sleeps 5 s on its own thread)
    assert box.stats.calls == 7
    assert box.stats.failures == {"raised": 2, "timeout": 1, "unknown_tool": 1, "bad_call": 1}


def test_schemas_come_from_name_signature_and_docstring():
    (schema,) = ToolBox([add], 1.0).schemas()
    assert schema["function"]["name"] == "add" and schema["function"]["description"] == "Add two integers."
    assert schema["function"]["parameters"]["properties"]["b"] == {"type": "integer", "description": "the second"}


@pytest.mark.parametrize(
    "source, spec, message",
    [
        ("def f(a: int) -> int:\n    return a\n", "f", "f cannot be a tool"),
        ("x = 3\n", "x", "'x' in file .* is not callable"),
        ("def g(a: int) -> int:\n    '''G.\n\n    Args:\n        a: a\n    '''\n", "missing", "has no attribute"),
        ("import nowhere_at_all\n", "f", "importing .* failed: ModuleNotFoundError"),
    ],
    ids=["no-docstring", "not-callable", "no-such-name", "import-fails"],
)
def test_bad_tool_specs_get_one_line_errors(tmp_path, source, spec, message):
    path = tmp_path / "tools.py"
    path.write_text(source)
    with pytest.raises(ValueError, match=f"^tool spec '{path}:{spec}': .*{message}") as e:
        load_tool(f"{path}:{spec}")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="^tool spec 'add': expected"):
        load_tool("add")


def test_bad_environment_specs_get_one_line_errors(tmp_path):
    path = tmp_path / "envs.py"
    path.write_text(
        "class NoReset:\n    def act(self, a: int) -> int:\n        '''Act.\n\n        Args:\n            a: a\n"
        "        '''\n        return a\n"
        "class Undocumented:\n    def reset(self, **row):\n        pass\n    def act(self, a):\n        return a\n"
    )
    with pytest.raises(ValueError, match="NoReset': its instances have no reset method"):
        load_environment(f"{path}:NoReset")
    with pytest.raises(ValueError, match="Undocumented': act cannot be a tool"):
        load_environment(f"{path}:Undocumented")


# the episode


def test_episode_appends_sampled_ids_and_tool_ids_with_mask_and_logprobs(fmt):
    turn1 = ids(fmt, f"Let me add. {CALL}") + [fmt.end_of_turn]
    turn2 = ids(fmt, "It is 5.") + [fmt.end_of_turn]
    engine = ScriptedEngine([turn1, turn2])
    episode = run(ToolWorkflow(fmt, [add], None, max_tool_calls=4, timeout_s=1.0), engine)
    result = fmt.results([("add", "5")])
    s = episode.sample
    assert engine.prompts[1] == engine.prompts[0] + turn1 + result  # the second turn continues the exact ids
    assert s.tokens == turn1 + result + turn2
    assert s.loss_mask == [1] * len(turn1) + [0] * len(result) + [1] * len(turn2)
    assert s.logprobs == [-0.5] * len(turn1) + [0.0] * len(result) + [-0.5] * len(turn2)
    assert s.versions == [3] * len(s.tokens) and s.finish_reason == "stop"
    assert episode.turns == 2 and episode.tools.calls == 1 and episode.tools.failures == {}
    assert episode.generated_tokens == len(turn1) + len(turn2)
    assert [m["role"] for m in episode.messages] == ["assistant", "tool", "assistant"]
    assert episode.messages[1]["content"] == "5"
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    assert episode.messages[0]["tool_calls"] == [call] and "tool_calls" not in episode.messages[2]  # as TRL's
    assert episode.messages[0]["content"] == "Let me add." and episode.messages[2]["content"] == "It is 5."
    assert engine.prompts[0] == fmt.prompt([{"role": "user", "content": "2+3?"}], ToolBox([add], 1).schemas())


def test_a_turn_ending_on_the_generation_configs_end_of_turn_calls_its_tools(tmp_path):
    """Gemma's turns end on ``<end_of_turn>``, its tokenizer's EOS is ``<eos>``: the generation config lists both and
    vLLM stops on either, so a call turn ending on ``<end_of_turn>`` runs its calls and the results follow it."""
    tok = byte_chat_tokenizer("gemma")
    tok.save_pretrained(tmp_path)
    end = tok.convert_tokens_to_ids("<end_of_turn>")
    GenerationConfig(eos_token_id=[tok.eos_token_id, end]).save_pretrained(tmp_path)
    gemma = ChatTemplateFormat(AutoTokenizer.from_pretrained(tmp_path))
    assert gemma.turn_ends == {tok.eos_token_id, end} != ChatTemplateFormat(tok).turn_ends
    turn1, turn2 = ids(gemma, CALL) + [end], ids(gemma, "It is 5.") + [end]
    episode = run(ToolWorkflow(gemma, [add], None, 4, 1.0), ScriptedEngine([turn1, turn2]))
    result = gemma.results([("add", "5")])
    assert episode.tools.calls == 1 and episode.sample.tokens == turn1 + result + turn2
    assert gemma.tokenizer.decode(result) == "\n<start_of_turn>tool\n5<end_of_turn>\n<start_of_turn>model\n"


def test_a_glm_turn_ending_on_observation_runs_its_calls_and_the_results_follow_that_token(tmp_path):
    """GLM's call turn ends on ``<|observation|>``, the token its template opens the results with; its answer turn
    on ``<|user|>`` (both in its generation config)."""
    glm = ChatTemplateFormat(saved_chat_tokenizer("glm", tmp_path))
    observation, user = glm.tokenizer.convert_tokens_to_ids(["<|observation|>", "<|user|>"])
    call = "\n<think></think>\n<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>"
    turn1 = ids(glm, call + "\n<arg_value>3</arg_value>\n</tool_call>") + [observation]
    turn2 = ids(glm, "\n<think></think>\nIt is 5.") + [user]
    episode = run(ToolWorkflow(glm, [add], None, 4, 1.0), ScriptedEngine([turn1, turn2]))
    assert episode.tools.calls == 1 and episode.tools.failures == {}
    assert episode.sample.tokens == turn1 + glm.results([("add", "5")]) + turn2
    assert episode.messages[0]["tool_calls"] == [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    ]
    assert episode.messages[2]["content"] == "It is 5."


def test_a_gemma4_episode_goes_on_in_the_models_turn_after_the_results(tmp_path):
    """Gemma 4's call turn ends on ``<|tool_response>``, which opens the results inside the model's turn; the model
    answers after them with no header, and ends on ``<turn|>`` (both in its generation config)."""
    gemma = ChatTemplateFormat(saved_chat_tokenizer("gemma4", tmp_path))
    opened, end = gemma.tokenizer.convert_tokens_to_ids(["<|tool_response>", "<turn|>"])
    turn1 = ids(gemma, 'Let me add.<|tool_call>call:add{a:2,b:<|"|>3<|"|>}<tool_call|>') + [opened]
    turn2 = ids(gemma, "It is 5.") + [end]
    episode = run(ToolWorkflow(gemma, [add], None, 4, 1.0), ScriptedEngine([turn1, turn2]))
    assert episode.tools.calls == 1 and episode.tools.failures == {}
    assert episode.sample.tokens == turn1 + gemma.results([("add", "5")]) + turn2
    assert gemma.tokenizer.decode(episode.sample.tokens).endswith(
        'response:add{value:<|"|>5<|"|>}<tool_response|>It is 5.<turn|>'
    )
    assert episode.messages[0] == {
        "role": "assistant",
        "content": "Let me add.",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}],
    }
    assert episode.messages[2]["content"] == "It is 5."


def test_a_gpt_oss_episode_calls_from_its_commentary_channel_and_answers_in_its_final_one(tmp_path):
    """gpt-oss thinks in its analysis channel, calls on ``<|call|>`` and answers in its final channel, ending on
    ``<|return|>``: the rewards' messages hold the call and the final answer, not the analysis."""
    oss = ChatTemplateFormat(saved_chat_tokenizer("harmony", tmp_path))
    think = "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant"
    turn1 = ids(oss, f'{think}<|channel|>commentary to=functions.add <|constrain|>json<|message|>{{"a": 2, "b": 3}}')
    turn1 += oss.tokenizer.convert_tokens_to_ids(["<|call|>"])
    turn2 = ids(oss, f"{think}<|channel|>final<|message|>It is 5.") + [oss.end_of_turn]
    episode = run(ToolWorkflow(oss, [add], None, 4, 1.0), ScriptedEngine([turn1, turn2]))
    assert episode.tools.calls == 1 and episode.tools.failures == {}
    assert episode.sample.tokens == turn1 + oss.results([("add", "5")]) + turn2
    assert episode.messages == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}],
        },
        {"role": "tool", "name": "add", "content": "5"},
        {"role": "assistant", "content": "It is 5."},
    ]


def test_episode_stops_at_max_tool_calls_and_at_its_token_budget(fmt):
    turn1 = ids(fmt, CALL) + [fmt.end_of_turn]
    capped = run(ToolWorkflow(fmt, [add], None, max_tool_calls=0, timeout_s=1.0), ScriptedEngine([turn1, [7]]))
    assert capped.turns == 1 and capped.tools.calls == 0 and capped.sample.tokens == turn1
    room = len(turn1) + len(fmt.results([("add", "5")]))  # the result fits, but no token is left for a reply
    tight = run(ToolWorkflow(fmt, [add], None, 4, 1.0), ScriptedEngine([turn1, [7]]), max_tokens=room)
    assert tight.turns == 1 and tight.sample.finish_reason == "length" and tight.sample.tokens == turn1


def test_environment_is_reset_with_the_row_and_its_methods_are_tools(fmt):
    turn1 = ids(fmt, CALL) + [fmt.end_of_turn]
    engine = ScriptedEngine([turn1, [fmt.end_of_turn]])
    episode = run(ToolWorkflow(fmt, [], Counter, 4, 1.0), engine)
    assert episode.environment.total == 7 + 5  # reset from the row's answer, then the model's call
    assert episode.messages[1]["content"] == "12"
    prompt_text = fmt.tokenizer.decode(engine.prompts[0])
    assert "2+3? (start from the answer)" in prompt_text and '"name": "add"' in prompt_text


class Canned:
    """A workflow whose episodes are given, one per index (their trace fed their sampled tokens), on no engine."""

    version = 0

    def __init__(self, episodes: list[Episode]) -> None:
        self.episodes = episodes

    async def run(self, engine, trace, row, sampling) -> Episode:
        episode = self.episodes[trace.index]
        trace.ids, trace.mask = episode.sample.tokens, episode.sample.loss_mask
        trace.end(episode.sample.finish_reason)
        return episode

    async def abort(self, request_ids: list[str]) -> None:
        assert not request_ids


def test_a_groups_episodes_report_as_one_group_with_tool_counts():
    def episode(mask, calls, failures, prompt=(1, 2)):
        sample = Sample(0, list(range(len(mask))), [0.0] * len(mask), [0] * len(mask), "stop", loss_mask=mask)
        return Episode(list(prompt), sample, turns=1 + calls, tools=ToolStats(calls, failures, 0.25))

    def group(episodes):
        canned = Canned(episodes)
        plan = GroupPlan("p", len(episodes), len(episodes))
        run = run_episodes(canned, "g", canned, PromptRow("p", "", ""), SamplingSpec(400), PlainController(plan))
        return asyncio.run(run)

    episodes = [episode([1, 1, 0, 0, 0, 1], 1, {"timeout": 1}), episode([1, 1], 0, {})]
    prompt, result, ran = group(episodes)
    assert prompt == [1, 2] and ran == episodes and result.generated_tokens == result.kept_tokens == 3 + 2
    assert result.all_lengths == [3, 2]
    assert result.controller_stats == {
        **PlainController(GroupPlan("p", 2, 2)).stats(),
        "kept": 2,
        "turns": 3,
        "tool_calls": 1,
        "tool_ms": 500,
        "tool_failures_timeout": 1,
    }
    group_ = Group(PromptRow("p", "", ""), prompt, result.samples, [1.0, -1.0], stats=dict(result.controller_stats))
    group_.samples[0].reward = 1.0
    metrics = summarize_groups([group_], trainer_version=0)
    assert metrics["kept_tokens"] == 5 and metrics["tool_calls"] == 1 and metrics["tool_failures_timeout"] == 1
    with pytest.raises(ValueError, match="different prompts"):
        group([episodes[0], episode([1], 0, {}, prompt=(1, 3))])


def test_tool_tokens_carry_no_gradient():
    """A masked (tool) token's log-prob gets no gradient and its behaviour log-prob does not change the loss."""
    prompt, response, mask = [5, 6], [7, 8, 9, 10], [1, 0, 0, 1]
    batch = collate([(prompt, response, [-1.0, -2.0, -3.0, -1.25], 1.0, mask)], pad_id=0)
    assert batch.response_mask[0].tolist() == [0, 1, 0, 0, 1]
    logprobs = torch.full((1, 5), -1.2, requires_grad=True)
    out = policy_loss(logprobs, batch.old_logprobs, batch.advantages, batch.response_mask, LossSpec())
    out.loss.backward()
    grad = logprobs.grad[0]
    assert grad[1] != 0 and grad[4] != 0 and grad[2] == 0 and grad[3] == 0
    assert out.units == 2
    other = collate([(prompt, response, [-1.0, -9.0, -9.0, -1.25], 1.0, mask)], pad_id=0)
    again = policy_loss(logprobs.detach(), other.old_logprobs, other.advantages, other.response_mask, LossSpec())
    assert again.loss.item() == out.loss.item()
