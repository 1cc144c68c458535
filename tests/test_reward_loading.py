"""Resolving reward specs: files, modules, built-ins, and the errors for bad specs."""

from pathlib import Path

import pytest

from rl.rewards.loading import load_reward_fn
from rl.rewards.math import arith_exact, format_reward, math_accuracy

REWARD_SOURCE = """
LIMIT = 3

def reward_len(completions, **kwargs):
    return [-abs(20 - len(c)) for c in completions]
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_relative_file_against_base_dir(tmp_path: Path) -> None:
    _write(tmp_path / "recipes" / "my_rewards.py", REWARD_SOURCE)
    fn = load_reward_fn("recipes/my_rewards.py:reward_len", base_dir=tmp_path)
    assert fn(prompts=["p"], completions=["x" * 15]) == [-5]


def test_load_relative_file_against_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "cwd_rewards.py", REWARD_SOURCE)
    monkeypatch.chdir(tmp_path)
    assert load_reward_fn("cwd_rewards.py:reward_len")(completions=["x" * 20]) == [0]


def test_load_absolute_file_with_sibling_import(tmp_path: Path) -> None:
    _write(tmp_path / "helpers_for_reward.py", "def bonus():\n    return 2.0\n")
    path = _write(
        tmp_path / "uses_helper.py",
        "from helpers_for_reward import bonus\n\ndef f(completions, **kw):\n    return [bonus()] * len(completions)\n",
    )
    assert load_reward_fn(f"{path}:f", base_dir="/nonexistent")(completions=["a", "b"]) == [2.0, 2.0]


def test_load_module_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "tmp_reward_pkg" / "__init__.py", "")
    _write(tmp_path / "tmp_reward_pkg" / "scoring.py", REWARD_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = load_reward_fn("tmp_reward_pkg.scoring:reward_len")
    assert fn(completions=["x" * 22]) == [-2]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("math_accuracy", math_accuracy),
        ("format", format_reward),
        ("arith_exact", arith_exact),
        ("rl.rewards.math:arith_exact", arith_exact),
        ("  arith_exact ", arith_exact),
    ],
)
def test_load_builtins(spec: str, expected: object) -> None:
    assert load_reward_fn(spec) is expected


def test_load_overlong_builtin() -> None:
    fn = load_reward_fn("overlong(100, 20)")
    assert fn(prompts=[""] * 2, completions=["", ""], completion_length=[50, 90]) == [0.0, -0.5]


def test_a_called_spec_is_the_reward_its_call_makes_as_trls_factories_are_used(tmp_path: Path) -> None:
    """``module:factory(literals)`` is what TRL users put in ``reward_funcs``: TRL's own soft overlong penalty, made
    with positional and keyword arguments, scores as TRL's formula says; a file's factory works alike; the logs
    name it as TRL does, by the function the factory returned."""
    from rl.output.completions import reward_names

    overlong = "trl.rewards:get_soft_overlong_punishment(20, soft_punish_cache=10)"
    penalty = load_reward_fn(overlong)
    lengths = [5, 10, 15, 20, 21]  # 0 up to 20 - 10 tokens, then down to -1 at 20
    assert penalty(completions=[""] * 5, completion_ids=[[0] * n for n in lengths]) == [0.0, 0.0, -0.5, -1.0, -1.0]
    _write(
        tmp_path / "scaled.py",
        "def scaled(by, names=('x',)):\n    return lambda completions, **kw: [by] * len(completions)\n",
    )
    made = load_reward_fn("scaled.py:scaled(0.5, names=['a', 'b'])", base_dir=tmp_path)
    assert made(prompts=["p"], completions=["c"]) == [0.5]
    assert reward_names([overlong, "arith_exact"]) == {
        overlong: "soft_overlong_punishment_reward",
        "arith_exact": "arith_exact",
    }


REWARD_FORMS = """
import functools


def length(completions, scale=1.0, **kw):
    return [scale * len(c) for c in completions]


class Judge:
    def __call__(self, completions, **kw):
        return [0.0] * len(completions)


def brevity(completions, **kw):
    return [-len(c) for c in completions]


short = functools.partial(length, scale=-1.0)
judge = Judge()
alias = brevity
"""


def test_rewards_are_logged_under_the_names_trl_gives_them(tmp_path: Path) -> None:
    """TRL's get_callable_name: a partial by the function it wraps, a callable object by its class, an alias by the
    function's own name; built-ins keep their short names, a reward model its folder's, a spec that does not load
    here the name it gives."""
    from rl.output.completions import reward_names

    path = _write(tmp_path / "forms.py", REWARD_FORMS)
    specs = [f"{path}:{name}" for name in ("short", "judge", "alias")]
    assert reward_names([*specs, "format", "overlong(100,20)", "model:/m/rm-7b", "gone.py:mine"]) == {
        specs[0]: "length",
        specs[1]: "Judge",
        specs[2]: "brevity",
        "format": "format",
        "overlong(100,20)": "overlong(100,20)",
        "model:/m/rm-7b": "rm-7b",
        "gone.py:mine": "mine",
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("missing.py:f", r"'missing.py:f'.*does not exist"),
        ("my_rewards.py:nope", r"'my_rewards.py:nope'.*has no attribute 'nope'"),
        ("my_rewards.py:LIMIT", r"'my_rewards.py:LIMIT'.*'LIMIT'.*is not callable \(int\)"),
        ("broken.py:f", r"'broken.py:f'.*importing .*broken.py failed: ZeroDivisionError"),
        ("no_such_module_xyz:f", r"'no_such_module_xyz:f'.*cannot import module 'no_such_module_xyz'"),
        ("rl.rewards.math:nope", r"module 'rl.rewards.math' has no attribute 'nope'"),
        ("just_a_name", r"'just_a_name'.*expected 'path/to/file.py:function'.*arith_exact"),
        ("file.py:", r"'file.py:'.*expected"),
        ("overlong(10, 20)", r"'overlong\(10, 20\)'.*buffer_len"),
        ("trl.rewards:get_soft_overlong_punishment(cap)", r"argument 'cap' is not a Python literal"),
        ("trl.rewards:get_soft_overlong_punishment(**{'a': 1})", r"give the arguments as literals"),
        ("trl.rewards:get_soft_overlong_punishment(1, 2", r"has no attribute"),
        ("trl.rewards:get_soft_overlong_punishment(size=9)", r"the call failed: TypeError: .*unexpected keyword"),
        ("my_rewards.py:LIMIT()", r"'LIMIT'.*is not callable \(int\)"),
        ("math:floor(2.5)", r"the call returned int 2, not a function"),
    ],
)
def test_load_errors_name_spec_and_problem(tmp_path: Path, spec: str, message: str) -> None:
    _write(tmp_path / "my_rewards.py", REWARD_SOURCE)
    _write(tmp_path / "broken.py", "x = 1 / 0\n")
    with pytest.raises(ValueError, match=message):
        load_reward_fn(spec, base_dir=tmp_path)


def test_a_sigterm_while_a_reward_imports_still_stops_the_command(tmp_path):
    """A user's ``sys.exit`` on import is a failed import (one line); the exit a SIGTERM asks for (``rl.cli.main``
    raises ``Terminated`` from its handler, here raised where the import would be when the signal lands) goes
    through."""
    from rl.loop.processes import Terminated

    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "signalled.py").write_text("from rl.loop.processes import Terminated\nraise Terminated(143)\n")
    with pytest.raises(ValueError, match="SystemExit: 3"):
        load_reward_fn(f"{tmp_path / 'exits.py'}:r")
    with pytest.raises(Terminated) as stopped:
        load_reward_fn(f"{tmp_path / 'signalled.py'}:r")
    assert stopped.value.code == 143


def test_an_overlong_penalty_beyond_the_response_cap_is_refused_or_warned_of(caplog):
    """DAPO's penalty ends at the cap: one starting past ``rollout.max_tokens`` would score every response 0 (a
    no-op, refused); one ending past it never reaches -1 (a warning); one ending at or before it is silent."""
    from rl.inputs.preflight import BadInput, check_overlong_reach

    with pytest.raises(
        BadInput, match=r"never applies: its penalty starts after 900 tokens, .* e\.g\. overlong\(40,8\)"
    ):
        check_overlong_reach("overlong(1000, 100)", 40)
    with caplog.at_level("WARNING", logger="rl.preflight"):
        check_overlong_reach("overlong(50,20)", 40)
        check_overlong_reach("overlong(40,8)", 40)
        check_overlong_reach("overlong(30,8)", 40)
        check_overlong_reach("arith_exact", 40)
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("reward 'overlong(50,20)' reaches at most -0.50, not -1") and "overlong(40,20)" in said
