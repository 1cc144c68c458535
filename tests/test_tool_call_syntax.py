"""Tool calls in the syntax each chat template writes them (``rl.rollout.tool_calls``): the reader is picked from the
template's own rendering of a call, reads back the calls the template writes, with typed arguments, and the results'
ids join the sampled turn as the template renders what follows it; a syntax no reader reads is refused by name."""

import pytest
from rl.rollout.tool_calls import (
    BareJson,
    CompactCalls,
    DeepSeekCalls,
    HarmonyMessages,
    JsonInTags,
    KeyValueTags,
    MistralArgs,
    MistralList,
    PythonCalls,
    ResponseTemplate,
    UnknownCallSyntax,
    XmlInTags,
    call_reader,
)
from rl.rollout.tool_format import ChatTemplateFormat
from rl.rollout.tools import ToolCall, tool_schema
from tool_chat import byte_chat_tokenizer, saved_chat_tokenizer

from rl.types import assistant_message

FAMILIES = {
    "qwen": JsonInTags,
    "qwen3": JsonInTags,
    "qwen3.5": XmlInTags,
    "llama3": BareJson,
    "mistral": MistralList,
    "mistral11": MistralArgs,
    "pythonic": PythonCalls,
}
CALL_ID = "call00000"  # Mistral's templates take 9 letters and digits; the others ignore it
USER = [{"role": "user", "content": "Weather in 75001?"}]


def forecast(city: str, days: int, metric: bool, hours: list[int]) -> str:
    """The weather.

    Args:
        city: a city or a postcode
        days: how many days
        metric: degrees Celsius
        hours: which hours
    """
    return "sunny"


ARGUMENTS = {"city": "75001", "days": 3, "metric": True, "hours": [6, 18]}  # "75001" stays text: city is a string


def called(name: str, arguments: dict) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": CALL_ID, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def rendering(fmt: ChatTemplateFormat, messages: list[dict], generation_prompt: bool = False) -> list[int]:
    """The ids the template renders for ``messages``, the next assistant header after them if ``generation_prompt``."""
    return list(fmt.tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, return_dict=False))


def sampled_turn(fmt: ChatTemplateFormat, messages: list[dict]) -> list[int]:
    """The ids the template puts after the generation prompt for the conversation's last assistant turn, up to and
    with its end-of-turn token: what a model trained on the template samples."""
    prompt = fmt.prompt(messages[:-1], [])
    whole = rendering(fmt, messages)
    assert whole[: len(prompt)] == prompt
    turn = whole[len(prompt) :]
    return turn[: next(i for i, t in enumerate(turn) if t in fmt.turn_ends) + 1]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_template_picks_the_reader_and_its_calls_are_read_back_typed(family):
    fmt = ChatTemplateFormat(byte_chat_tokenizer(family))
    assert type(fmt.reader) is FAMILIES[family]
    turn = sampled_turn(fmt, [*USER, called("forecast", ARGUMENTS)])
    with_id = CALL_ID if family == "mistral" else None  # the one syntax whose calls carry their id
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS, with_id)]
    assert assistant_message(fmt.prose(turn))["content"] == ""  # the turn is its call alone (Qwen3: and a think block)
    answer = fmt.tokenizer.encode("It is sunny.", add_special_tokens=False) + [fmt.end_of_turn]
    assert fmt.calls(answer, [tool_schema(forecast)]) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_results_are_what_the_template_renders_after_the_sampled_turn(family):
    """Prompt + sampled turn + results, appended, is the template's rendering of the whole conversation, save where
    the template renders the turn before a result differently from how the model sampled it (Qwen3 drops the empty
    think block): the results are the rendering's tail after that turn all the same."""
    fmt = ChatTemplateFormat(byte_chat_tokenizer(family))
    conversation = [*USER, called("forecast", ARGUMENTS)]
    prompt, turn = fmt.prompt(USER, []), sampled_turn(fmt, conversation)
    results = fmt.results([("forecast", "sunny"), ("forecast", "rain")])
    tools = [
        {"role": "tool", "name": "forecast", "content": c, "tool_call_id": f"call0000{i}"}
        for i, c in enumerate(("sunny", "rain"))
    ]  # the stand-in ids of results given none
    whole = rendering(fmt, conversation + tools, generation_prompt=True)
    assert whole[-len(results) :] == results and "sunny" in fmt.decode(results) and "rain" in fmt.decode(results)
    if family == "qwen3":
        assert "<think>" in fmt.decode(turn) and prompt + turn + results != whole  # rewritten, yet joined right
        assert fmt.tokenizer.decode(results).startswith("\n<|im_start|>user\n<tool_response>")
    else:
        assert prompt + turn + results == whole


def test_bare_json_reads_several_calls_and_leaves_answers_alone():
    fmt = ChatTemplateFormat(byte_chat_tokenizer("llama3"))

    def read(text: str) -> list[ToolCall]:
        return fmt.calls(fmt.tokenizer.encode(text, add_special_tokens=False) + [fmt.end_of_turn], [])

    two = '{"name": "add", "parameters": {"a": 1}}; {"name": "mul", "arguments": {"b": 2}}'
    assert read(two) == [ToolCall("add", {"a": 1}), ToolCall("mul", {"b": 2})]
    assert read('<|python_tag|>{"name": "add", "parameters": {"a": 1}}') == [ToolCall("add", {"a": 1})]
    assert read('{"answer": 5}') == [] and read("The answer is 5.") == []  # JSON that names no tool is an answer
    assert read('{"name": "add", "parameters": [1]}') == [ToolCall("add", None)]
    assert read('{"name": "add", "parameters": {"a": 1') == [ToolCall("?", None)]


def test_mistral_calls_keep_their_ids_for_the_results_to_name():
    fmt = ChatTemplateFormat(byte_chat_tokenizer("mistral"))

    def read(text: str) -> list[ToolCall]:
        return fmt.calls(fmt.tokenizer.encode(text, add_special_tokens=False) + [fmt.end_of_turn], [])

    two = '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}, "id": "a1b2c3d4e"}, {"name": "mul", "arguments": "{}"}]'
    assert read(two) == [ToolCall("add", {"a": 1}, "a1b2c3d4e"), ToolCall("mul", {})]
    assert read(" The answer is 5.") == [] and fmt.prose(fmt.tokenizer.encode(" 5</s>")) == "5"
    assert read("[TOOL_CALLS] [{") == [ToolCall("?", None)] and read('[TOOL_CALLS] {"a": 1}') == [ToolCall("?", None)]
    named = fmt.decode(fmt.results([("add", "3"), ("mul", "0")], ["a1b2c3d4e", None]))
    assert '"call_id": "a1b2c3d4e"' in named and '"call_id": "call00001"' in named  # the model's id, else a stand-in
    refused = fmt.decode(fmt.results([("add", "3")], ["too-long-an-id"]))  # the template refuses it: stand-ins
    assert '"call_id": "call00000"' in refused


def test_mistral_v11_calls_are_each_named_before_their_arguments():
    fmt = ChatTemplateFormat(byte_chat_tokenizer("mistral11"))

    def read(text: str) -> list[ToolCall]:
        return fmt.calls(fmt.tokenizer.encode(text, add_special_tokens=False) + [fmt.end_of_turn], [])

    assert read('Let me add.[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]mul[ARGS]{"b": 2}') == [
        ToolCall("add", {"a": 1}),
        ToolCall("mul", {"b": 2}),
    ]
    assert fmt.prose(fmt.tokenizer.encode('Let me add.[TOOL_CALLS]add[ARGS]{"a": 1}')) == "Let me add."
    assert read("[TOOL_CALLS]add[ARGS]{oops") == [ToolCall("add", None)] and read("[TOOL_CALLS]add") == [
        ToolCall("add", None)
    ]


def test_glm_calls_are_read_typed_and_results_follow_the_token_that_opened_them(tmp_path):
    """GLM's template writes no end token after a turn: the model stops on ``<|observation|>``, which opens the
    results' part, so the results are what follows that token."""
    fmt = ChatTemplateFormat(saved_chat_tokenizer("glm", tmp_path))
    observation = fmt.tokenizer.convert_tokens_to_ids("<|observation|>")
    assert type(fmt.reader) is KeyValueTags and observation in fmt.turn_ends
    conversation = [*USER, called("forecast", ARGUMENTS)]
    prompt = fmt.prompt(USER, [])
    whole_turn = rendering(fmt, conversation)
    turn = whole_turn[len(prompt) :] + [observation]  # the model's turn, as it stops
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS)]
    assert assistant_message(fmt.prose(turn))["content"] == ""  # the empty think block is reasoning_content
    results = fmt.results([("forecast", "sunny"), ("forecast", "rain")])
    tools = [{"role": "tool", "name": "forecast", "content": c} for c in ("sunny", "rain")]
    whole = rendering(fmt, conversation + tools, generation_prompt=True)
    assert prompt + turn + results == whole
    assert fmt.decode(results).startswith("<tool_response>\nsunny\n</tool_response>")  # <|observation|> sampled
    unknown = "<tool_call>lookup\n<arg_key>n</arg_key>\n<arg_value>7</arg_value>\n</tool_call>"
    assert fmt.calls(fmt.tokenizer.encode(unknown, add_special_tokens=False), []) == [ToolCall("lookup", {"n": 7})]
    without = byte_chat_tokenizer("glm")  # no generation config: <|observation|> ends no turn, and nothing joins
    with pytest.raises(ValueError, match="neither ends the assistant's turn nor opens a tool result"):
        ChatTemplateFormat(without).results([("forecast", "sunny")])


def test_gemma4_calls_are_read_typed_and_the_results_continue_the_models_turn(tmp_path):
    """Gemma 4 writes ``call:NAME{...}`` in its own notation and stops on ``<|tool_response>`` (its generation
    config's), the token that opens the results: they follow it inside the model's turn, and the model goes on
    with no header of its own."""
    fmt = ChatTemplateFormat(saved_chat_tokenizer("gemma4", tmp_path))
    opened = fmt.tokenizer.convert_tokens_to_ids("<|tool_response>")
    assert type(fmt.reader) is CompactCalls and opened in fmt.turn_ends
    conversation = [*USER, called("forecast", ARGUMENTS)]
    said = 'call:forecast{city:<|"|>75001<|"|>,days:3,hours:[6,18],metric:true}'
    turn = fmt.tokenizer.encode(f"<|tool_call>{said}<tool_call|><|tool_response>", add_special_tokens=False)
    rendered = rendering(fmt, conversation)
    assert rendered[-len(turn) :] == turn  # as the template writes a call with no result yet
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS)]
    assert fmt.prose(turn) == ""
    results = fmt.results([("forecast", "sunny"), ("forecast", "rain")])
    tools = [{"role": "tool", "name": "forecast", "content": c} for c in ("sunny", "rain")]
    answer = fmt.tokenizer.encode("It is sunny.<turn|>", add_special_tokens=False)
    whole = rendering(fmt, [*conversation, *tools, {"role": "assistant", "content": "It is sunny."}])
    assert rendered + results + answer == whole[:-1]  # nothing between; then the template's newline
    assert fmt.tokenizer.decode(results) == (
        'response:forecast{value:<|"|>sunny<|"|>}<tool_response|><|tool_response>response:forecast{value:<|"|>rain'
        '<|"|>}<tool_response|>'
    )
    assert fmt.calls(answer, []) == []

    def read(text: str) -> list[ToolCall]:
        return fmt.calls(fmt.tokenizer.encode(text, add_special_tokens=False), [tool_schema(forecast)])

    nested = 'call:plan{steps:[{at:7,say:<|"|>a, b}<|"|>}],note:None, days:<|"|>2<|"|>}'  # commas, braces in text
    assert read(f"<|tool_call>{nested}<tool_call|>") == [
        ToolCall("plan", {"steps": [{"at": 7, "say": "a, b}"}], "note": None, "days": "2"})
    ]
    assert read('<|tool_call>call:forecast{days:<|"|>2<|"|>,city:75001}<tool_call|>') == [
        ToolCall("forecast", {"days": 2, "city": "75001"})  # typed by the schema, as the other readers do
    ]
    assert read("<|tool_call>call:forecast{days:2<tool_call|>") == [ToolCall("forecast", None)]
    assert read("<|tool_call>call:forecast{days:2} extra<tool_call|>") == [ToolCall("forecast", None)]
    assert read("<|tool_call>forecast<tool_call|>") == [ToolCall("forecast", None)]
    thought = "<|channel>thought\nAsk the tool.<channel|>Let me look."
    assert fmt.prose(fmt.tokenizer.encode(f"{thought}<|tool_call>{said}<tool_call|>")) == "Let me look."


def test_gpt_oss_calls_are_read_from_either_header_and_results_follow_the_call(tmp_path):
    """gpt-oss addresses a call ``to=functions.NAME`` in its channel header as it samples it, where its template
    writes the recipient in the role header; both are read. The call ends on ``<|call|>`` (its generation
    config's), and the results follow it as the template renders them; a turn's content is its ``final`` channel."""
    fmt = ChatTemplateFormat(saved_chat_tokenizer("harmony", tmp_path))
    assert type(fmt.reader) is HarmonyMessages and fmt.tokenizer.convert_tokens_to_ids("<|call|>") in fmt.turn_ends
    schemas = [tool_schema(forecast)]
    conversation = [*USER, called("forecast", ARGUMENTS)]
    prompt, turn = fmt.prompt(USER, []), sampled_turn(fmt, conversation)  # the template's: " to=" in the role header
    assert fmt.calls(turn, schemas) == [ToolCall("forecast", ARGUMENTS)] and fmt.prose(turn) == ""
    thinks = "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant"
    sampled = f'{thinks}<|channel|>commentary to=functions.forecast <|constrain|>json<|message|>{{"days": 3}}<|call|>'
    assert fmt.calls(fmt.tokenizer.encode(sampled), schemas) == [ToolCall("forecast", {"days": 3})]
    assert fmt.prose(fmt.tokenizer.encode(sampled)) == ""  # the analysis channel is not the turn's content
    broken = '<|channel|>commentary to=functions.forecast json<|message|>{"days": <|call|>'
    assert fmt.calls(fmt.tokenizer.encode(broken), schemas) == [ToolCall("forecast", None)]
    results = fmt.results([("forecast", "sunny")])
    tools = [{"role": "tool", "name": "forecast", "content": "sunny"}]
    whole = rendering(fmt, conversation + tools, generation_prompt=True)
    assert prompt + turn + results == whole
    assert fmt.tokenizer.decode(results) == (
        '<|start|>functions.forecast to=assistant<|channel|>commentary<|message|>"sunny"<|end|><|start|>assistant'
    )
    answer = fmt.tokenizer.encode(f"{thinks}<|channel|>final<|message|>It is sunny.<|return|>")
    assert fmt.calls(answer, schemas) == [] and fmt.prose(answer) == "It is sunny."


def test_python_calls_are_read_as_literals_and_other_lists_are_answers():
    fmt = ChatTemplateFormat(byte_chat_tokenizer("pythonic"))

    def read(text: str) -> list[ToolCall]:
        return fmt.calls(fmt.tokenizer.encode(text, add_special_tokens=False) + [fmt.end_of_turn], [])

    two = '[add(a=1, b=[2, 3]), search(query="x, y", exact=true, k=None)]'
    assert read(two) == [
        ToolCall("add", {"a": 1, "b": [2, 3]}),
        ToolCall("search", {"query": "x, y", "exact": True, "k": None}),
    ]
    assert read("[1, 2, 3]") == [] and read("The answer is [5].") == [] and read("[]") == []
    assert read("[add(1, b=2)]") == [ToolCall("add", None)] and read("[add(a=b)]") == [ToolCall("add", None)]
    assert read("[add(a=1]") == [ToolCall("?", None)]
    assert fmt.prose(fmt.tokenizer.encode("[5, 6]<|eot|>")) == "[5, 6]"  # an answer is its text


def test_lfm2_calls_are_read_between_its_markers_though_its_template_keeps_them_in_the_text(tmp_path):
    """LFM2's template renders an assistant's text and ignores ``tool_calls``; its vocabulary's
    ``<|tool_call_start|>`` / ``<|tool_call_end|>`` pick the reader, and the results are its tool turns."""
    fmt = ChatTemplateFormat(saved_chat_tokenizer("lfm2", tmp_path))
    assert type(fmt.reader) is PythonCalls
    said = (
        'Let me look.<|tool_call_start|>[forecast(city="75001", days=3, metric=true, hours=[6, 18])]<|tool_call_end|>'
    )
    turn = fmt.tokenizer.encode(said, add_special_tokens=False) + [fmt.end_of_turn]
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS)]
    assert fmt.prose(turn) == "Let me look."
    objects = '<|tool_call_start|>[{"name": "forecast", "arguments": {"days": 3}}]<|tool_call_end|>'
    assert fmt.calls(fmt.tokenizer.encode(objects), []) == [ToolCall("forecast", {"days": 3})]
    results = fmt.results([("forecast", "sunny")])
    conversation = [*USER, {"role": "assistant", "content": said}, {"role": "tool", "content": "sunny"}]
    whole = rendering(fmt, conversation, generation_prompt=True)
    assert fmt.prompt(USER, []) + turn + results == whole
    assert fmt.calls(fmt.tokenizer.encode("It is sunny.") + [fmt.end_of_turn], []) == []


def test_olmo3_calls_are_read_one_a_line_and_results_follow_the_turn_the_model_ended(tmp_path):
    """Olmo 3 writes its calls bare, one a line, between ``<function_calls>`` marks, with JSON values; its template
    ends the last turn with the EOS but an earlier one with ``<|im_end|>``, on which the model stops (its generation
    config's): the results follow that token as environment turns."""
    fmt = ChatTemplateFormat(saved_chat_tokenizer("olmo3", tmp_path))
    end = fmt.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert type(fmt.reader) is PythonCalls and end in fmt.turn_ends
    said = 'Let me look.<function_calls>forecast(city="75001", days=3, metric=true, hours=[6, 18])\nnap(s=null)'
    turn = fmt.tokenizer.encode(f"{said}</function_calls>", add_special_tokens=False) + [end]
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS), ToolCall("nap", {"s": None})]
    assert fmt.prose(turn) == "Let me look."
    results = fmt.results([("forecast", "sunny")])
    conversation = [*USER, {**called("forecast", ARGUMENTS), "content": "Let me look."}]
    tools = [{"role": "tool", "name": "forecast", "content": "sunny"}]
    whole = rendering(fmt, conversation + tools, generation_prompt=True)
    one_call = fmt.tokenizer.encode(said.split("\n")[0] + "</function_calls>", add_special_tokens=False) + [end]
    assert fmt.prompt(USER, []) + one_call + results == whole
    assert fmt.tokenizer.decode(results) == "\n<|im_start|>environment\nsunny<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_that_takes_arguments_as_json_text_is_read_and_its_results_join():
    """A template that adds a call's arguments to a string (OpenAI's message form) cannot render them as an object:
    the probe and the results' stand-in call give them as JSON text instead."""
    fmt = ChatTemplateFormat(byte_chat_tokenizer("string_arguments"))
    assert type(fmt.reader) is JsonInTags and fmt.arguments({"x": 1}) == '{"x": 1}'
    as_text = {**called("forecast", ARGUMENTS)}
    as_text["tool_calls"] = [{**as_text["tool_calls"][0], "function": {"name": "forecast", "arguments": '{"days": 3}'}}]
    turn = sampled_turn(fmt, [*USER, as_text])
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", {"days": 3})]
    tools = [{"role": "tool", "name": "forecast", "content": "sunny"}]
    whole = rendering(fmt, [*USER, as_text, *tools], generation_prompt=True)
    assert fmt.prompt(USER, []) + turn + fmt.results([("forecast", "sunny")]) == whole
    assert ChatTemplateFormat(byte_chat_tokenizer("qwen")).arguments({"x": 1}) == {"x": 1}  # most take the object


def test_deepseek_calls_are_read_in_both_forms_and_the_results_follow_the_turn(tmp_path):
    """DeepSeek V3.1 writes each call's name and JSON arguments between its call tokens (V3 a fenced block after
    ``function``); its template adds the arguments to a string (so they are JSON text) and puts the results after
    the turn with no header, the model answering after them."""
    fmt = ChatTemplateFormat(saved_chat_tokenizer("deepseek", tmp_path))
    assert type(fmt.reader) is DeepSeekCalls and fmt.arguments({}) == "{}"
    call = '<｜tool▁call▁begin｜>forecast<｜tool▁sep｜>{"city": "75001", "days": 3, "metric": true, "hours": [6, 18]}'
    said = f"Let me look.<｜tool▁calls▁begin｜>{call}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    turn = fmt.tokenizer.encode(said, add_special_tokens=False) + [fmt.end_of_turn]
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS)]
    assert fmt.prose(turn) == "Let me look."
    v3 = '<｜tool▁call▁begin｜>function<｜tool▁sep｜>forecast\n```json\n{"days": 3}\n```<｜tool▁call▁end｜>'
    assert fmt.calls(fmt.tokenizer.encode(v3), []) == [ToolCall("forecast", {"days": 3})]
    results = fmt.results([("forecast", "sunny")])
    as_text = {"id": CALL_ID, "type": "function", "function": {"name": "forecast", "arguments": call.split("｜>")[-1]}}
    conversation = [*USER, {"role": "assistant", "content": "Let me look.", "tool_calls": [as_text]}]
    tools = [{"role": "tool", "name": "forecast", "content": "sunny"}]
    whole = rendering(fmt, conversation + tools, generation_prompt=True)
    assert fmt.prompt(USER, []) + turn + results == whole
    assert fmt.tokenizer.decode(results) == "<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>"


def test_xml_calls_without_a_function_or_a_schema_are_still_read():
    fmt = ChatTemplateFormat(byte_chat_tokenizer("qwen3.5"))

    def read(text: str) -> list[ToolCall]:
        return fmt.calls(fmt.tokenizer.encode(text, add_special_tokens=False), [])

    unknown = "<tool_call>\n<function=lookup>\n<parameter=n>\n7\n</parameter>\n<parameter=w>\nParis\n</parameter>\n"
    assert read(unknown + "</function>\n</tool_call>") == [ToolCall("lookup", {"n": 7, "w": "Paris"})]
    assert read("<tool_call>lookup</tool_call>") == [ToolCall("?", None)]


def test_a_tokenizers_own_response_template_reads_its_calls():
    tok = byte_chat_tokenizer("qwen")
    tok.response_template = {  # transformers' response parsing, for the test template's <tool_call> JSON
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "tool_calls": {
                "open": "<tool_call>",
                "close": "</tool_call>",
                "repeats": True,
                "content": "json",
                "transform": {"type": "function", "function": "{content}"},
            },
            "content": {"close": "<|im_end|>", "content": "text"},
        },
    }
    fmt = ChatTemplateFormat(tok)
    assert isinstance(fmt.reader, ResponseTemplate)
    said = {**called("forecast", {**ARGUMENTS, "days": "3"}), "content": "Let me look. "}
    turn = sampled_turn(fmt, [*USER, said])
    assert fmt.calls(turn, [tool_schema(forecast)]) == [ToolCall("forecast", ARGUMENTS)]  # "3" typed by the schema
    assert fmt.prose(turn) == "Let me look."
    assert fmt.calls(tok.encode("Sunny.", add_special_tokens=False) + [fmt.end_of_turn], []) == []


def test_a_syntax_no_reader_reads_is_refused_showing_it():
    with pytest.raises(UnknownCallSyntax, match=r'does not read \(\.\.\..*<invoke name="tailor_probe">'):
        call_reader(byte_chat_tokenizer("minimax"))
    plain = byte_chat_tokenizer("qwen")
    plain.chat_template = "{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
    with pytest.raises(UnknownCallSyntax, match="drops an assistant's tool calls"):
        call_reader(plain)
