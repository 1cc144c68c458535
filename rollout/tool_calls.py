"""Reading the tool calls in a model's turn, in the syntax its chat template writes them.

Which syntax a model uses is read off its own chat template (``call_reader``): the template renders an assistant
turn that calls a probe tool, and the way the call comes out picks the reader. A tokenizer that ships a
``response_template`` (transformers' response parsing) is read with it instead. Readers:

- ``JsonInTags``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, several a turn (Qwen2.5, Qwen3,
  Hermes, ``builtin:calc-tiny``); ``arguments`` may be a JSON string.
- ``XmlInTags``: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>``
  (Qwen3.5, Qwen3.6, Qwen3-Coder, Nemotron 3), values as text, each typed by the tool's schema: text for a string
  argument, else JSON (``7``, ``true``, ``[1, 2]``).
- ``BareJson``: the whole turn is ``{"name": ..., "parameters": {...}}``, several joined by ``;`` (Llama 3.1-3.3).
- ``MistralList``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}, ...]`` (Mistral 7B v0.3, Mistral
  Nemo, Mistral Small 3.0/3.1, Mixtral 8x22B); the ids are kept, for the results to name.
- ``MistralArgs``: ``[TOOL_CALLS]NAME[ARGS]{...}`` for each call (Mistral Small 3.2, Magistral, Devstral).
- ``KeyValueTags``: ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>`` (GLM-4.5
  and later), values typed by the tool's schema as ``XmlInTags``'s.
- ``CompactCalls``: ``<|tool_call>call:NAME{key:value,...}<tool_call|>`` (Gemma 4): keys bare, text between
  ``<|"|>`` marks, numbers and ``true``/``false`` bare, objects and lists nested.
- ``PythonCalls``: a Python list of calls, ``[NAME(key=value, ...), ...]``: the whole turn (Llama 3.2 and Llama 4's
  pythonic templates), or between ``<|tool_call_start|>`` and ``<|tool_call_end|>`` (LFM2, LFM2.5, whose templates
  keep an assistant's calls in its text: read where the vocabulary has those markers), or bare, one a line, between
  ``<function_calls>`` and ``</function_calls>`` (Olmo 3).
- ``DeepSeekCalls``: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`` for each call (DeepSeek V3.1,
  V3.2), or ``...begin｜>function<｜tool▁sep｜>NAME`` and the arguments in a ```json fence (DeepSeek V3, R1-0528).
- ``HarmonyMessages``: gpt-oss's messages, a call being one addressed ``to=functions.NAME`` (in its role or its
  channel header) with JSON arguments, ended by ``<|call|>``; the turn's content is its ``final`` channel.
- ``ResponseTemplate``: ``tokenizer.parse_response`` with the tokenizer's own template.

A call a reader finds but cannot use (broken JSON, arguments that are not an object) is ``ToolCall(name or "?",
None)``: the episode answers it with an error and counts it. A turn with no call is the episode's answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from rl.rollout.call_notations import CompactValue, call_of, python_calls, typed
from rl.rollout.tools import ToolCall

Schemas = list[dict[str, Any]]
PROBE = "tailor_probe"  # the tool the probe turn calls, with arguments {"x": 1}
PROBE_ID = "tailor001"  # the probe call's id: 9 letters and digits, as Mistral's templates require
CALL_SYNTAXES = (  # what a refusal names
    "Tailor reads the calls of Qwen2.5/Qwen3/Hermes, Qwen3.5/Qwen3.6/Qwen3-Coder/Nemotron 3, Llama 3.1-3.3, "
    "Llama 4 (pythonic), Mistral, GLM-4.5+, Gemma 4, gpt-oss, DeepSeek V3/V3.1, LFM2 and Olmo 3 templates, and of any "
    "tokenizer with a response_template"
)
TAGGED = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
XML_NAME = re.compile(r"<function=(?P<name>[^>\n]+)>")
XML_PARAMETER = re.compile(r"<parameter=(?P<key>[^>\n]+)>\n?(?P<value>.*?)\n?</parameter>", re.DOTALL)
MISTRAL_CALLS = "[TOOL_CALLS]"  # Mistral's marker before a turn's calls (a special token)
MISTRAL_ARGS = "[ARGS]"  # between a call's name and its arguments, from Mistral's v11 tokenizers on
TOOL_NAME = re.compile(r"[\w.-]+")  # a tool's name: a Python function's, or an environment method's
ARG_PAIR = re.compile(r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>", re.DOTALL)
COMPACT_CALL = re.compile(r"<\|tool_call>(.*?)<tool_call\|>", re.DOTALL)  # Gemma 4's call markers
COMPACT_HEAD = re.compile(r"\s*call:(?P<name>[\w.-]+)\s*(?P<arguments>\{.*\})\s*", re.DOTALL)
COMPACT_RESULTS = "<|tool_response>"  # ends a Gemma 4 turn that calls: the results follow it
THOUGHT = re.compile(r"<\|channel>.*?<channel\|>", re.DOTALL)  # Gemma 4's reasoning, not the turn's content
LFM_MARKS = ("<|tool_call_start|>", "<|tool_call_end|>")  # around LFM2's list of calls
OLMO_MARKS = ("<function_calls>", "</function_calls>")  # around Olmo 3's calls, one a line
DEEPSEEK_CALL = re.compile(
    r"<｜tool▁call▁begin｜>(?P<head>.*?)<｜tool▁sep｜>(?P<body>.*?)<｜tool▁call▁end｜>", re.DOTALL
)
DEEPSEEK_FENCED = re.compile(r"(?P<name>[^\n]*)\n```(?:json)?\n(?P<arguments>.*)\n```", re.DOTALL)  # V3's form
DEEPSEEK_CALLS = re.compile(r"<｜tool▁calls▁begin｜>.*?(?:<｜tool▁calls▁end｜>|$)", re.DOTALL)  # a turn's calls
HARMONY_START, HARMONY_BODY = "<|start|>", "<|message|>"  # gpt-oss: each message's header, then its body
HARMONY_ENDS = re.compile(r"<\|(?:call|end|return)\|>")  # what ends a gpt-oss message's body
HARMONY_RECIPIENT = re.compile(r"\bto=(?P<to>[^\s<]+)")
HARMONY_CHANNEL = re.compile(r"<\|channel\|>\s*(?P<channel>\w+)")


class UnknownCallSyntax(ValueError):
    """The chat template writes tool calls in a syntax no reader reads."""


class CallReader(Protocol):
    """The calls in one model turn's text (special tokens kept, its end-of-turn token too), in order, and the text
    without them or a reasoning channel the syntax marks (what TRL's parser gives as the turn's ``content``), of a
    turn that calls or one that answers."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]: ...

    def without_calls(self, text: str) -> str: ...


class JsonInTags:
    """``<tool_call>{"name": ..., "arguments": ...}</tool_call>``."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        return [_json_call(body, "arguments") for body in TAGGED.findall(text)]

    def without_calls(self, text: str) -> str:
        return TAGGED.sub("", text)


class XmlInTags:
    """``<function=NAME>`` and ``<parameter=KEY>VALUE</parameter>`` pairs in each ``<tool_call>`` body."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        calls = []
        for body in TAGGED.findall(text):
            named = XML_NAME.search(body)
            if named is None:
                calls.append(ToolCall("?", None))
                continue
            name = named.group("name").strip()
            types = _argument_types(schemas, name)
            pairs = {m.group("key").strip(): m.group("value") for m in XML_PARAMETER.finditer(body)}
            calls.append(ToolCall(name, {k: typed(v, types.get(k)) for k, v in pairs.items()}))
        return calls

    def without_calls(self, text: str) -> str:
        return TAGGED.sub("", text)


class BareJson:
    """A turn that is one JSON call, or several joined by ``;``: ``{"name": ..., "parameters": {...}}``
    (``arguments`` read too). A turn that does not start with ``{``, or whose object names no tool, is an answer."""

    def __init__(self, special_tokens: list[str]) -> None:
        self.special_tokens = special_tokens  # dropped before reading: the end of turn, Llama 3.1's <|python_tag|>

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        for token in self.special_tokens:
            text = text.replace(token, "")
        text = text.strip()
        if not text.startswith("{"):
            return []
        decoder, calls, at = json.JSONDecoder(), [], 0
        while at < len(text):
            try:
                call, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                return calls + [ToolCall("?", None)]
            if not (isinstance(call, dict) and isinstance(call.get("name"), str)):
                return calls  # JSON, but not a call: an answer
            calls.append(call_of(call, "parameters" if "parameters" in call else "arguments"))
            at = len(text) - len(text[at:].lstrip().removeprefix(";").lstrip())
        return calls

    def without_calls(self, text: str) -> str:
        return "" if self.read(text, []) else text  # a turn that calls is its calls alone


class KeyValueTags:
    """The tool's name after ``<tool_call>``, then ``<arg_key>`` / ``<arg_value>`` pairs, in each ``<tool_call>``."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        calls = []
        for body in TAGGED.findall(text):
            named = TOOL_NAME.match(body.strip())
            if named is None:
                calls.append(ToolCall("?", None))
                continue
            types = _argument_types(schemas, named.group(0))
            pairs = {m.group("key").strip(): m.group("value") for m in ARG_PAIR.finditer(body)}
            calls.append(ToolCall(named.group(0), {k: typed(v, types.get(k)) for k, v in pairs.items()}))
        return calls

    def without_calls(self, text: str) -> str:
        return TAGGED.sub("", text)


class CompactCalls:
    """``<|tool_call>call:NAME{...}<tool_call|>``, the arguments in Gemma 4's compact notation (``CompactValue``);
    text values of an argument the schema types otherwise are typed by it."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        calls = []
        for body in COMPACT_CALL.findall(text):
            head = COMPACT_HEAD.fullmatch(body)
            if head is None:
                named = TOOL_NAME.match(body.strip().removeprefix("call:"))
                calls.append(ToolCall(named.group(0) if named else "?", None))
                continue
            types = _argument_types(schemas, head.group("name"))
            try:
                arguments = CompactValue(head.group("arguments")).whole(types)
            except ValueError:
                arguments = None
            calls.append(ToolCall(head.group("name"), arguments))
        return calls

    def without_calls(self, text: str) -> str:
        return THOUGHT.sub("", COMPACT_CALL.sub("", text)).replace(COMPACT_RESULTS, "")


class MistralList:
    """``[TOOL_CALLS]`` and a JSON list of calls, each with its ``id``."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        if MISTRAL_CALLS not in text:
            return []
        body = text.split(MISTRAL_CALLS, 1)[1].lstrip()
        try:
            calls, _ = json.JSONDecoder().raw_decode(body)
        except json.JSONDecodeError:
            return [ToolCall("?", None)]
        if not isinstance(calls, list):
            return [ToolCall("?", None)]
        read = [call_of(call, "arguments") for call in calls]
        ids = [call.get("id") if isinstance(call, dict) else None for call in calls]
        return [
            ToolCall(c.name, c.arguments, i if isinstance(i, str) else None) for c, i in zip(read, ids, strict=True)
        ]

    def without_calls(self, text: str) -> str:
        return text.split(MISTRAL_CALLS, 1)[0]


class MistralArgs:
    """``[TOOL_CALLS]NAME[ARGS]{...}``, the marker before each call."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        calls = []
        for chunk in text.split(MISTRAL_CALLS)[1:]:
            head, marker, rest = chunk.partition(MISTRAL_ARGS)
            named = TOOL_NAME.match(head.strip())
            name = named.group(0) if named else "?"
            if not marker:
                calls.append(ToolCall(name, None))
                continue
            try:
                arguments, _ = json.JSONDecoder().raw_decode(rest.lstrip())
            except json.JSONDecodeError:
                arguments = None
            calls.append(ToolCall(name, arguments if isinstance(arguments, dict) else None))
        return calls

    def without_calls(self, text: str) -> str:
        return text.split(MISTRAL_CALLS, 1)[0]


class PythonCalls:
    """``[NAME(key=value, ...), ...]``, a Python list whose items are all calls with keyword arguments of literal
    values (JSON's ``true``/``false``/``null`` read too), or JSON call objects; between ``marks`` where given, else the
    whole turn (special tokens dropped); ``one_per_line``: the marks hold the calls bare, one a line (Olmo 3's). A
    list of anything else is an answer; one Python cannot parse, or a call with positional arguments, is unusable."""

    def __init__(
        self, special_tokens: list[str], marks: tuple[str, str] | None = None, one_per_line: bool = False
    ) -> None:
        self.special_tokens, self.marks, self.one_per_line = special_tokens, marks, one_per_line

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        return [call for part in self._parts(text) for call in python_calls(part)]

    def without_calls(self, text: str) -> str:
        if self.marks is None:
            return "" if self.read(text, []) else text
        start, end = (re.escape(m) for m in self.marks)
        return re.sub(rf"{start}.*?{end}", "", text, flags=re.DOTALL)

    def _parts(self, text: str) -> list[str]:
        if self.marks is None:
            for token in self.special_tokens:
                text = text.replace(token, "")
            return [text]
        start, end = self.marks
        parts = [chunk.split(end, 1)[0] for chunk in text.split(start)[1:]]
        if self.one_per_line:  # a JSON value holds no raw newline: each line is one call
            return ["[" + ", ".join(line.strip() for line in p.splitlines() if line.strip()) + "]" for p in parts]
        return parts


class DeepSeekCalls:
    """DeepSeek's call tokens: each call's name, ``<｜tool▁sep｜>`` and its JSON arguments, between
    ``<｜tool▁call▁begin｜>`` and ``<｜tool▁call▁end｜>``; in V3's form the name is ``function`` and the tool's name
    and a fenced JSON block follow the separator."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        calls = []
        for found in DEEPSEEK_CALL.finditer(text):
            name, arguments = found.group("head").strip(), found.group("body").strip()
            fenced = DEEPSEEK_FENCED.fullmatch(arguments) if name == "function" else None
            if fenced is not None:
                name, arguments = fenced.group("name").strip(), fenced.group("arguments")
            calls.append(call_of({"name": name, "arguments": arguments or "{}"}, "arguments"))
        return calls

    def without_calls(self, text: str) -> str:
        return DEEPSEEK_CALLS.sub("", text)


class HarmonyMessages:
    """gpt-oss's harmony messages (``<|start|>ROLE<|channel|>CHANNEL<|message|>BODY<|end|>``, the first one's
    ``<|start|>assistant`` in the prompt): a message addressed ``to=functions.NAME`` is a call whose body is its JSON
    arguments; another recipient (a built-in tool's, ``python``) is a call of that name."""

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        calls = []
        for header, body in _harmony_messages(text):
            if (to := HARMONY_RECIPIENT.search(header)) is not None:
                name = to.group("to").removeprefix("functions.")
                calls.append(call_of({"name": name, "arguments": body.strip() or "{}"}, "arguments"))
        return calls

    def without_calls(self, text: str) -> str:
        """The ``final`` channel's text (TRL's ``content`` of a gpt-oss turn); without one, what the turn said to no
        recipient outside the ``analysis`` channel (a preamble before a call)."""
        said = [(h, b) for h, b in _harmony_messages(text) if HARMONY_RECIPIENT.search(h) is None]
        final = [b for h, b in said if _channel(h) == "final"]
        return "".join(final or [b for h, b in said if _channel(h) != "analysis"])


def _harmony_messages(text: str) -> list[tuple[str, str]]:
    """(header, body) of each message in a gpt-oss turn; text before a message's ``<|message|>`` is its header."""
    messages = []
    for chunk in text.split(HARMONY_START):
        header, opened, rest = chunk.partition(HARMONY_BODY)
        if opened:
            messages.append((header, HARMONY_ENDS.split(rest, maxsplit=1)[0]))
    return messages


def _channel(header: str) -> str | None:
    found = HARMONY_CHANNEL.search(header)
    return found.group("channel") if found else None


class ResponseTemplate:
    """The tokenizer's own ``response_template``, through ``tokenizer.parse_response`` (arguments typed by the
    tools' schemas). A turn it cannot parse has no calls, as in TRL."""

    def __init__(self, tokenizer: Any, prefix: str) -> None:
        self.tokenizer, self.prefix = tokenizer, prefix  # prefix: a generation prompt, for the template's anchor

    def read(self, text: str, schemas: Schemas) -> list[ToolCall]:
        calls = []
        for call in self._parsed(text, schemas).get("tool_calls") or []:
            function = call.get("function", call) if isinstance(call, dict) else {}
            name, arguments = function.get("name"), function.get("arguments")
            calls.append(
                ToolCall(name if isinstance(name, str) else "?", arguments if isinstance(arguments, dict) else None)
            )
        return calls

    def without_calls(self, text: str) -> str:
        return str(self._parsed(text, []).get("content", text) or "")

    def _parsed(self, text: str, schemas: Schemas) -> dict[str, Any]:
        """The parsed message; a turn the template cannot parse is all content."""
        try:
            return self.tokenizer.parse_response(text, prefix=self.prefix, tools=schemas or None)
        except (ValueError, TypeError):
            return {"content": text}


def call_reader(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> CallReader:
    """The reader for the calls ``tokenizer``'s model writes: its ``response_template`` where it has one, else the
    syntax its chat template gives a probe call. ``UnknownCallSyntax`` shows how the template wrote it."""
    kwargs = dict(template_kwargs or {})
    user = [{"role": "user", "content": "-"}]
    if getattr(tokenizer, "response_template", None) is not None:
        prompt = tokenizer.apply_chat_template(user, add_generation_prompt=True, tokenize=False, **kwargs)
        return ResponseTemplate(tokenizer, prompt)
    text, _ = probe_rendering(tokenizer, kwargs)
    if f"<function={PROBE}>" in text:
        return XmlInTags()
    if re.search(rf"<tool_call>\s*\{{[^<]*\"{PROBE}\"", text):
        return JsonInTags()
    if re.search(rf"(^|[>\n])\s*\{{\s*\"name\":\s*\"{PROBE}\",\s*\"(parameters|arguments)\"", text):
        return BareJson(list(tokenizer.all_special_tokens))  # the object opens the turn: not in a list, not quoted
    if re.search(rf"{re.escape(MISTRAL_CALLS)}\s*\[\s*\{{[^\]]*\"{PROBE}\"", text):
        return MistralList()
    if f"{MISTRAL_CALLS}{PROBE}{MISTRAL_ARGS}" in text:
        return MistralArgs()
    if re.search(rf"<tool_call>\s*{PROBE}\s*<arg_key>", text):
        return KeyValueTags()
    if f"<|tool_call>call:{PROBE}{{" in text:
        return CompactCalls()
    if f"to=functions.{PROBE}" in text:
        return HarmonyMessages()
    if re.search(rf"<｜tool▁call▁begin｜>(?:function<｜tool▁sep｜>)?{PROBE}\b", text):
        return DeepSeekCalls()
    if re.search(rf"{OLMO_MARKS[0]}\s*{PROBE}\(x=1\)", text):
        return PythonCalls(list(tokenizer.all_special_tokens), OLMO_MARKS, one_per_line=True)
    if re.search(rf"\[\s*{PROBE}\(x=1\)\s*\]", text):
        lfm = all(m in text for m in LFM_MARKS)
        return PythonCalls(list(tokenizer.all_special_tokens), LFM_MARKS if lfm else None)
    at = text.find(PROBE)
    if at < 0 and all(m in tokenizer.get_vocab() for m in LFM_MARKS):  # LFM2's: the calls stay in the text
        return PythonCalls(list(tokenizer.all_special_tokens), LFM_MARKS)
    if at < 0:
        raise UnknownCallSyntax("its chat template drops an assistant's tool calls")
    shown = text[max(0, at - 30) : at + 50].replace("\n", "\\n")
    raise UnknownCallSyntax(f"its chat template writes a call in a syntax Tailor does not read (...{shown}...)")


def probe_rendering(
    tokenizer: Any, template_kwargs: dict[str, Any] | None = None, call_id: str = PROBE_ID
) -> tuple[str, Callable[[dict], Any]]:
    """The chat template's rendering of an assistant turn that calls the probe tool (the call's id ``call_id``), and
    the form the template takes a call's arguments in: an object (most templates), or, where it cannot render one,
    its JSON text (OpenAI's message form; DeepSeek's templates add it to a string). The template's error where it
    renders neither."""
    kwargs = dict(template_kwargs or {})

    def rendered(form: Callable[[dict], Any]) -> str:
        call = {"id": call_id, "type": "function", "function": {"name": PROBE, "arguments": form({"x": 1})}}
        probe = [{"role": "user", "content": "-"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        return tokenizer.apply_chat_template(probe, tokenize=False, **kwargs)

    try:
        return rendered(_as_given), _as_given
    except Exception:  # the template's own error, whatever its kind
        return rendered(json.dumps), json.dumps


def _as_given(arguments: dict) -> dict:
    return arguments


def _json_call(body: str, key: str) -> ToolCall:
    """One JSON call, ``{"name": str, key: object or JSON string}``; anything else is unusable (``arguments=None``),
    named as far as it can be."""
    try:
        return call_of(json.loads(body), key)
    except json.JSONDecodeError:
        return ToolCall("?", None)


def _argument_types(schemas: Schemas, name: str) -> dict[str, Any]:
    """The JSON-schema type of each argument of the tool ``name`` (none where no schema names it)."""
    for schema in schemas:
        function = schema.get("function", schema)
        if function.get("name") == name:
            return {k: v.get("type") for k, v in function.get("parameters", {}).get("properties", {}).items()}
    return {}
