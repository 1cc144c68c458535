"""Tool calls through the chat templates real models ship, as TRL stores them (``trl/chat_templates``: the
originals TRL recognizes models by, read in place from the installed ``peer`` extra): each picks its reader, the
call a model writes in its syntax is read back typed, and two results are the tokens the template renders after the
model's turn; an episode's messages are what TRL's own ``parse_response`` reads of its turns; a template with no
tool calling is refused by name. The special tokens are the family's from ``tool_chat`` over a byte vocabulary,
since no model's vocabulary is reachable offline."""

import pytest
from rl.rollout.tool_calls import (
    BareJson,
    CompactCalls,
    DeepSeekCalls,
    HarmonyMessages,
    JsonInTags,
    KeyValueTags,
    PythonCalls,
    UnknownCallSyntax,
    XmlInTags,
    call_reader,
)
from rl.rollout.tool_format import ChatTemplateFormat
from rl.rollout.tool_workflow import ToolWorkflow
from rl.rollout.tools import ToolCall, tool_schema
from test_tool_call_syntax import ARGUMENTS, USER, called, forecast, rendering
from test_tool_workflow import ScriptedEngine, run
from tool_chat import byte_chat_tokenizer, real_chat_tokenizer, trl_chat_templates

from rl.types import PromptRow, assistant_message

TEMPLATES = trl_chat_templates()
pytestmark = pytest.mark.skipif(TEMPLATES is None, reason="TRL (the peer extra) is not installed: no real templates")

READ = {  # TRL's file name: (the family in tool_chat whose special tokens it has, the reader it picks)
    **dict.fromkeys(("qwen2_5", "qwen3", "qwen3_instruct_2507", "qwen3_vl"), ("qwen", JsonInTags)),
    **dict.fromkeys(("qwen3_5_think", "qwen3_5_nothink", "qwen3_6", "qwen3_8"), ("qwen", XmlInTags)),
    **dict.fromkeys(
        ("nemotron_3_nano", "nemotron_3_super", "nemotron_3_ultra", "nemotron_3_5_lightning"), ("qwen", XmlInTags)
    ),
    **dict.fromkeys(("llama3_1", "llama3_2"), ("llama3", BareJson)),
    **dict.fromkeys(("gemma4", "gemma4_v2", "gemma4_v3", "gemma4_v4", "gemma4_v5"), ("gemma4", CompactCalls)),
    "glm4moe": ("glm", KeyValueTags),
    "gptoss": ("harmony", HarmonyMessages),
    "deepseekv3": ("deepseek", DeepSeekCalls),
    **dict.fromkeys(("lfm2_v2", "lfm2_2_5", "lfm2_2_5_v2", "lfm2_2_5_vl"), ("lfm2", PythonCalls)),
}
TOOLS = [  # two results of the call, with the stand-in ids of results given none
    {"role": "tool", "name": "forecast", "content": c, "tool_call_id": f"call0000{i}"}
    for i, c in enumerate(("sunny", "rain"))
]
VLLM_PARSERS = {  # TRL's file name: the vLLM tool parser (vllm serve --tool-call-parser) for that family
    **dict.fromkeys(("qwen2_5", "qwen3", "qwen3_instruct_2507", "qwen3_vl"), "hermes"),
    **dict.fromkeys(("qwen3_5_think", "qwen3_5_nothink", "qwen3_6", "qwen3_8", "nemotron_3_nano"), "qwen3_coder"),
    **dict.fromkeys(("llama3_1", "llama3_2"), "llama3_json"),
    **{"gemma4": "gemma4", "glm4moe": "glm45", "deepseekv3": "deepseek_v3", "lfm2_2_5": "lfm2"},
}  # gpt-oss's ("openai") is a stub in vLLM 0.32, which parses harmony elsewhere
NO_TOOLS = ("cohere", "cohere2", "phi3", "phi3_5", "gemma", "gemma3", "deepseek_r1_distill", "qwen2_5_vl")


def real_format(name: str, folder) -> ChatTemplateFormat:
    return ChatTemplateFormat(real_chat_tokenizer(TEMPLATES / f"{name}.jinja", READ[name][0], folder))


def call_turn(fmt: ChatTemplateFormat) -> tuple[list[dict], list[int]]:
    """A conversation whose assistant turn calls ``forecast``, and that turn's ids as the model samples them after
    the prompt: the template's rendering (with two results after the turn) past what it shares with the prompt (a
    prompt that opens a think block the rendering closes at once, Qwen3.5's, leaves the close in the turn), up to
    the first token that ends a turn (GLM's and Gemma 4's: the one that opens the results)."""
    conversation = [*USER, called("forecast", fmt.arguments(ARGUMENTS))]
    prompt, whole = fmt.prompt(USER, []), rendering(fmt, conversation + TOOLS)
    shared = next((i for i, (a, b) in enumerate(zip(prompt, whole, strict=False)) if a != b), len(prompt))
    tail = whole[shared:]
    return conversation, tail[: next(i + 1 for i, t in enumerate(tail) if t in fmt.turn_ends)]


@pytest.mark.parametrize("name", READ)
def test_a_real_template_picks_its_reader_and_a_call_it_writes_is_read_back_typed(name, tmp_path):
    fmt = real_format(name, tmp_path)
    assert type(fmt.reader) is READ[name][1]
    _, turn = call_turn(fmt)
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS)]
    assert assistant_message(fmt.prose(turn))["content"] == ""  # the call alone, a think block apart
    answer = fmt.tokenizer.encode("It is sunny.", add_special_tokens=False) + [fmt.end_of_turn]
    assert fmt.calls(answer, [tool_schema(forecast)]) == []


@pytest.mark.parametrize("name", READ)
def test_two_results_are_what_the_real_template_renders_after_the_call(name, tmp_path):
    """Llama 3.1's and 3.2's templates refuse two calls in one turn: the results are rendered after one, as the
    template renders them after the turn the model sampled."""
    fmt = real_format(name, tmp_path)
    conversation, _ = call_turn(fmt)
    results = fmt.results([("forecast", "sunny"), ("forecast", "rain")])
    whole = rendering(fmt, conversation + TOOLS, generation_prompt=True)
    assert whole[-len(results) :] == results
    shown = fmt.tokenizer.decode(results, skip_special_tokens=False)
    assert shown.index("sunny") < shown.index("rain")


@pytest.mark.parametrize("name", VLLM_PARSERS)
def test_tailors_reader_reads_the_calls_vllms_own_parser_reads(name, tmp_path):
    """The reader a real template picks and vLLM's parser for the family (what ``vllm serve`` users trust, and what
    ``rollout.tool_parser`` names) read the same calls, typed alike, from the call the template writes."""
    from rl.rollout.vllm_tool_parser import VllmToolParser

    fmt = real_format(name, tmp_path)
    _, turn = call_turn(fmt)
    vllm = VllmToolParser(VLLM_PARSERS[name], fmt.tokenizer)
    theirs = vllm.read(fmt.tokenizer.decode(turn, skip_special_tokens=False), [tool_schema(forecast)])
    assert fmt.calls(turn, [tool_schema(forecast)]) == theirs == [ToolCall("forecast", ARGUMENTS)]


@pytest.mark.parametrize("name", NO_TOOLS)
def test_a_real_template_without_tool_calls_is_refused_by_name(name):
    tok = byte_chat_tokenizer("qwen")
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    with pytest.raises(UnknownCallSyntax, match="drops an assistant's tool calls"):
        call_reader(tok)


@pytest.mark.parametrize("name", [n for n in READ if n != "deepseekv3"])  # TRL parses no DeepSeek V3 turn
def test_a_tool_episodes_messages_are_what_trl_parses_of_its_turns(name, tmp_path):
    """The rewards' messages of an episode (a call, its results, an answer) are what TRL's ``parse_response`` reads
    of each turn, with the response template TRL gives the model (``add_response_schema``), the ids before the turn
    as its prefix and the tools to type arguments by: the same calls, content and reasoning, save the text of the
    token that ended the turn, which TRL leaves in where it is not the tokenizer's EOS (GLM's ``<|observation|>``).
    Where the header before the answer opens a think block (Qwen3.5's, Nemotron 3's), an answer that never closes
    it is all reasoning, as TRL reads Qwen3.5's (Nemotron 3's it reads as content)."""
    from trl.chat_template_utils import add_response_schema, parse_response

    fmt = real_format(name, tmp_path)
    add_response_schema(fmt.tokenizer)
    _, call = call_turn(fmt)
    stops = [fmt.tokenizer.decode([t], skip_special_tokens=False) for t in fmt.turn_ends]

    def trl_reads(turn: list[int], prefix: list[int]) -> dict:
        message = parse_response(fmt.tokenizer, turn, prefix=prefix, tools=[forecast])
        for stop in stops:
            message = {k: v.replace(stop, "") if isinstance(v, str) else v for k, v in message.items()}
        return message

    def messages(answer: str) -> tuple[list[dict], list[dict], bool]:
        """Ours and TRL's of the call and answer turns, and whether the answer's header opened a thought."""
        turns = [call, fmt.tokenizer.encode(answer, add_special_tokens=False) + [fmt.end_of_turn]]
        engine = ScriptedEngine(turns)
        said = run(ToolWorkflow(fmt, [forecast], None, 4, 1.0), engine, row=PromptRow("p", USER, "-")).messages
        theirs = [trl_reads(t, p) for t, p in zip(turns, engine.prompts, strict=True)]
        return [said[0], said[-1]], theirs, fmt.tokenizer.decode(engine.prompts[1]).rstrip().endswith("<think>")

    ours, theirs, thinking = messages("It is sunny.")
    assert ours[0] == theirs[0] and ours[0]["tool_calls"][0]["function"]["arguments"] == ARGUMENTS
    if thinking:
        assert ours[1] == {"role": "assistant", "content": "", "reasoning_content": "It is sunny."}
        ours, theirs, _ = messages("Sunny, it says.</think>\n\nIt is sunny.")
    assert ours[1] == theirs[1]
