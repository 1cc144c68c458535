"""``builtin:calc-tiny``: the tiny Qwen2 of ``builtin:arith-tiny`` with a vocabulary and a chat template for tool calls.

The tokenizer is character-level (digits, ``+-=#``, the letters and the JSON punctuation of a call) plus a few added
tokens: ``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>`` and the fixed pieces of a call to a
two-argument tool (``{"name": "``, ``", "arguments": {"a": ``, ``, "b": ``, ``}}``). A call is the real Qwen / Hermes
text, ``<tool_call>{"name": "add", "arguments": {"a": 123, "b": 456}}</tool_call>``, read by the same parser as
Qwen's, in about 15 tokens. The chat template is Qwen's shape in a few lines: the tools' names in a system turn, tool
results as ``tool`` turns wrapped in ``<tool_response>``; ``<|im_end|>`` ends a turn and is the EOS.

The warm start teaches the format, not the policy: on sums of two 3-digit numbers (training split only), a quarter of
the examples show no tools and answer directly (``#579``), a quarter show the tools and answer directly, half show
them, call ``add`` and copy its result. It stops at 700 steps, while the model still cannot add in its head (1 in 100
held-out sums right without the tool; by 1,000 steps it gets half of them) and calls on about 6 in 10 problems where
the tool is offered, with its arguments and its answer from the result each right about 8 times in 10. Calling every
time and copying reliably is RL's part (``recipes/calc_tiny.yaml``).
"""

from __future__ import annotations

import json
from pathlib import Path

from rl.models import TINY_ARCH, TINY_SFT, build_tiny, sft_rows

CALC_CHARS = '0123456789+-=#;:,.{}[]"_ \nabcdefghijklmnopqrstuvwxyz'
CALL_PIECES = ('{"name": "', '", "arguments": {"a": ', ', "b": ', "}}")
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
ROLES = ("system", "user", "assistant", "tool")
CALC_SFT = dict(TINY_SFT, steps=700, batch_size=32, num_train=6000, digits=3, min_operands=2, max_operands=2)
CALC_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% for t in tools %} {{ t.function.name if t.function is defined else t.name }}{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>tool\n<tool_response>{{ m.content }}</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{{ m.content or '' }}"
    "{% for c in m.tool_calls %}<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}"
    "</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def calc_tokenizer(out_dir: Path | None = None):
    """The character-level tokenizer with the tool tags, call pieces and role names as single tokens, and the chat
    template. Characters are in byte-level form (a space is ``Ġ``) with no merges: ``AutoTokenizer`` loads a Qwen2
    model's tokenizer as ``Qwen2Tokenizer``, a byte-level BPE, and this one reads the same there."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    specials = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    chars = [byte_level.pre_tokenize_str(c)[0][0] for c in CALC_CHARS]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(specials + chars)}, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    hf_tok.add_tokens([AddedToken(t, normalized=False) for t in TOOL_TAGS + CALL_PIECES + ROLES])
    hf_tok.chat_template = CALC_TEMPLATE
    if out_dir is not None:
        hf_tok.save_pretrained(out_dir)
    return hf_tok


def call_text(name: str, arguments: dict) -> str:
    """A call as the model writes it: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def warm_start_examples(tok, rows) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) of the warm start's episodes, in turn: no tools and a direct answer, the tools and a direct answer,
    and twice the tools, a call to ``add`` and its result copied. Loss on the model's turns only."""
    from rl.recipes.calculator import add
    from rl.rollout.tool_format import ChatTemplateFormat
    from rl.rollout.tools import tool_schema

    fmt, schemas, eos = ChatTemplateFormat(tok), [tool_schema(add)], tok.eos_token_id

    def said(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"] + [eos]

    examples = []
    for n, row in enumerate(rows):
        prompt = fmt.prompt([{"role": "user", "content": row.prompt}], schemas if n % 4 else [])
        answer = said("#" + row.answer)
        if n % 4 < 2:
            turns = [(answer, True)]
        else:
            a, b = (int(x) for x in row.prompt.rstrip("=").split("+"))
            turns = [(said(call_text("add", {"a": a, "b": b})), True), (fmt.results([("add", str(a + b))]), False)]
            turns.append((answer, True))
        ids, labels = list(prompt), [-100] * len(prompt)
        for part, trained in turns:
            ids += part
            labels += part if trained else [-100] * len(part)
        examples.append((ids, labels))
    return examples


def build_calc_tiny(force: bool = False) -> Path:
    """Build (or reuse) ``builtin:calc-tiny``: random tiny Qwen2 + the warm start of the module docstring."""
    words = {"tags": TOOL_TAGS, "pieces": CALL_PIECES, "roles": ROLES, "byte_level": True}
    spec = {"arch": TINY_ARCH, "sft": CALC_SFT, "chars": CALC_CHARS, "words": words, "template": CALC_TEMPLATE}
    return build_tiny("calc-tiny", spec, calc_tokenizer, _calc_examples, CALC_SFT, force)


def _calc_examples(tok) -> list[tuple[list[int], list[int]]]:
    return warm_start_examples(tok, sft_rows(CALC_SFT))
