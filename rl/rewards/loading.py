"""Resolve a reward spec (``file.py:function``, ``package.module:function``, either called with literal arguments
to make the reward, built-in name, or a reward model's ``RewardModelSpec``) to a callable."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rl.loop.processes import Terminated
from rl.rewards.model import RewardModel, RewardModelSpec

# Built-in short names -> "module:function" inside this package.
BUILTINS: dict[str, str] = {
    "math_accuracy": "rl.rewards.math:math_accuracy",
    "format": "rl.rewards.math:format_reward",
    "arith_exact": "rl.rewards.math:arith_exact",
    "arith_steps": "rl.rewards.math:arith_steps",
    "environment": "rl.rewards.environment:environment_reward",  # rollout.environment's get_reward()
}
_OVERLONG = re.compile(r"overlong\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_CALLED = re.compile(r"(?P<target>[^()]+:[\w.]+)\((?P<arguments>.*)\)", re.DOTALL)  # module:factory(arguments)

RewardSpec = str | RewardModelSpec  # what a reward pool is given, one per weighted reward


def overlong_lengths(spec: str) -> tuple[int, int] | None:
    """``(MAX_LEN, BUFFER_LEN)`` of an ``overlong(MAX_LEN,BUFFER_LEN)`` spec; None for any other spec."""
    found = _OVERLONG.fullmatch(spec.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def called_target(spec: str) -> str:
    """The function a spec names, without the arguments a called spec makes its reward with."""
    called = _CALLED.fullmatch(spec.strip())
    return called.group("target").strip() if called else spec.strip()


@functools.cache
def logged_name(spec: str) -> str:
    """The name the reward of ``spec`` is logged under, as TRL names a reward function: a module's or file's callable
    by its own name (a ``functools.partial`` by the function it wraps, a callable object by its class), so a
    factory's reward by the function the factory returned; a built-in by its short name, a reward model by its
    folder's; a spec that does not load in this process by the name it gives."""
    target = called_target(spec)
    given = re.split(r"[:/]", target.rstrip("/"))[-1]
    if ":" not in target or spec.startswith("model:"):
        return given
    try:
        fn = load_reward_fn(spec)
    except ValueError:
        return given
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


def load_reward_fn(spec: RewardSpec, base_dir: str | Path | None = None) -> Callable:
    """Return the reward function named by ``spec``.

    ``spec`` is a ``RewardModelSpec`` (the model is loaded here), a built-in short name (see ``BUILTINS``),
    ``overlong(MAX_LEN,BUFFER_LEN)`` (DAPO's soft overlong penalty), ``path/to/file.py:function`` (a relative path
    is resolved against ``base_dir``, default the current directory) or ``package.module:function``; either of the
    last two called with Python literals, ``trl.rewards:get_soft_overlong_punishment(max_completion_len=512,
    soft_punish_cache=128)``, is the reward that call returns, as TRL's reward factories are used.
    Raises ``ValueError`` naming the spec and what is wrong.
    """
    if isinstance(spec, RewardModelSpec):
        try:
            return RewardModel(spec)
        except Terminated:
            raise
        except Exception as e:
            raise ValueError(f"reward {spec}: cannot load it ({type(e).__name__}: {e})") from e
    spec = spec.strip()
    overlong = overlong_lengths(spec)
    if overlong:
        from rl.rewards.math import overlong_penalty

        try:
            return overlong_penalty(*overlong)
        except ValueError as e:
            raise ValueError(f"reward spec {spec!r}: {e}") from e
    called = _CALLED.fullmatch(spec)
    target = called.group("target").strip() if called else BUILTINS.get(spec, spec)
    source, sep, attr = target.rpartition(":")
    if not sep or not source or not attr:
        raise ValueError(
            f"reward spec {spec!r}: expected 'path/to/file.py:function', 'package.module:function' "
            f"or a built-in name ({', '.join(sorted(BUILTINS))}, overlong(MAX_LEN,BUFFER_LEN))"
        )
    if source.endswith(".py"):
        path = Path(source).expanduser()
        if not path.is_absolute():
            path = Path(base_dir if base_dir is not None else Path.cwd()) / path
        module = _import_file(spec, path.resolve())
        where = f"file {path}"
    else:
        try:
            module = importlib.import_module(source)
        except ImportError as e:
            raise ValueError(f"reward spec {spec!r}: cannot import module {source!r}: {e}") from e
        except Terminated:
            raise
        except (Exception, SystemExit) as e:  # the module's own code failed, or exited, while importing
            raise ValueError(
                f"reward spec {spec!r}: importing module {source!r} failed: {type(e).__name__}: {e}"
            ) from e
        where = f"module {source!r}"
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"reward spec {spec!r}: {where} has no attribute {attr!r}")
    if not callable(fn):
        raise ValueError(f"reward spec {spec!r}: {attr!r} in {where} is not callable ({type(fn).__name__})")
    return _made(spec, fn, called.group("arguments")) if called else fn


def _made(spec: str, factory: Callable, arguments: str) -> Callable:
    """The reward ``factory`` returns when called with ``arguments`` (Python literals, by position or keyword)."""
    try:
        call = ast.parse(f"f({arguments})", mode="eval").body
    except SyntaxError:
        raise ValueError(f"reward spec {spec!r}: its arguments are not Python syntax") from None
    if not isinstance(call, ast.Call) or any(k.arg is None for k in call.keywords):
        raise ValueError(f"reward spec {spec!r}: give the arguments as literals, by position or name")
    args = [_literal(spec, node) for node in call.args]
    kwargs = {str(k.arg): _literal(spec, k.value) for k in call.keywords}
    try:
        made = factory(*args, **kwargs)
    except Terminated:
        raise
    except Exception as e:
        raise ValueError(f"reward spec {spec!r}: the call failed: {type(e).__name__}: {e}") from None
    if not callable(made):
        raise ValueError(f"reward spec {spec!r}: the call returned {type(made).__name__} {made!r:.40}, not a function")
    return made


def _literal(spec: str, node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(
            f"reward spec {spec!r}: argument {ast.unparse(node)!r} is not a Python literal (a number, string, list, "
            "dict, True, False or None)"
        ) from None


def _import_file(spec: str, path: Path):
    """Import a Python file as a fresh module (its folder is put on ``sys.path`` for sibling imports)."""
    if not path.is_file():
        raise ValueError(f"reward spec {spec!r}: file {path} does not exist")
    name = f"_tailor_reward_{path.stem}_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"reward spec {spec!r}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Terminated:
        del sys.modules[name]
        raise
    except (Exception, SystemExit) as e:  # an exit while importing is a failed import, not the caller's exit
        del sys.modules[name]
        raise ValueError(f"reward spec {spec!r}: importing {path} failed: {type(e).__name__}: {e}") from e
    return module
