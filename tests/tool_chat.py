"""Test-only tool formats: a byte-level tokenizer with a Qwen-style tool-calling chat template, built offline in
milliseconds (for tests of the ``<tool_call>`` format without a hub model), and ``EveryTurnCalls``, a format the tiny
model's alphabet can spell (for episodes on the real engine)."""

from __future__ import annotations

from typing import Any

from rl.rollout.tools import ToolCall

TEMPLATE = (
    "{% if tools %}<|im_start|>system{{ '\\n' }}Tools:"
    "{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}{{ '\\n' }}"
    'Call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>{{ "\\n" }}{% endif %}'
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>tool {{ m.name }}{{ '\\n' }}{{ m.content }}<|im_end|>{{ '\\n' }}"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant{{ '\\n' }}{{ m.content }}"
    "{% for c in m.tool_calls %}<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}"
    "</tool_call>{% endfor %}<|im_end|>{{ '\\n' }}"
    "{% else %}<|im_start|>{{ m.role }}{{ '\\n' }}{{ m.content }}<|im_end|>{{ '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)


def byte_chat_tokenizer() -> Any:
    """Bytes as tokens (no merges), ``<|im_start|>``/``<|im_end|>`` special (the latter the EOS), ``<tool_call>`` and
    ``</tool_call>`` plain added tokens as in Qwen's vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.add_special_tokens({"eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"]})
    fast.add_tokens(["<tool_call>", "</tool_call>"])
    fast.chat_template = TEMPLATE
    return fast


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
