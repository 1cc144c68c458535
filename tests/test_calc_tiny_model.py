"""``builtin:calc-tiny``'s vocabulary and chat template (rl/calc_tiny.py), without building the model: a Qwen / Hermes
call spelled in its tokens reads back as the same call, the template renders the tools and a tool's result, and the
warm start trains on the model's turns only."""

from rl.recipes.calculator import add
from rl.rollout.tool_format import ChatTemplateFormat
from rl.rollout.tools import ToolCall, tool_schema

from rl.calc_tiny import calc_tokenizer, call_text, warm_start_examples
from rl.data.arith import ArithConfig, make_split


def test_a_call_round_trips_through_the_vocabulary_in_a_few_tokens():
    tok = calc_tokenizer()
    text = call_text("add", {"a": 123, "b": 45})
    assert text == '<tool_call>{"name": "add", "arguments": {"a": 123, "b": 45}}</tool_call>'
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    pieces = ['{"name": "', *"add", '", "arguments": {"a": ', *"123", ', "b": ', *"45", "}}"]
    assert tok.convert_ids_to_tokens(ids) == ["<tool_call>", *pieces, "</tool_call>", "<|im_end|>"]  # 15 tokens
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert ChatTemplateFormat(tok).calls(ids, []) == [ToolCall("add", {"a": 123, "b": 45})]


def test_the_template_renders_the_tools_and_a_result_after_the_models_end_of_turn():
    tok = calc_tokenizer()
    fmt = ChatTemplateFormat(tok)
    user = [{"role": "user", "content": "123+45="}]
    shown = tok.decode(fmt.prompt(user, [tool_schema(add)]), skip_special_tokens=False)
    assert shown == "<|im_start|>system\n add<|im_end|>\n<|im_start|>user\n123+45=<|im_end|>\n<|im_start|>assistant\n"
    assert "add" not in tok.decode(fmt.prompt(user, []))  # no tools: no system turn
    result = tok.decode(fmt.results([("add", "168")]), skip_special_tokens=False)
    assert result == "\n<|im_start|>tool\n<tool_response>168</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_the_warm_start_shows_three_kinds_of_episode_and_trains_on_the_models_turns_only():
    tok = calc_tokenizer()
    rows = make_split(ArithConfig(num_train=3, num_test=0, digits=3, min_operands=2, max_operands=2), "train")
    kinds = warm_start_examples(tok, rows)
    texts = [tok.decode(ids, skip_special_tokens=False) for ids, _ in kinds]
    trained = [tok.decode([t for t in labels if t != -100], skip_special_tokens=False) for _, labels in kinds]
    a, b = rows[2].prompt.rstrip("=").split("+")
    assert " add" not in texts[0] and " add" in texts[1] and trained[:2] == [f"#{r.answer}<|im_end|>" for r in rows[:2]]
    assert trained[2] == call_text("add", {"a": int(a), "b": int(b)}) + f"<|im_end|>#{rows[2].answer}<|im_end|>"
    assert f"<tool_response>{rows[2].answer}</tool_response>" in texts[2]  # the result: context, no loss
