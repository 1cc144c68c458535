"""Bad input is answered in one line before any actor starts (exit code 2), or skipped and counted.

Each case runs ``rl train`` in-process with ``run_training`` replaced by a tripwire, so a case that got past the
checks would fail loudly; one case runs the ``rl`` command in a subprocess to show stderr has no traceback.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl import cli, driver
from rl.config import load_config
from rl.data.stream import PromptStream
from rl.preflight import BadInput, check_model_path, preflight, split_rows

ROWS = [{"question": f"{a}+{b}=", "answer": str(a + b), "topic": "add"} for a in range(10) for b in range(10)]
NON_UTF8_LINE = b'{"question": "1+\xff=", "answer": "1"}\n'  # Latin-1, not UTF-8
# a small run of the tiny model on a data file; the file's rows fit its character vocabulary
BASE = ["train.batch_groups=4", "eval.num_problems=4", "data.prompt_field=question", "data.answer_field=answer"]


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _reward(tmp_path: Path, body: str) -> str:
    """A reward file under ``tmp_path`` holding ``body``; returns the spec of its function ``r``."""
    _file(tmp_path / "my_reward.py", body)
    return f"{tmp_path / 'my_reward.py'}:r"


@pytest.fixture
def no_actor(monkeypatch):
    """Fail the test if a run would start (any Ray actor starts inside ``Driver.run``)."""

    async def tripwire(*_args, **_kwargs):
        raise AssertionError("bad input reached Driver.run: an actor would start")

    monkeypatch.setattr(driver.Driver, "run", tripwire)


def _train(capsys, recipe: str | Path, *overrides: str) -> tuple[int, str]:
    """``rl train`` in-process; returns the exit code and stderr, which must be one line without a traceback."""
    import ray

    code = cli.main(["train", str(recipe), *overrides])
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert not ray.is_initialized()
    return code, err


def _data_case(tmp_path: Path, rows: list) -> list[str]:
    """The recipe on a question/answer file; its rewards but arith_steps (which needs the arith rows' solutions)."""
    return [*BASE, f"data.source={_jsonl(tmp_path / 'data.jsonl', rows)}", "reward.functions=[{fn: arith_exact}]"]


def _bad_reward(tmp_path: Path, body: str) -> list[str]:
    return [*_data_case(tmp_path, ROWS), f"reward.functions.0.fn={_reward(tmp_path, body)}", "reward.timeout_s=2"]


# (case id, overrides built from tmp_path, the message's expected fragment)
CASES = [
    (
        "fewer_rows_than_batch_groups",
        lambda t: _data_case(t, ROWS[:3]),
        "usable training rows, fewer than train.batch_groups (4); add rows or lower train.batch_groups",
    ),
    ("missing_data_file", lambda t: [*BASE, f"data.source={t / 'nope.jsonl'}"], "does not exist"),
    ("missing_data_dir", lambda t: [*BASE, "data.source=./no/such/folder"], "does not exist"),
    ("no_usable_rows", lambda t: _data_case(t, [{"question": " ", "answer": "1"}] * 5), "no usable rows"),
    (
        "wrong_prompt_field",
        lambda t: [*_data_case(t, ROWS), "data.prompt_field=problem"],
        "skipped {'missing_field': 100}; prompt field 'problem', answer field 'answer', the first row's columns "
        "['answer', 'question', 'topic']",
    ),
    ("unsupported_file_type", lambda t: [*BASE, f"data.source={_file(t / 'd.csv', 'a,b')}"], "unsupported file"),
    (
        "non_utf8_data",
        lambda t: [*BASE, "data.source=" + str(_raw(t / "d.jsonl", NON_UTF8_LINE))],
        "not UTF-8 text",
    ),
    ("missing_model_dir", lambda t: ["model.path=./no_model_here"], "model.path './no_model_here' does not exist"),
    ("model_dir_without_config", lambda t: [f"model.path={t}"], "has no config.json"),
    ("unknown_builtin_model", lambda t: ["model.path=builtin:nope"], "unknown builtin model"),
    ("list_index_out_of_range", lambda t: ["reward.functions.3.fn=format"], "is not an item of a list of 2"),
    ("max_tokens_over_model_len", lambda t: ["rollout.max_tokens=96"], "leaves no room for a prompt"),
    (
        "no_prompt_fits",
        lambda t: [*_data_case(t, ROWS), "rollout.max_model_len=43"],
        "no training prompt fits: the shortest has 4 tokens",
    ),
    ("missing_reward_file", lambda t: ["reward.functions.0.fn=./absent.py:r"], "does not exist"),
    ("missing_reward_function", lambda t: ["reward.functions.0.fn=rl.rewards.math:nope"], "has no attribute 'nope'"),
    ("unknown_reward_module", lambda t: ["reward.functions.0.fn=no_such_pkg.mod:r"], "cannot import module"),
    (
        "reward_wrong_arguments",
        lambda t: _bad_reward(t, "def r(completions, solution):\n    return [1.0] * len(completions)\n"),
        "unexpected keyword argument 'prompts' (a reward gets the keyword arguments prompts, completions, answer",
    ),
    (
        "reward_returns_strings",
        lambda t: _bad_reward(t, "def r(completions, **kw):\n    return ['1.0'] * len(completions)\n"),
        "on row data-0: a reward function must return numbers or None, got str '1.0'",
    ),
    (
        "reward_wrong_length",
        lambda t: _bad_reward(t, "def r(completions, **kw):\n    return [1.0, 0.0]\n"),
        "returned 2 values for 1 completion",
    ),
    (
        "reward_raises",
        lambda t: _bad_reward(t, "def r(completions, **kw):\n    raise KeyError('gold')\n"),
        "KeyError: 'gold'",
    ),
    (
        "reward_hangs",
        lambda t: _bad_reward(t, "import time\ndef r(completions, **kw):\n    time.sleep(30)\n"),
        "no result within reward.timeout_s (2 s)",
    ),
    ("reward_import_fails", lambda t: _bad_reward(t, "import not_a_module\n"), "importing"),
    ("chat_without_template", lambda t: ["data.chat=true"], "has no chat template, but data.chat is set"),
    (
        "chat_rows_without_template",
        lambda t: _data_case(
            t, [{"question": [{"role": "user", "content": f"{n}+1="}], "answer": str(n + 1)} for n in range(8)]
        ),
        "holds chat messages; use a model with a chat template",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_before_any_actor(tmp_path, capsys, no_actor, overrides, message):
    code, err = _train(capsys, "arith_tiny", *overrides(tmp_path))
    assert code == 2
    assert message in err
    assert len(err.splitlines()) == 1 or err.startswith("invalid config:\n1 validation error"), err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "a recipe must be a mapping at the top level, not a list"),
        ("a: [1\n", "not valid YAML"),
        (b"name: \xff\xfe\n", "not UTF-8 text"),
    ],
    ids=["not_a_mapping", "not_yaml", "not_utf8"],
)
def test_bad_recipe_file(tmp_path, capsys, no_actor, text, message):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, err = _train(capsys, recipe)
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_missing_recipe(capsys, no_actor):
    code, err = _train(capsys, "no_such_recipe")
    assert code == 2 and "recipe 'no_such_recipe' not found" in err


def test_list_item_override_reaches_the_list():
    cfg = load_config(None, ["reward.functions=[{fn: format}, {fn: arith_exact}]", "reward.functions.1.weight=0.5"])
    assert [(f.fn, f.weight) for f in cfg.reward.functions] == [("format", 1.0), ("arith_exact", 0.5)]
    cfg = load_config(None, ["reward.functions.0.fn=math_accuracy"])
    assert cfg.reward.functions[0].fn == "math_accuracy"


def test_hub_names_pass_without_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert check_model_path("gpt2") == "gpt2"
    with pytest.raises(BadInput, match="does not exist"):
        check_model_path("~/models/none/here")


def test_bad_rows_are_counted_skips(tmp_path, caplog):
    """Malformed lines, empty prompts or answers and over-long prompts are skipped, each reason counted in a log."""
    rows = [*ROWS[:20], "{broken", "also not json", {"question": "", "answer": "1"}, {"question": "1+1=", "answer": ""}]
    rows.append({"question": "1+" * 40 + "1=", "answer": "41"})  # 82 tokens: over 96 - 40
    cfg = load_config("recipes/arith_tiny.yaml", _data_case(tmp_path, rows))
    with caplog.at_level(logging.WARNING):
        inputs = preflight(cfg)
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "malformed_line=2" in log and "empty_prompt=1" in log and "bad_answer=1" in log
    assert "skipped 1 of " in log and "prompt longer than 56 tokens" in log
    assert len(inputs.train_rows) + len(inputs.test_rows) == 20


def test_one_file_holds_out_a_fixed_part(tmp_path, capsys):
    cfg = load_config("recipes/arith_tiny.yaml", [*_data_case(tmp_path, ROWS), "data.test_fraction=0.2"])
    train, test = split_rows(cfg.data)
    assert "holding out" in capsys.readouterr().out
    assert not {r.prompt for r in train} & {r.prompt for r in test}
    assert len(train) + len(test) == len(ROWS) and 10 <= len(test) <= 30
    again = split_rows(cfg.data.model_copy(update={"test_fraction": 0.2}))
    assert [r.prompt_id for r in again[1]] == [r.prompt_id for r in test]  # deterministic


def test_test_source_and_the_warning_for_no_hold_out(tmp_path, caplog):
    held = _jsonl(tmp_path / "held.jsonl", ROWS[:5])
    cfg = load_config("recipes/arith_tiny.yaml", [*_data_case(tmp_path, ROWS), f"data.test_source={held}"])
    train, test = split_rows(cfg.data)
    assert len(train) == len(ROWS) and [r.prompt for r in test] == [r["question"] for r in ROWS[:5]]
    with caplog.at_level(logging.WARNING):
        train, test = split_rows(cfg.data.model_copy(update={"test_source": None, "test_fraction": 0.0}))
    assert train == test and "evaluating on training rows" in caplog.text


def test_prompt_stream_refuses_too_few_rows():
    with pytest.raises(ValueError, match="3 training rows cannot fill a batch of 4"):
        PromptStream([object()] * 3, 4, seed=0)


def test_subprocess_exit_code_and_no_traceback(tmp_path):
    data = _jsonl(tmp_path / "few.jsonl", ROWS[:3])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "rl.cli", "train", "arith_tiny", *BASE, f"data.source={data}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "bad input: data.source" in done.stderr and "fewer than train.batch_groups (4)" in done.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bench", "rollout", "--model", "/no/such/model"], "bad input: --model '/no/such/model' does not exist"),
        (["bench", "rollout", "--cost-model", "no_such_profile"], "decode profile 'no_such_profile' not found"),
        (["bench", "rollout", "--reward", "no_such_reward"], "reward spec 'no_such_reward'"),
        (["bench", "train", "arith_tiny", "model.path=/no/such/model"], "bad input: model.path '/no/such/model'"),
        (["bench", "train", "arith_tiny", "data.source=/no/such.jsonl"], "bad input: data.source"),
    ],
    ids=["rollout-model", "rollout-profile", "rollout-reward", "train-model", "train-data"],
)
def test_bench_commands_answer_bad_input_in_one_line_before_anything_starts(capsys, monkeypatch, argv, expected):
    import ray

    import rl.bench.rollout
    import rl.bench.train

    def tripwire(*_args, **_kwargs):
        raise AssertionError("bad input reached a benchmark run")

    monkeypatch.setattr(rl.bench.rollout, "run_rollout_bench", tripwire)
    monkeypatch.setattr(rl.bench.train, "run_train_bench", tripwire)
    assert cli.main([*argv, "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not ray.is_initialized()
