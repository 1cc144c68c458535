"""Tool calls read by one of vLLM's own tool parsers (the ``NAME`` of ``vllm serve --tool-call-parser NAME``), for
a syntax Tailor's readers (``rl.rollout.tool_calls``) do not read: ``rollout.tool_parser``. vLLM changes this API
between releases, so every call to it stays in this file."""

from __future__ import annotations

from typing import Any

from rl.rollout.call_notations import call_of
from rl.rollout.tools import ToolCall

Schemas = list[dict[str, Any]]


def tool_parser_names() -> list[str]:
    """The names vLLM's tool parsers are registered under, sorted."""
    from vllm.tool_parsers import ToolParserManager

    return sorted(ToolParserManager.list_registered())


class VllmToolParser:
    """A ``CallReader`` over vLLM's tool parser ``name``: the calls it extracts from a turn's text (given the tools'
    schemas, by which it types arguments), each with its id where the model wrote one (Kimi's
    ``functions.NAME:0``, which the results must name), and the content it leaves. ``ValueError`` for a name vLLM
    has no parser under."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        try:
            from vllm.tool_parsers import ToolParserManager
        except ImportError as e:  # a vLLM that keeps its parsers elsewhere
            raise ValueError(f"this vLLM has no tool parsers where Tailor looks for them ({e})") from None
        if name not in ToolParserManager.list_registered():
            raise ValueError(f"vLLM has no tool parser named {name!r} (its names: {', '.join(tool_parser_names())})")
        self.parser = ToolParserManager.get_tool_parser(name)(tokenizer)

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        found = self._extract(text, schemas)
        if not found.tools_called:
            return []
        return [_call(c.function.name, c.function.arguments, c.id, text) for c in found.tool_calls]

    def without_calls(self, text: str) -> str:
        found = self._extract(text, [])
        return (found.content or "") if found.tools_called else text

    def _extract(self, text: str, schemas: Schemas) -> Any:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        request = ChatCompletionRequest(messages=[{"role": "user", "content": "-"}], model="-", tools=schemas or None)
        return self.parser.extract_tool_calls(text, request)


def _call(name: str, arguments: str, call_id: str | None, text: str) -> ToolCall:
    """One extracted call (``call_of``: arguments that are not a JSON object make it unusable), with its id only
    where the model wrote it (vLLM makes one up for the syntaxes that carry none)."""
    call = call_of({"name": name, "arguments": arguments or "{}"}, "arguments")
    return ToolCall(call.name, call.arguments, call_id if call_id and call_id in text else None)
