"""Built-in rewards: math-verify accuracy on tricky formats, format, arithmetic exact match, overlong."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from rl.rewards.math import arith_exact, arith_steps, format_reward, math_accuracy, overlong_penalty

ACCURACY_CASES = [
    # (completion, gold answer, expected reward)
    (r"so the result is \boxed{72}.", "72", 1.0),
    (r"\boxed{73}", "72", 0.0),
    (r"The answer is \boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    (r"\boxed{\dfrac{3}{4}}", r"\frac{3}{4}", 1.0),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}", 1.0),
    (r"\boxed{\{1,2\}}", r"\{1, 2\}", 1.0),
    (r"\boxed{x^{2}+1}", "x^2+1", 1.0),
    (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"(3, \frac{\pi}{2})", 1.0),
    (r"\boxed{-3}", "-3", 1.0),
    (r"\boxed{3}", "-3", 0.0),
    ("#### 1,234", "1234", 1.0),
    ("#### 1234", "1,234", 1.0),
    ("#### 1234", "1243", 0.0),
    ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "She sold <<48+24=72>>72 clips.\n#### 72", 1.0),
    ("#### 72. Check: 3+4=7", "72", 1.0),
    ("answer: -7", "-7", 1.0),
    (r"Answer: the final answer is $\frac{2}{3}$", "2/3", 1.0),
    (r"first \boxed{5} wait, no, 2+2 is 4", "5", 1.0),
    (r"\boxed{10}", "$10$", 1.0),
    ("no answer here", "3", 0.0),
    # a numeric answer left as the question's arithmetic is not an answer (a policy echoing "43 + 12" scored 1.0)
    ("43 + 12", "55", 0.0),
    ("The answer is 43 + 12.", "55", 0.0),
    (r"\boxed{43+12}", "55", 0.0),
    (r"\boxed{7 \times 8}", "56", 0.0),
    ("43 + 12 = 55", "55", 1.0),
    (r"\boxed{1\frac{1}{2}}", r"\frac{3}{2}", 1.0),
    (r"\boxed{2^{10}}", "1024", 1.0),
    (r"\boxed{2+\sqrt{3}}", r"2+\sqrt{3}", 1.0),
    ("12 + 43", "12 + 43", 1.0),
    ("", "3", 0.0),
]


@pytest.mark.parametrize(("completion", "gold", "expected"), ACCURACY_CASES)
def test_math_accuracy_formats(completion: str, gold: str, expected: float) -> None:
    assert math_accuracy([""], [completion], answer=[gold]) == [expected]
    chat = [{"role": "assistant", "content": completion}]
    assert math_accuracy([""], [chat], answer=[gold]) == [expected]


def test_math_accuracy_batch_and_unparsable_gold() -> None:
    out = math_accuracy(["p"] * 3, [r"\boxed{2}", r"\boxed{3}", "#### 5"], answer=["2", "2", ""], level=[1, 2, 3])
    assert out == [1.0, 0.0, None]


def test_math_accuracy_outside_main_thread() -> None:
    """math-verify's signal timeouts only work in the main thread; elsewhere they must be turned off."""
    with ThreadPoolExecutor(1) as ex:
        out = ex.submit(math_accuracy, [""] * 2, [r"\boxed{\frac{1}{2}}", r"\boxed{1}"], answer=["0.5", "2"])
        assert out.result() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (r"so \boxed{42}", 1.0),
        (r"\boxed{}", 0.0),
        ("work...\n#### 42", 1.0),
        ("####", 0.0),
        ("Answer: 42", 1.0),
        ("the answer is 42", 0.0),
        ("42", 0.0),
    ],
)
def test_format_reward(completion: str, expected: float) -> None:
    assert format_reward([""], [completion]) == [expected]
    assert format_reward([""], [[{"role": "assistant", "content": completion}]]) == [expected]


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("12+52=64;#64", "64", 1.0),
        ("12+52=64;#64", 64, 1.0),
        ("12+52=64;#65", "64", 0.0),
        ("3-5=-2;#-2", "-2", 1.0),
        ("#64;#63", "64", 0.0),  # only the last marker counts
        ("#64 ", "64", 1.0),
        ("#64abc", "64", 0.0),
        ("#6 4", "64", 0.0),
        ("answer: 64", "64", 1.0),
        ("#1 then answer: 64.", "64", 1.0),
        ("64", "64", 0.0),  # no marker
        ("#", "64", 0.0),
    ],
)
def test_arith_exact(completion: str, gold: object, expected: float) -> None:
    assert arith_exact([""], [completion], answer=[gold]) == [expected]


def test_arith_exact_chat_and_bad_gold() -> None:
    chat = [[{"role": "assistant", "content": "1+1=2;#2"}]] * 2
    assert arith_exact(["", ""], chat, answer=["2", "two"]) == [1.0, None]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("12+45=57;57+7=64;#64", 1.0),  # every part of the reference
        (" 12+45=57 ; 57+7=64;#64\n", 1.0),  # spaces around parts do not matter
        ("12+45=57;57+7=65;#65", 1 / 3),  # the first step right, then wrong
        ("12+45=56;56+7=63;#63", 0.0),  # later parts consistent with a wrong first step earn nothing
        ("12+45=57", 1 / 3),  # stopped early
        ("#64", 0.0),  # the answer without the steps
        ("", 0.0),
    ],
)
def test_arith_steps_credits_the_leading_reference_parts(completion: str, expected: float) -> None:
    assert arith_steps([""], [completion], solution=["12+45=57;57+7=64;#64"]) == [pytest.approx(expected)]


def test_overlong_penalty_tokens_ids_and_characters() -> None:
    fn = overlong_penalty(max_len=100, buffer_len=20)
    lengths = [10, 80, 90, 95, 100, 150]
    expected = [0.0, 0.0, -0.5, -0.75, -1.0, -1.0]
    assert fn([""] * 6, ["x"] * 6, completion_length=lengths) == expected
    assert fn([""] * 6, ["x"] * 6, completion_ids=[[0] * n for n in lengths]) == expected
    assert fn([""] * 6, ["x" * n for n in lengths]) == expected  # no token lengths: characters


def test_a_tokenizer_with_a_response_template_shapes_chat_completions_as_it_parses_them() -> None:
    """A tokenizer that ships a ``response_template`` (transformers' response parsing, Gemma 4's repos) shapes a chat
    completion as TRL's ``GRPOTrainer`` does: its parsed message, the reasoning under the template's name."""
    from tool_chat import byte_chat_tokenizer

    from rl.inputs.prompting import PromptEncoder
    from rl.types import Sample

    tok = byte_chat_tokenizer("qwen")
    tok.response_template = {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "thinking": {"open": "<think>", "close": "</think>", "content": "text"},
            "content": {"close": "<|im_end|>", "content": "text"},
        },
    }
    encoder = PromptEncoder(tok)
    chat = [{"role": "user", "content": "6 * 7?"}]

    def sample(text: str) -> Sample:
        ids = tok.encode(text, add_special_tokens=False)
        return Sample(0, ids, [], [], "stop", text=tok.decode(ids, skip_special_tokens=True))

    said = encoder.completions(chat, [sample("<think>maybe 41?</think>It is \\boxed{42}.<|im_end|>")])
    assert said == [[{"role": "assistant", "thinking": "maybe 41?", "content": "It is \\boxed{42}."}]]
    assert math_accuracy([chat], said, ["42"]) == [1.0]
    tok.response_template = None  # without one: the text, its think block and all, as TRL decodes it
    assert encoder.completions(chat, [sample("<think>maybe 41?</think>It is 42.<|im_end|>")]) == [
        [{"role": "assistant", "content": "<think>maybe 41?</think>It is 42."}]
    ]
    assert encoder.completions("6 * 7 =", [sample("42")]) == ["42"]  # text prompts as is


def test_overlong_penalty_rejects_bad_buffer() -> None:
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(max_len=10, buffer_len=20)


def test_a_reasoning_models_completion_is_its_whole_text_and_is_scored_after_its_think_block() -> None:
    """A chat completion reaches rewards as TRL's ``GRPOTrainer`` passes one it does not parse (no tools, no
    ``response_template``): the decoded text, think block and all, as ``content``, so TRL's ``think_format_reward``
    scores it; the built-in rewards score the answer after the block, so a boxed guess inside it neither scores nor
    hides the answer."""
    from trl.rewards import think_format_reward

    from rl.inputs.prompting import PromptEncoder

    chat = [{"role": "user", "content": "6 * 7?"}]
    text = "<think>\nmaybe \\boxed{41}?\n</think>\n\nIt is \\boxed{42}."
    thought = PromptEncoder.completion(chat, text)
    assert thought == [{"role": "assistant", "content": text}]
    after_prefilled_think = PromptEncoder.completion(chat, "no, \\boxed{42}</think>The answer: \\boxed{41}")
    assert think_format_reward([thought, after_prefilled_think]) == [1.0, 0.0]  # <think> was in the prompt
    assert math_accuracy([chat] * 2, [thought, after_prefilled_think], ["42", "42"]) == [1.0, 0.0]
    assert format_reward([chat], [PromptEncoder.completion(chat, "<think>\\boxed{42}</think>42")]) == [0.0]
    assert PromptEncoder.completion("6 * 7 =", "<think>x</think>42") == "<think>x</think>42"  # text prompts as is
    assert math_accuracy(["6 * 7 ="], ["<think>\\boxed{41}</think>\\boxed{42}"], ["42"]) == [1.0]
