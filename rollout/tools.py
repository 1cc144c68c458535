"""The tools an episode may call, as TRL's ``GRPOTrainer`` takes them: plain or ``async def`` functions and the
public methods of an environment (one instance per episode, ``reset(**row)`` first).

A tool's name, signature and docstring are its schema (transformers' ``get_json_schema``, the form the chat template's
``tools=`` argument takes). Calls never stall an episode: every call has a timeout; a plain function runs on a thread
of its own (a hung one is abandoned there, a daemon, and its episode goes on), a coroutine is cancelled. A call that
raises, times out, names no known tool or has unusable arguments returns an error message to the model and is
counted by its reason.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl.rewards.loading import load_reward_fn

NOT_TOOLS = ("reset", "get_reward")  # an environment's methods that TRL does not expose as tools


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: a tool's name and its keyword arguments (``None``: the call was unusable), and
    the id it gave the call where its syntax has one (Mistral's), which its result names."""

    name: str
    arguments: dict[str, Any] | None
    id: str | None = None

    def message(self) -> dict[str, Any]:
        """The call as an entry of an assistant message's ``tool_calls``, in TRL's and transformers' shape."""
        call = {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return call if self.id is None else {"id": self.id, **call}


@dataclass
class ToolStats:
    """What an episode's tool calls cost: calls made, failures by reason, seconds spent in tools."""

    calls: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def fail(self, reason: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1


def load_named(spec: str, kind: str, example: str, base_dir: str | Path | None) -> Any:
    """What ``spec`` (``path/to/file.py:NAME`` or ``package.module:NAME``) names; a ``ValueError`` names the ``kind``
    of spec and what is wrong."""
    if ":" not in spec:
        raise ValueError(f"{kind} spec {spec!r}: expected 'path/to/file.py:{example}' or 'package.module:{example}'")
    try:
        return load_reward_fn(spec, base_dir)
    except ValueError as e:
        raise ValueError(str(e).replace("reward spec", f"{kind} spec", 1)) from None


def load_tool(spec: str, base_dir: str | Path | None = None) -> Callable[..., Any]:
    """The function ``spec`` names (``path/to/file.py:function`` or ``package.module:function``), checked to be a
    documented tool. Raises ``ValueError`` naming the spec and what is wrong."""
    fn = load_named(spec, "tool", "function", base_dir)
    tool_schema(fn, f"tool spec {spec!r}")
    return fn


def load_environment(spec: str, base_dir: str | Path | None = None) -> Callable[[], Any]:
    """The environment class or factory ``spec`` names; one instance is made (and dropped) to check it has a
    ``reset`` and documented public methods. Raises ``ValueError`` naming the spec and what is wrong."""
    factory = load_named(spec, "environment", "Class", base_dir)
    try:
        instance = factory()
    except Exception as e:
        raise ValueError(
            f"environment spec {spec!r}: calling it with no arguments failed: {type(e).__name__}: {e}"
        ) from None
    if not callable(getattr(instance, "reset", None)):
        raise ValueError(f"environment spec {spec!r}: its instances have no reset method (TRL calls reset(**row))")
    methods = environment_tools(instance)
    if not methods:
        raise ValueError(f"environment spec {spec!r}: no public method besides reset to offer as a tool")
    for method in methods:
        tool_schema(method, f"environment spec {spec!r}")
    return factory


def environment_tools(instance: Any) -> list[Callable[..., Any]]:
    """The environment's tools as TRL finds them: the bound public methods of its class but ``reset``/``get_reward``."""
    names = [n for n, _ in inspect.getmembers(type(instance), inspect.isfunction)]
    return [getattr(instance, n) for n in names if not n.startswith("_") and n not in NOT_TOOLS]


def tool_schema(fn: Callable[..., Any], where: str = "tool") -> dict[str, Any]:
    """The JSON schema of ``fn`` the chat template renders (name, description, typed and described arguments).
    Raises ``ValueError`` naming ``where`` when its docstring or type hints do not make one."""
    from transformers.utils import get_json_schema

    name = getattr(fn, "__name__", repr(fn))
    try:
        return get_json_schema(fn)
    except Exception as e:  # transformers raises its own exception types for a missing docstring or type hint
        raise ValueError(
            f"{where}: {name} cannot be a tool: {e} (a tool needs a docstring with an Args: line per argument and "
            "type hints)"
        ) from None


class ToolBox:
    """One episode's tools by name, each call timed out after ``timeout_s``."""

    def __init__(self, tools: list[Callable[..., Any]], timeout_s: float) -> None:
        self.tools = {t.__name__: t for t in tools}
        self.timeout_s = timeout_s
        self.stats = ToolStats()

    def schemas(self) -> list[dict[str, Any]]:
        return [tool_schema(t) for t in self.tools.values()]

    async def call(self, call: ToolCall) -> str:
        """The tool's result as text for the model (``str`` of what it returned, as TRL does), or an error message;
        never raises. Counted in ``stats``."""
        self.stats.calls += 1
        fn = self.tools.get(call.name)
        if call.arguments is None:
            return self._failed("bad_call", f"could not parse the call to {call.name!r}")
        if fn is None:
            return self._failed("unknown_tool", f"no tool named {call.name!r}; tools: {', '.join(self.tools)}")
        t0 = time.monotonic()
        try:
            if inspect.iscoroutinefunction(fn):
                result = await asyncio.wait_for(fn(**call.arguments), self.timeout_s)
            else:
                result = await asyncio.wait_for(_in_thread(fn, call.arguments), self.timeout_s)
        except TimeoutError:
            return self._failed("timeout", f"tool {call.name!r} timed out after {self.timeout_s:g} s")
        except Exception as e:  # the tool's own failure goes back to the model, as TRL returns it
            return self._failed("raised", f"{type(e).__name__}: {e}")
        finally:
            self.stats.seconds += time.monotonic() - t0
        return str(result)

    def _failed(self, reason: str, message: str) -> str:
        self.stats.fail(reason)
        return str({"error": message})


def _in_thread(fn: Callable[..., Any], arguments: dict[str, Any]) -> asyncio.Future[Any]:
    """``fn(**arguments)`` on a daemon thread of its own: a call that never returns holds no shared executor worker
    and no interpreter exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the call timed out: nobody waits for it
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(**arguments), None
        except BaseException as e:  # handed to the awaiting episode, which turns it into an error message
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop has closed: nobody waits for this call any more
            pass

    threading.Thread(target=run, daemon=True, name=f"tool-{getattr(fn, '__name__', 'call')}").start()
    return future
