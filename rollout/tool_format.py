"""How tool calls look in tokens: the prompt with the tools' schemas, the calls in the model's text, the tool results
as the tokens appended after the model's turn.

``ChatTemplateFormat`` is the one Tailor supports: the schemas and results are rendered by the tokenizer's own chat
template (``tools=`` and ``role: tool`` messages), the calls read in the syntax that template writes them
(``rl.rollout.tool_calls``), or by vLLM's tool parser of the name ``rollout.tool_parser`` gives
(``rl.rollout.vllm_tool_parser``). A result's tokens are what the template renders after the model's turn: the tool
messages and the next assistant header, after the end-of-turn token that closes the turn, the one the model itself
sampled. The model's ids are never re-tokenized; a template that renders the turn before the results differently
(Qwen3's drops an empty think block once the turn is not the last) changes nothing the episode holds.
"""

from __future__ import annotations

from typing import Any, Protocol

from rl.rollout.tool_calls import CallReader, Schemas, call_reader, probe_rendering
from rl.rollout.tools import ToolCall
from rl.rollout.vllm_tool_parser import VllmToolParser

Messages = list[dict[str, Any]]


class ToolFormat(Protocol):
    """The tokens of a tool-calling conversation, for one tokenizer."""

    # the ids that end a model's turn; a turn ending otherwise (length, abort) ends the episode
    turn_ends: frozenset[int]

    def prompt(self, messages: Messages, schemas: list[dict[str, Any]]) -> list[int]:
        """The prompt's ids, the tools' schemas included, ending in the assistant's header."""

    def calls(self, ids: list[int], schemas: Schemas) -> list[ToolCall]:
        """The calls in one model turn (its sampled ids), in order, given the tools' ``schemas``; none: the turn is
        the episode's answer."""

    def prose(self, ids: list[int]) -> str:
        """A model turn's content (TRL's ``content``): its text without its calls' markup or a reasoning channel the
        syntax marks (gpt-oss's ``analysis``, Gemma 4's thought), special tokens dropped."""

    def results(self, results: list[tuple[str, str]], ids: list[str | None] | None = None) -> list[int]:
        """The ids that follow the model's end-of-turn token: each (tool name, result text) as a tool message naming
        its call's id (``ids``: those the model gave, where it gave any), then the next assistant header."""

    def decode(self, ids: list[int]) -> str:
        """Text of ids, special tokens dropped."""


class ChatTemplateFormat:
    """Prompts and results through the tokenizer's chat template, calls in the syntax it writes them
    (``UnknownCallSyntax`` for one no reader reads), or read by vLLM's ``tool_parser`` of that name (``ValueError``
    for a name vLLM has none under). A turn ends on the tokenizer's EOS or on any end-of-sequence id
    of the model's generation config (vLLM stops on those too: Gemma's ``<end_of_turn>``, Llama 3.1's
    ``<|eom_id|>``)."""

    def __init__(
        self,
        tokenizer: Any,
        template_kwargs: dict[str, Any] | None = None,
        tool_parser: str | None = None,
        revision: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})  # data.chat_template_kwargs
        self.end_of_turn = tokenizer.eos_token_id
        self.turn_ends = frozenset({self.end_of_turn, *generation_eos(tokenizer, revision)})
        self.reader: CallReader = (
            VllmToolParser(tool_parser, tokenizer) if tool_parser else call_reader(tokenizer, self.template_kwargs)
        )
        self.arguments = probe_rendering(tokenizer, self.template_kwargs)[1]  # a call's arguments: object or JSON text

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

    def calls(self, ids: list[int], schemas: Schemas) -> list[ToolCall]:
        """Read with special tokens kept: some templates make the call markers special tokens."""
        return self.reader.read(self.tokenizer.decode(ids, skip_special_tokens=False), schemas)

    def prose(self, ids: list[int]) -> str:
        """Special tokens out after the calls, for markers that are special tokens."""
        text = self.reader.without_calls(self.tokenizer.decode(ids, skip_special_tokens=False))
        for token in self.tokenizer.all_special_tokens:
            text = text.replace(token, "")
        return text.strip()

    def results(self, results: list[tuple[str, str]], ids: list[str | None] | None = None) -> list[int]:
        """The template's tool messages and next header in a stand-in conversation whose assistant turn made the
        calls: what follows the end-of-turn token that closes that turn (as many such tokens in as the conversation
        up to the turn renders), or, where the template writes none after the turn (GLM's), what follows the
        end-of-turn token that opens the results, on which the model stopped. Each call has the id the model gave
        it, or a stand-in of Mistral's form (9 letters and digits), also where the template refuses the model's;
        where it refuses several calls in one turn (Llama 3.1's and 3.2's), the stand-in turn makes the first
        alone, and every result follows it."""
        given = ids or [None] * len(results)
        stand_ins = [f"call{i:05d}" for i in range(len(results))]
        tries = [([g or s for g, s in zip(given, stand_ins, strict=True)], len(results))]
        tries += [(stand_ins, len(results))] if any(given) and given != stand_ins else []
        tries += [(stand_ins, 1)] if len(results) > 1 else []
        for call_ids, calls in tries[:-1]:
            try:
                return self._results(results, call_ids, calls)
            except Exception:  # the template's own error, whatever its kind: the next try
                continue
        return self._results(results, *tries[-1])

    def _results(self, results: list[tuple[str, str]], ids: list[str], calls: int) -> list[int]:
        called = [
            {"id": i, "type": "function", "function": {"name": name, "arguments": self.arguments({})}}
            for i, (name, _) in list(zip(ids, results, strict=True))[:calls]
        ]
        before = [{"role": "user", "content": "-"}, {"role": "assistant", "content": "", "tool_calls": called}]
        tools = [
            {"role": "tool", "name": name, "content": content, "tool_call_id": i}
            for i, (name, content) in zip(ids, results, strict=True)
        ]
        head = self._ids(before, generation_prompt=False)
        full = self._ids(before + tools, generation_prompt=True)
        if self._unended(head):  # GLM's: the model's turn ends on the end-of-turn token that opens the results
            if full[: len(head)] == head and full[len(head) : len(head) + 1] and full[len(head)] in self.turn_ends:
                return full[len(head) + 1 :]
            raise ValueError(
                "the chat template neither ends the assistant's turn nor opens a tool result with an end-of-turn token"
            )
        turns = sum(t in self.turn_ends for t in head)
        ends = [i for i, t in enumerate(full) if t in self.turn_ends]
        if not turns or len(ends) < turns:
            raise ValueError("the chat template does not end the assistant's turn with its end-of-turn token")
        return full[ends[turns - 1] + 1 :]

    def _unended(self, head: list[int]) -> bool:
        """Whether the conversation up to the assistant's turn renders with no end-of-turn token after that turn:
        more than blanks follow its last one."""
        last = max((i for i, t in enumerate(head) if t in self.turn_ends), default=-1)
        return bool(self.tokenizer.decode(head[last + 1 :], skip_special_tokens=False).strip())

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


def generation_eos(tokenizer: Any, revision: str | None = None) -> list[int]:
    """The end-of-sequence ids of the generation config beside the tokenizer's files, of the hub ``revision`` the
    tokenizer was loaded at (``model.revision``; none where it has none)."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(tokenizer.name_or_path, revision=revision).eos_token_id
    except (OSError, ValueError):  # no generation_config.json (a tokenizer built in memory, a model without one)
        return []
    return [eos] if isinstance(eos, int) else list(eos or [])
