"""A byte-level tokenizer with a Qwen-style tool-calling chat template, built offline in milliseconds (for tests of
the ``<tool_call>`` format without a hub model)."""

from __future__ import annotations

from typing import Any

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
