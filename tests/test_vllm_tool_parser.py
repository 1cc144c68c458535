"""``rollout.tool_parser``: calls in a syntax Tailor's readers do not read, read by vLLM's own tool parser of that
name (``vllm serve --tool-call-parser``), on templates in the shape of the models' (Kimi K2's, MiniMax-M2's); the
results still come from the chat template, naming the ids the model gave."""

import asyncio

import pytest
from rl.rollout.engine import SamplingSpec
from rl.rollout.tool_calls import UnknownCallSyntax
from rl.rollout.tool_format import ChatTemplateFormat
from rl.rollout.tool_workflow import ToolWorkflow
from rl.rollout.tools import ToolCall, tool_schema
from rl.rollout.vllm_tool_parser import VllmToolParser
from rl.rollout.workflow import EpisodeTrace
from test_tool_call_syntax import ARGUMENTS, USER, forecast, rendering
from test_tool_workflow import ScriptedEngine
from tool_chat import byte_chat_tokenizer

from rl.types import PromptRow

KIMI_ID = "functions.forecast:0"  # Kimi's call id: the function's name and the call's index
KIMI_CALL = (
    '<|tool_calls_section_begin|><|tool_call_begin|>functions.forecast:0<|tool_call_argument_begin|>{"city": "75001", '
    '"days": 3, "metric": true, "hours": [6, 18]}<|tool_call_end|><|tool_calls_section_end|>'
)


def ids(fmt: ChatTemplateFormat, text: str) -> list[int]:
    return fmt.tokenizer.encode(text, add_special_tokens=False)


def test_kimi_calls_are_read_by_vllms_parser_and_their_results_name_the_models_ids():
    with pytest.raises(UnknownCallSyntax, match="drops an assistant's tool calls"):  # it writes the id, not the name
        ChatTemplateFormat(byte_chat_tokenizer("kimi"))
    fmt = ChatTemplateFormat(byte_chat_tokenizer("kimi"), tool_parser="kimi_k2")
    assert isinstance(fmt.reader, VllmToolParser)
    turn = ids(fmt, f"Let me look.{KIMI_CALL}") + [fmt.end_of_turn]
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS, KIMI_ID)]
    assert fmt.prose(turn) == "Let me look."
    assert fmt.calls(ids(fmt, "It is sunny.") + [fmt.end_of_turn], [tool_schema(forecast)]) == []
    results = fmt.results([("forecast", "sunny")], [KIMI_ID])
    assert fmt.tokenizer.decode(results, skip_special_tokens=False) == (
        "<|im_system|>tool<|im_middle|>## Return of functions.forecast:0\nsunny<|im_end|><|im_assistant|>assistant"
        "<|im_middle|>"
    )
    call = {"id": KIMI_ID, "type": "function", "function": {"name": "forecast", "arguments": ARGUMENTS}}
    conversation = [*USER, {"role": "assistant", "content": "Let me look.", "tool_calls": [call]}]
    tool = {"role": "tool", "name": "forecast", "content": "sunny", "tool_call_id": KIMI_ID}
    assert fmt.prompt(USER, []) + turn + results == rendering(fmt, [*conversation, tool], generation_prompt=True)


def test_a_kimi_episode_runs_its_call_and_the_rewards_see_it_with_its_id():
    fmt = ChatTemplateFormat(byte_chat_tokenizer("kimi"), tool_parser="kimi_k2")
    turns = [ids(fmt, KIMI_CALL) + [fmt.end_of_turn], ids(fmt, "It is sunny.") + [fmt.end_of_turn]]
    workflow = ToolWorkflow(fmt, [forecast], None, 4, 1.0)
    row = PromptRow("p", USER, "-")
    episode = asyncio.run(workflow.run(ScriptedEngine(turns), EpisodeTrace("e"), row, SamplingSpec(max_tokens=400)))
    assert episode.tools.calls == 1 and episode.tools.failures == {}
    assert episode.sample.tokens == turns[0] + fmt.results([("forecast", "sunny")], [KIMI_ID]) + turns[1]
    assert episode.messages[0]["tool_calls"] == [
        {"id": KIMI_ID, "type": "function", "function": {"name": "forecast", "arguments": ARGUMENTS}}
    ]
    assert episode.messages[-1]["content"] == "It is sunny."


def test_minimax_calls_are_read_by_vllms_parser_typed_by_the_tools_schema():
    fmt = ChatTemplateFormat(byte_chat_tokenizer("minimax"), tool_parser="minimax_m2")
    said = (
        '<minimax:tool_call><invoke name="forecast"><parameter name="city">75001</parameter><parameter name="days">3'
        '</parameter><parameter name="metric">true</parameter><parameter name="hours">[6, 18]</parameter></invoke>'
        "</minimax:tool_call>"
    )
    turn = ids(fmt, said) + [fmt.end_of_turn]
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS)]  # no id: it writes none
    assert fmt.prose(turn) == ""


def test_a_name_vllm_has_no_parser_under_is_refused_with_its_names():
    with pytest.raises(ValueError, match=r"vLLM has no tool parser named 'kimi' \(its names: .*kimi_k2, .*minimax_m2"):
        ChatTemplateFormat(byte_chat_tokenizer("kimi"), tool_parser="kimi")
