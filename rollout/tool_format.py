"""How tool calls look in tokens: the prompt with the tools' schemas, the calls in the model's text, the tool results
as the tokens appended after the model's turn.

``ChatTemplateFormat`` is the one Tailor supports: Qwen / Hermes style calls, ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` (one or several per turn), with the schemas and results rendered by the tokenizer's own chat
template (``tools=`` and ``role: tool`` messages). A result's tokens are the template's rendering of the tool messages
and the next assistant header, cut right after the end-of-turn token the model itself sampled: the model's ids are
never re-tokenized.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from rl.rollout.tools import ToolCall

Messages = list[dict[str, Any]]
CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


class ToolFormat(Protocol):
    """The tokens of a tool-calling conversation, for one tokenizer."""

    end_of_turn: (
        int  # the token id that ends the model's turn; a turn ending otherwise (length, abort) ends the episode
    )

    def prompt(self, messages: Messages, schemas: list[dict[str, Any]]) -> list[int]:
        """The prompt's ids, the tools' schemas included, ending in the assistant's header."""

    def calls(self, ids: list[int]) -> list[ToolCall]:
        """The calls in one model turn (its sampled ids), in order; none: the turn is the episode's answer."""

    def results(self, results: list[tuple[str, str]]) -> list[int]:
        """The ids that follow the model's end-of-turn token: each (tool name, result text) as a tool message, then
        the next assistant header."""

    def decode(self, ids: list[int]) -> str:
        """Text of ids, special tokens dropped."""


class ChatTemplateFormat:
    """``<tool_call>`` JSON calls; prompts and results through the tokenizer's chat template."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})  # data.chat_template_kwargs
        self.end_of_turn = tokenizer.eos_token_id

    def prompt(self, messages: Messages, schemas: list[dict[str, Any]]) -> list[int]:
        return list(
            self.tokenizer.apply_chat_template(
                messages,
                tools=schemas or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                **self.template_kwargs,
            )
        )

    def calls(self, ids: list[int]) -> list[ToolCall]:
        """Read with special tokens kept: some templates make the call markers special tokens."""
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return [_parse_call(body) for body in CALL.findall(text)]

    def results(self, results: list[tuple[str, str]]) -> list[int]:
        """The template's tool messages and next header after a stand-in conversation whose last assistant turn called
        the first tool; the stand-in's rendering is cut at its last end-of-turn token, the one the model sampled."""
        called = [{"type": "function", "function": {"name": results[0][0], "arguments": {}}}]
        before = [{"role": "user", "content": "-"}, {"role": "assistant", "content": "", "tool_calls": called}]
        tools = [{"role": "tool", "name": name, "content": content} for name, content in results]
        head = self._ids(before, generation_prompt=False)
        full = self._ids(before + tools, generation_prompt=True)
        ends = [i for i, t in enumerate(head) if t == self.end_of_turn]
        head = head[: ends[-1] + 1] if ends else head
        if full[: len(head)] != head:
            raise ValueError("the chat template renders tool results by rewriting the turn before them; unsupported")
        return full[len(head) :]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _ids(self, messages: Messages, generation_prompt: bool) -> list[int]:
        return list(
            self.tokenizer.apply_chat_template(
                messages,
                add_generation_prompt=generation_prompt,
                tokenize=True,
                return_dict=False,
                **self.template_kwargs,
            )
        )


def _parse_call(body: str) -> ToolCall:
    """One ``<tool_call>`` body: ``{"name": str, "arguments": object or JSON string}``; anything else is unusable
    (``arguments=None``), named as far as it can be."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        return ToolCall("?", None)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall("?", None)
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    return ToolCall(call["name"], arguments if isinstance(arguments, dict) else None)
