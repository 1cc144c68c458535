"""TRL's own reward functions run unmodified through a real run; a reward failing a whole step stops the run;
trainer_state, log_metric / log_extra and a reward model work as in TRL."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from small_runs import on_the_warm_engine, small_run

from rl.inputs.preflight import preflight
from rl.loop.driver import RunFailed, run_training
from rl.output.report import write_report

pytestmark = pytest.mark.integration

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the tiny model's prompt, as a chat


def _chat_model(tiny_model_dir: str, out: Path) -> Path:
    """The tiny model with a chat template (TRL's accuracy_reward reads chat completions)."""
    shutil.copytree(tiny_model_dir, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    return out


def _trl_style_data(path: Path) -> Path:
    """A conversational prompt column and a solution column, as TRL's math datasets have them."""
    rows = [
        {"prompt": [{"role": "user", "content": f"{a}+{b}="}], "solution": str(a + b)}
        for a in range(10)
        for b in range(10)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(rollout_worker: Any, tmp_path: Path, *overrides: str) -> dict[str, Any]:
    """A small run as ``rl train`` makes it (preflight first), served from the session's warm engine."""
    cfg = small_run(tmp_path, "run", *overrides)
    return run_training(cfg, preflight(cfg), start_actors=on_the_warm_engine(rollout_worker))


def test_trl_accuracy_reward_runs_unmodified(rollout_worker, tiny_model_dir, tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO, logger="rl.data")
    model = _chat_model(tiny_model_dir, tmp_path / "chat-model")
    data = _trl_style_data(tmp_path / "trl.jsonl")
    summary = _train(
        rollout_worker,
        tmp_path,
        "train.max_steps=2",
        f"model.path={model}",
        f"data.source={data}",  # no field named: TRL's prompt column, the solution as the answer
        "rollout.max_model_len=null",  # no context given: the longest prompt and the response cap
        "reward.functions=[{fn: 'trl.rewards:accuracy_reward'}, {fn: arith_exact}]",  # solution, and answer
    )
    assert summary["steps"] == 2
    assert summary["reward_failures"] == {}
    assert "holding out" in capsys.readouterr().out  # one file: a part held out for evaluation
    assert "prompts from column 'prompt', answers from column 'solution'" in caplog.text
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["rollout"]  # what a resume reads back
    assert saved["max_model_len"] % 16 == 0 and saved["max_model_len"] > saved["max_tokens"]


REFUSES_IN_WORKERS = '''
import multiprocessing


def r(completions, **kwargs):
    """Scores at the start-up check (in the main process), then fails on every call in the reward workers."""
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("judge unreachable")
    return [0.0] * len(completions)
'''


def test_reward_failing_a_whole_step_stops_the_run(rollout_worker, tmp_path):
    (tmp_path / "judge.py").write_text(REFUSES_IN_WORKERS)
    with pytest.raises(RunFailed) as stopped:  # rl train prints it as one line, "run stopped: ...", exit code 1
        _train(rollout_worker, tmp_path, "train.max_steps=3", f"reward.functions.0.fn={tmp_path / 'judge.py'}:r")
    assert "failed on all of the last 4 groups" in str(stopped.value) and "\n" not in str(stopped.value)
    assert "RuntimeError: judge unreachable" in str(stopped.value)
    summary = stopped.value.summary  # what rl train writes to summary.json: the failures counted up to the stop
    assert summary["failure"] == str(stopped.value) and summary["reward_failures"]["raised"] >= 4


SCHEDULE = '''
def length_schedule(completions, trainer_state, log_metric, log_extra, **kwargs):
    """A TRL-style curriculum: the wanted length grows with the trainer's step."""
    target = 4 + 8 * trainer_state.global_step
    log_metric("global_step", trainer_state.global_step)
    log_metric("progress", trainer_state.global_step / trainer_state.max_steps)
    log_extra("target", [target] * len(completions))
    return [-abs(len(c) - target) / 10 for c in completions]
'''


def test_trainer_state_logs_and_a_reward_model_through_a_real_run(
    ray_session, rollout_worker, tiny_reward_model, tmp_path
):
    """A schedule on trainer_state.global_step, its log_metric / log_extra values, a reward model by path and TRL's
    soft overlong penalty made by its factory, in one synchronous run (groups of step s are scored at trainer step
    s - 1): metrics.jsonl, completions.jsonl and rl report show them."""
    (tmp_path / "schedule.py").write_text(SCHEDULE)
    overlong = "trl.rewards:get_soft_overlong_punishment(max_completion_len=6, soft_punish_cache=6)"  # -n/6 for n
    rewards = (
        f"[{{fn: {tmp_path / 'schedule.py'}:length_schedule}}, {{model: {tiny_reward_model}, weight: 0.5}}, "
        f"{{fn: '{overlong}'}}]"
    )
    cfg = small_run(
        tmp_path,
        "run",
        "train.max_steps=3",
        "train.max_staleness=0",
        f"reward.functions={rewards}",
        "logging.completions_per_step=6",
    )
    summary = run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))
    assert summary["steps"] == 3 and summary["reward_failures"] == {}

    run_dir = tmp_path / "run"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [(r["reward/global_step"], r["reward/progress"]) for r in train] == [(0, 0), (1, 1 / 3), (2, 2 / 3)]
    rows = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] * 6 + [2] * 6 + [3] * 6  # a group of 4 and half the next, each step
    schedule, model = "length_schedule", Path(tiny_reward_model).name  # the names of rewards/NAME/mean
    for r in rows:
        target = 4 + 8 * (r["step"] - 1)  # the schedule moved with the step
        assert r["extra"] == {"target": target}
        assert r["rewards"][schedule] == pytest.approx(-abs(len(r["completion"]) - target) / 10)
        assert -1.0 <= r["rewards"]["soft_overlong_punishment_reward"] < 0  # every completion has a token
        assert r["reward"] == pytest.approx(
            r["rewards"][schedule] + 0.5 * r["rewards"][model] + r["rewards"]["soft_overlong_punishment_reward"]
        )
    assert len({r["rewards"][model] for r in rows}) > 1  # the reward model scored each completion
    report = write_report(run_dir).read_text()
    assert "| reward/global_step (last) | 2.000 (step 3) |" in report and "plots/reward_logged.png" in report
