"""TRL's own reward functions run unmodified through a real run; a reward failing a whole step stops the run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from small_runs import SMALL

from rl import cli

pytestmark = pytest.mark.integration

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the tiny model's prompt, as a chat


def _chat_model(tiny_model_dir: str, out: Path) -> Path:
    """The tiny model with a chat template (TRL's accuracy_reward reads chat completions)."""
    shutil.copytree(tiny_model_dir, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    return out


def _trl_style_data(path: Path) -> Path:
    """question/solution columns, as TRL's math datasets have them."""
    rows = [{"question": f"{a}+{b}=", "solution": str(a + b)} for a in range(10) for b in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(tmp_path: Path, capsys, *overrides: str) -> tuple[int, str, str]:
    code = cli.main(["train", "arith_tiny", f"output_dir={tmp_path}", "name=run", *SMALL, *overrides])
    out, err = capsys.readouterr()
    return code, out, err


def test_trl_accuracy_reward_runs_unmodified(ray_session, tiny_model_dir, tmp_path, capsys):
    model = _chat_model(tiny_model_dir, tmp_path / "chat-model")
    data = _trl_style_data(tmp_path / "trl.jsonl")
    code, out, err = _train(
        tmp_path,
        capsys,
        "train.max_steps=2",
        f"model.path={model}",
        f"data.source={data}",
        "data.answer_field=solution",
        "data.chat=true",
        "reward.functions=[{fn: 'trl.rewards:accuracy_reward'}, {fn: arith_exact}]",  # solution, and answer
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())  # rl train writes it there
    assert summary["steps"] == 2
    assert summary["reward_failures"] == {}
    assert "holding out" in out  # one file: a part held out for evaluation


REFUSES_IN_WORKERS = '''
import multiprocessing


def r(completions, **kwargs):
    """Scores at the start-up check (in the main process), then fails on every call in the reward workers."""
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("judge unreachable")
    return [0.0] * len(completions)
'''


def test_reward_failing_a_whole_step_stops_the_run(ray_session, tiny_model_dir, tmp_path, capsys):
    (tmp_path / "judge.py").write_text(REFUSES_IN_WORKERS)
    code, _, err = _train(tmp_path, capsys, "train.max_steps=3", f"reward.functions.0.fn={tmp_path / 'judge.py'}:r")
    assert code == 1
    stopped = [line for line in err.splitlines() if line.startswith("run stopped:")]
    assert len(stopped) == 1 and "failed on all of the last 4 groups" in stopped[0]
    assert "RuntimeError: judge unreachable" in stopped[0]
