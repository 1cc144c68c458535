"""How a tool call's arguments are written, read into Python values: a JSON call object, a value written as text and
typed by its argument's schema, Gemma 4's compact notation, a Python list of calls. Pure parsing: where a model's
turn holds its calls, and in which notation, is ``rl.rollout.tool_calls``'s concern."""

from __future__ import annotations

import ast
import json
from typing import Any

from rl.rollout.tools import ToolCall

COMPACT_QUOTE = '<|"|>'  # opens and closes a text value in Gemma 4's calls
JSON_WORDS = {"true": True, "false": False, "null": None}  # read as Python's where a Python call has them


def call_of(call: Any, key: str) -> ToolCall:
    """A decoded call: its name and its ``key`` (an object, or a JSON string of one)."""
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall("?", None)
    arguments = call.get(key, {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    return ToolCall(call["name"], arguments if isinstance(arguments, dict) else None)


def typed(value: str, kind: Any) -> Any:
    """A value written as text, as its argument's type: text for a string (or an unknown argument whose text is not
    JSON), else its JSON value (Python's ``True``/``False`` read as booleans)."""
    if kind == "string":
        return value
    text = value.strip()
    if kind == "boolean" and text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return value


class CompactValue:
    """A reader of Gemma 4's compact values: ``{key:value,...}`` (a key bare or between ``<|"|>`` marks),
    ``[value,...]``, ``<|"|>text<|"|>``, and bare scalars read as JSON (``3``, ``true``, ``null``) or else as text.
    ``ValueError`` where the text is not one whole value."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def whole(self, types: dict[str, Any]) -> dict[str, Any]:
        """The text as one object, its top-level values typed by ``types`` (an argument's JSON-schema type)."""
        value = self.mapping(types)
        if self._skip_blanks() < len(self.text):
            raise ValueError("text after the arguments")
        return value

    def value(self, kind: Any = None) -> Any:
        at = self._skip_blanks()
        if self.text.startswith(COMPACT_QUOTE, at):
            text = self._quoted()
            return text if kind in (None, "string") else typed(text, kind)
        if self.text.startswith("{", at):
            return self.mapping({})
        if self.text.startswith("[", at):
            return self.sequence()
        end = at
        while end < len(self.text) and self.text[end] not in ",}]":
            end += 1
        raw, self.at = self.text[at:end].strip(), end
        if not raw:
            raise ValueError(f"a value is missing at {at}")
        return None if raw == "None" and kind != "string" else typed(raw, kind)  # None: as Jinja writes it

    def mapping(self, types: dict[str, Any]) -> dict[str, Any]:
        self._expect("{")
        out: dict[str, Any] = {}
        while not self._take("}"):
            if out:
                self._expect(",")
            at = self._skip_blanks()
            if self.text.startswith(COMPACT_QUOTE, at):
                key = self._quoted()
            else:
                end = self.text.find(":", at)
                if end < 0:
                    raise ValueError(f"a key without a value at {at}")
                key, self.at = self.text[at:end].strip(), end
            self._expect(":")
            out[key] = self.value(types.get(key))
        return out

    def sequence(self) -> list[Any]:
        self._expect("[")
        out: list[Any] = []
        while not self._take("]"):
            if out:
                self._expect(",")
            out.append(self.value())
        return out

    def _quoted(self) -> str:
        start = self.at + len(COMPACT_QUOTE)
        end = self.text.find(COMPACT_QUOTE, start)
        if end < 0:
            raise ValueError("a text value is not closed")
        self.at = end + len(COMPACT_QUOTE)
        return self.text[start:end]

    def _take(self, mark: str) -> bool:
        if self.text.startswith(mark, self._skip_blanks()):
            self.at += len(mark)
            return True
        if self.at >= len(self.text):
            raise ValueError("the value is not closed")
        return False

    def _expect(self, mark: str) -> None:
        if not self._take(mark):
            raise ValueError(f"{mark!r} expected at {self.at}")

    def _skip_blanks(self) -> int:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1
        return self.at


def python_calls(text: str) -> list[ToolCall]:
    """The calls of one Python list (``PythonCalls``); none where it is not a list of calls."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return []
    try:
        items = ast.parse(text, mode="eval").body
    except SyntaxError:
        return [ToolCall("?", None)]
    if not isinstance(items, ast.List) or not items.elts:
        return []
    if all(isinstance(i, ast.Dict) for i in items.elts):  # LFM2 writes JSON call objects too
        try:
            return [call_of(ast.literal_eval(i), "arguments") for i in items.elts]
        except ValueError:
            return [ToolCall("?", None)]
    if not all(isinstance(i, ast.Call) for i in items.elts):
        return []
    return [_python_call(i) for i in items.elts if isinstance(i, ast.Call)]


def _python_call(call: ast.Call) -> ToolCall:
    """One ``NAME(key=value, ...)``: unusable with positional arguments or a value that is not a literal."""
    name = ast.unparse(call.func)
    if call.args or any(k.arg is None for k in call.keywords):
        return ToolCall(name, None)
    try:
        return ToolCall(name, {k.arg: _literal(k.value) for k in call.keywords if k.arg is not None})
    except ValueError:
        return ToolCall(name, None)


def _literal(node: ast.expr) -> Any:
    """A literal's value, JSON's words read as Python's."""
    if isinstance(node, ast.Name) and node.id in JSON_WORDS:
        return JSON_WORDS[node.id]
    return ast.literal_eval(node)
