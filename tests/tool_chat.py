"""Test-only tool formats: a byte-level tokenizer with a Qwen-style tool-calling chat template, built offline in
milliseconds (for tests of the ``<tool_call>`` format without a hub model), and ``EveryTurnCalls``, a format the tiny
model's alphabet can spell (for episodes on the real engine)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
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


# the shapes of real models' templates, written small: what each does with a tool call, a tool result and the turn
# before a result (none is a copy of the model's own template)
QWEN3_TEMPLATE = (  # JSON calls; tool results in a user turn; an empty think block on the last assistant turn only
    "{% if tools %}<|im_start|>system\n# Tools{% for t in tools %}\n{{ t | tojson }}{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n{% if loop.last %}<think>\n\n</think>\n\n{% endif %}"
    "{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>\n"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}"
    "<|im_end|>\n"
    "{% elif m.role == 'tool' %}{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user"
    "{% endif %}{{ '\\n' }}<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN35_TEMPLATE = (  # XML calls, a parameter's value as text
    "{% if tools %}<|im_start|>system\n# Tools{% for t in tools %}\n{{ t | tojson }}{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>\n<function={{ c.function.name }}>\n"
    "{% for k, v in c.function.arguments.items() %}<parameter={{ k }}>\n{{ v if v is string else v | tojson }}\n"
    "</parameter>\n{% endfor %}</function>\n</tool_call>{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3_TEMPLATE = (  # bare JSON calls with "parameters"; tools in the first user turn; results as ipython turns
    "<|begin_of_text|>{% for m in messages %}"
    "<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>\n\n"
    "{% if tools and loop.first %}Functions:{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n\n{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "{{ {'name': c.function.name, 'parameters': c.function.arguments} | tojson }}{% endfor %}"
    "{% elif m.role == 'tool' %}{{ m.content | tojson }}{% else %}{{ m.content }}{% endif %}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
GEMMA_TEMPLATE = (  # turns end on <end_of_turn>, which is not the tokenizer's EOS (<eos>); tool results as tool turns
    "<bos>{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}{{ '\\n' }}"
    "{% if tools and loop.first %}Tools: {{ tools | tojson }}{{ '\\n' }}{% endif %}{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>{% endfor %}"
    "<end_of_turn>{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model{{ '\\n' }}{% endif %}"
)
MISTRAL_TEMPLATE = (  # [TOOL_CALLS] and a JSON list of calls with 9-character ids, which each result names
    "<s>{% for m in messages %}"
    "{% if m.role == 'user' %}{% if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]"
    "{% endif %}[INST]{{ m.content }}[/INST]"
    "{% elif m.tool_calls %}[TOOL_CALLS] [{% for c in m.tool_calls %}"
    "{% if c.id is not defined or c.id | length != 9 %}{{ raise_exception('Tool call IDs should be 9 long') }}"
    "{% endif %}{{ {'name': c.function.name, 'arguments': c.function.arguments, 'id': c.id} | tojson }}"
    "{% if not loop.last %}, {% endif %}{% endfor %}]</s>"
    "{% elif m.role == 'tool' %}{% if m.tool_call_id is not defined or m.tool_call_id | length != 9 %}"
    "{{ raise_exception('Tool call IDs should be 9 long') }}{% endif %}"
    "[TOOL_RESULTS]{{ {'content': m.content, 'call_id': m.tool_call_id} | tojson }}[/TOOL_RESULTS]"
    "{% else %} {{ m.content }}</s>{% endif %}"
    "{% endfor %}"
)
MISTRAL11_TEMPLATE = (  # [TOOL_CALLS]NAME[ARGS]{...} for each call; results without ids
    "<s>{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
    "{% elif m.tool_calls %}{{ m.content or '' }}{% for c in m.tool_calls %}[TOOL_CALLS]{{ c.function.name }}[ARGS]"
    "{{ c.function.arguments | tojson }}{% endfor %}</s>"
    "{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
    "{% else %}{{ m.content }}</s>{% endif %}"
    "{% endfor %}"
)
GLM_TEMPLATE = (  # GLM-4.5's shape: name and key/value tags; no end token after a turn; results open on <|observation|>
    "[gMASK]<sop>{% if tools %}<|system|>\n# Tools{% for t in tools %}\n{{ t | tojson }}{% endfor %}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>\n{{ m.content }}"
    "{% elif m.role == 'assistant' %}<|assistant|>\n<think></think>{% if m.content %}\n{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}\n<tool_call>{{ c.function.name }}{% for k, v in c.function.arguments.items() %}"
    "\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v if v is string else v | tojson }}</arg_value>{% endfor %}"
    "\n</tool_call>{% endfor %}"
    "{% elif m.role == 'tool' %}{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|observation|>"
    "{% endif %}\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
GEMMA4_TEMPLATE = (  # Gemma 4's shape: compact calls; results inside the model's turn, which goes on after them
    "{% macro v(x) %}{% if x is string %}<|\"|>{{ x }}<|\"|>{% elif x is boolean %}{{ 'true' if x else 'false' }}"
    "{% elif x is mapping %}{{ '{' }}{% for k, y in x | dictsort %}{{ k }}:{{ v(y) }}{{ '' if loop.last else ',' }}"
    "{% endfor %}{{ '}' }}{% elif x is sequence %}[{% for y in x %}{{ v(y) }}{{ '' if loop.last else ',' }}"
    "{% endfor %}]{% else %}{{ x }}{% endif %}{% endmacro %}"
    "<bos>{% if tools %}<|turn>system\n{% for t in tools %}<|tool>declaration:{{ t.function.name }}<tool|>"
    "{% endfor %}<turn|>\n{% endif %}"
    "{% for m in messages %}{% if m.role != 'tool' %}"
    "{% set before = messages[:loop.index0] | rejectattr('role', 'equalto', 'tool') | list %}"
    "{% if not (m.role == 'assistant' and before and before[-1].role == 'assistant') %}"
    "<|turn>{{ 'model' if m.role == 'assistant' else m.role }}\n{% endif %}"
    "{% for c in m.tool_calls or [] %}<|tool_call>call:{{ c.function.name }}{{ v(c.function.arguments) }}"
    "<tool_call|>{% endfor %}"
    "{% set results = namespace(any=false, open=true) %}"
    "{% for r in messages[loop.index0 + 1:] %}{% if r.role != 'tool' %}{% set results.open = false %}"
    "{% elif results.open and m.tool_calls %}<|tool_response>response:{{ r.name }}{value:{{ v(r.content) }}}"
    "<tool_response|>{% set results.any = true %}{% endif %}{% endfor %}"
    "{{ m.content or '' }}"
    "{% if m.tool_calls and not results.any %}<|tool_response>{% elif not (results.any and not m.content) %}"
    "<turn|>\n{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt and messages[-1].role != 'tool' %}<|turn>model\n<|channel>thought\n<channel|>"
    "{% endif %}"
)
HARMONY_TEMPLATE = (  # gpt-oss's shape: one call a message, its recipient in the role header; results by tool name
    "<|start|>system<|message|>Reasoning: medium\n# Valid channels: analysis, commentary, final.<|end|>"
    "{% if tools %}<|start|>developer<|message|># Tools\nnamespace functions {{ '{' }}"
    "{% for t in tools %}\ntype {{ t.function.name }} = (_: any) => any;{% endfor %}\n}<|end|>{% endif %}"
    "{% set last = namespace(name=none) %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}{% set c = m.tool_calls[0].function %}"
    "<|start|>assistant to=functions.{{ c.name }}<|channel|>commentary json<|message|>{{ c.arguments | tojson }}"
    "<|call|>{% set last.name = c.name %}"
    "{% elif m.role == 'assistant' %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}"
    "{{ '<|return|>' if loop.last and not add_generation_prompt else '<|end|>' }}"
    "{% elif m.role == 'tool' %}{% if last.name is none %}{{ raise_exception('a tool message needs a call') }}"
    "{% endif %}<|start|>functions.{{ last.name }} to=assistant<|channel|>commentary<|message|>"
    "{{ m.content | tojson }}<|end|>"
    "{% else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
PYTHONIC_TEMPLATE = (  # Llama 4's pythonic shape: a turn that calls is a Python list of calls; results as ipython
    "{% for m in messages %}<|header_start|>{{ 'ipython' if m.role == 'tool' else m.role }}<|header_end|>\n\n"
    "{% if tools and loop.first %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% if m.tool_calls %}[{% for c in m.tool_calls %}{{ c.function.name }}("
    "{% for k, v in c.function.arguments.items() %}{{ k }}={{ v | tojson }}{{ '' if loop.last else ', ' }}"
    "{% endfor %}){{ '' if loop.last else ', ' }}{% endfor %}]"
    "{% else %}{{ m.content }}{% endif %}<|eot|>{% endfor %}"
    "{% if add_generation_prompt %}<|header_start|>assistant<|header_end|>\n\n{% endif %}"
)
LFM2_TEMPLATE = (  # LFM2's shape: an assistant's calls stay in its text (the template ignores tool_calls)
    "{% if tools %}<|im_start|>system\nList of tools: <|tool_list_start|>{{ tools | tojson }}<|tool_list_end|>"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
OLMO3_TEMPLATE = (  # Olmo 3's shape: calls bare, one a line, in <function_calls>; results as environment turns
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|im_start|>user\n{{ m.content }}{% if tools %}<functions>{{ tools | tojson }}"
    "</functions>{% endif %}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content or '' }}{% if m.tool_calls %}<function_calls>"
    "{% for c in m.tool_calls %}{{ c.function.name }}("
    "{% for k, v in c.function.arguments.items() %}{{ k }}={{ v | tojson }}{{ '' if loop.last else ', ' }}{% endfor %})"
    "{{ '' if loop.last else '\n' }}{% endfor %}</function_calls>{% endif %}"
    "{{ eos_token if loop.last else '<|im_end|>\n' }}"
    "{% else %}<|im_start|>environment\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
STRING_ARGUMENTS_TEMPLATE = (  # Qwen's shape, but a call's arguments added to a string: they must be JSON text
    "{% if tools %}<|im_start|>system\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    '{% for c in m.tool_calls or [] %}<tool_call>{{ \'{"name": "\' + c.function.name + \'", "arguments": \' '
    "+ c.function.arguments + '}' }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DEEPSEEK_TEMPLATE = (  # DeepSeek V3.1's shape: call tokens, arguments added to a string; results need no header
    "<｜begin▁of▁sentence｜>{% if tools %}{{ tools | tojson }}{% endif %}"
    "{% set ns = namespace(last_user=false, tool=false) %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<｜User｜>{{ m.content }}{% set ns.last_user = true %}{% set ns.tool = false %}"
    "{% elif m.role == 'assistant' and m.tool_calls %}{% if ns.last_user %}<｜Assistant｜></think>{% endif %}"
    "{{ m.content or '' }}<｜tool▁calls▁begin｜>{% for c in m.tool_calls %}"
    "{{ '<｜tool▁call▁begin｜>' + c.function.name + '<｜tool▁sep｜>' + c.function.arguments + '<｜tool▁call▁end｜>' }}"
    "{% endfor %}<｜tool▁calls▁end｜><｜end▁of▁sentence｜>{% set ns.last_user = false %}"
    "{% elif m.role == 'assistant' %}{% if ns.last_user %}<｜Assistant｜></think>{% endif %}"
    "{{ m.content }}<｜end▁of▁sentence｜>{% set ns.last_user = false %}{% set ns.tool = false %}"
    "{% elif m.role == 'tool' %}<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>{% set ns.tool = true %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt and ns.last_user and not ns.tool %}<｜Assistant｜></think>{% endif %}"
)
MINIMAX_TEMPLATE = (  # MiniMax-M2's invoke tags: no reader of Tailor's reads them (vLLM's minimax_m2 parser does)
    "{% if tools %}{{ tools | tojson }}{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for c in m.tool_calls or [] %}<minimax:tool_call>"
    '<invoke name="{{ c.function.name }}">{% for k, v in c.function.arguments.items() %}'
    '<parameter name="{{ k }}">{{ v }}</parameter>{% endfor %}</invoke></minimax:tool_call>{% endfor %}'
    "</s>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
KIMI_TEMPLATE = (  # Kimi K2's shape: a call's id (functions.NAME:0) where others write its name; results name it
    "{% if tools %}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_assistant|>assistant<|im_middle|>{{ m.content }}"
    "{% if m.tool_calls %}<|tool_calls_section_begin|>{% for c in m.tool_calls %}<|tool_call_begin|>{{ c.id }}"
    "<|tool_call_argument_begin|>{{ c.function.arguments | tojson }}<|tool_call_end|>{% endfor %}"
    "<|tool_calls_section_end|>{% endif %}<|im_end|>"
    "{% elif m.role == 'tool' %}<|im_system|>tool<|im_middle|>## Return of {{ m.tool_call_id }}\n{{ m.content }}"
    "<|im_end|>"
    "{% else %}<|im_{{ m.role }}|>{{ m.role }}<|im_middle|>{{ m.content }}<|im_end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}"
)
TEMPLATES = {
    "qwen": TEMPLATE,
    "qwen3": QWEN3_TEMPLATE,
    "qwen3.5": QWEN35_TEMPLATE,
    "llama3": LLAMA3_TEMPLATE,
    "gemma": GEMMA_TEMPLATE,
    "mistral": MISTRAL_TEMPLATE,
    "mistral11": MISTRAL11_TEMPLATE,
    "glm": GLM_TEMPLATE,
    "gemma4": GEMMA4_TEMPLATE,
    "harmony": HARMONY_TEMPLATE,
    "pythonic": PYTHONIC_TEMPLATE,
    "lfm2": LFM2_TEMPLATE,
    "olmo3": OLMO3_TEMPLATE,
    "string_arguments": STRING_ARGUMENTS_TEMPLATE,
    "deepseek": DEEPSEEK_TEMPLATE,
    "minimax": MINIMAX_TEMPLATE,
    "kimi": KIMI_TEMPLATE,
}
MISTRAL_SPECIALS = [
    *(
        "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]",
        "[INST]",
        "[/INST]",
        "[TOOL_CALLS]",
        "[TOOL_RESULTS]",
        "[/TOOL_RESULTS]",
    )
]
QWEN_SPECIALS = ("<|im_end|>", ["<|im_start|>"], ["<tool_call>", "</tool_call>"])  # EOS, other specials, added
SPECIALS = {
    "llama3": ("<|eot_id|>", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>"], []),
    "gemma": ("<eos>", ["<bos>", "<start_of_turn>", "<end_of_turn>"], ["<tool_call>", "</tool_call>"]),
    "mistral": ("</s>", ["<s>", *MISTRAL_SPECIALS], []),
    "mistral11": ("</s>", ["<s>", *MISTRAL_SPECIALS, "[ARGS]"], []),
    "glm": (
        "<|endoftext|>",
        ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"],
        [
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "<think>",
            "</think>",
        ],
    ),
    "gemma4": (
        "<eos>",
        ["<bos>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|channel>", "<channel|>"],
        ["<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>'],
    ),
    "harmony": (
        "<|return|>",
        ["<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|endoftext|>"],
        [],
    ),
    "pythonic": ("<|eot|>", ["<|header_start|>", "<|header_end|>"], []),
    "lfm2": (
        "<|im_end|>",
        ["<|im_start|>", "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>", "<|tool_call_end|>"],
        [],
    ),
    "olmo3": ("<|endoftext|>", ["<|im_start|>", "<|im_end|>"], []),
    "deepseek": (
        "<｜end▁of▁sentence｜>",
        [
            *(
                "<｜begin▁of▁sentence｜>",
                "<｜User｜>",
                "<｜Assistant｜>",
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁calls▁end｜>",
            ),
            *("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁output▁begin｜>"),
            "<｜tool▁output▁end｜>",
        ],
        ["</think>"],
    ),
    "minimax": ("</s>", ["<minimax:tool_call>", "</minimax:tool_call>"], []),
    "kimi": (
        "<|im_end|>",
        [
            *("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|tool_calls_section_begin|>"),
            *("<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
        ],
        [],
    ),
}


GENERATION_EOS = {  # the turn ends a model's generation config adds
    "glm": ["<|user|>", "<|observation|>"],
    "gemma4": ["<turn|>", "<|tool_response>"],
    "harmony": ["<|endoftext|>", "<|call|>"],
    "olmo3": ["<|im_end|>"],
}


def saved_chat_tokenizer(family: str, folder: Any) -> Any:
    """``byte_chat_tokenizer(family)`` saved in ``folder`` with a generation config listing its end-of-sequence ids,
    as a model folder has them (GLM's turns end on ``<|observation|>`` or ``<|user|>``); reloaded from there."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = byte_chat_tokenizer(family)
    tok.save_pretrained(folder)
    extra = [tok.convert_tokens_to_ids(t) for t in GENERATION_EOS.get(family, [])]
    GenerationConfig(eos_token_id=[tok.eos_token_id, *extra]).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def trl_chat_templates() -> Path | None:
    """The folder of real models' chat templates that TRL ships (the originals it recognizes models by), None where
    TRL (the ``peer`` extra) is not installed. Read in place: none is copied into Tailor."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(spec.submodule_search_locations[0]) / "chat_templates"
    return folder if folder.is_dir() else None


def real_chat_tokenizer(template: Path, family: str, folder: Any) -> Any:
    """``saved_chat_tokenizer(family, folder)`` (the family's special tokens and generation config) rendering with
    the chat template in the file ``template``, a real model's."""
    tok = saved_chat_tokenizer(family, folder)
    tok.chat_template = template.read_text()
    return tok


def byte_chat_tokenizer(family: str = "qwen") -> Any:
    """Bytes as tokens (no merges) with the chat template of ``family`` (``TEMPLATES``): for Qwen's,
    ``<|im_start|>``/``<|im_end|>`` special (the latter the EOS), ``<tool_call>`` and ``</tool_call>`` plain added
    tokens as in Qwen's vocabulary; for Llama 3's, its header tokens special and ``<|eot_id|>`` the EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    eos, specials, added = SPECIALS.get(family, QWEN_SPECIALS)
    fast.add_special_tokens({"eos_token": eos, "additional_special_tokens": specials})
    fast.add_tokens(added)
    fast.chat_template = TEMPLATES[family]
    return fast


class EveryTurnCalls:
    """A tool format in the tiny model's alphabet: a turn ending on EOS calls every tool in ``names`` with
    ``text=<the turn>``; results are appended as ``;`` and their digits."""

    def __init__(self, tokenizer, names: list[str]) -> None:
        self.tokenizer, self.names, self.turn_ends = tokenizer, names, frozenset({tokenizer.eos_token_id})

    def prompt(self, messages, schemas) -> list[int]:
        return self.tokenizer(messages[-1]["content"])["input_ids"]

    def calls(self, ids: list[int], schemas: list) -> list[ToolCall]:
        return [ToolCall(name, {"text": self.decode(ids)}) for name in self.names]

    def prose(self, ids: list[int]) -> str:
        return self.decode(ids)  # the calls carry the turn as their argument: nothing is markup

    def results(self, results: list[tuple[str, str]], ids: list[str | None] | None = None) -> list[int]:
        digits = "".join(";" + "".join(c for c in content if c.isdigit()) for _, content in results)
        return self.tokenizer(digits, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
