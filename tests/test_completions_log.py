"""What reward functions log reaches the run's records: ``reward/NAME`` step means in metrics.jsonl, and each step's
sampled completions in completions.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl.output.completions import completion_rows, table
from rl.output.metrics import MetricsLogger, summarize_groups
from rl.types import Group, PromptRow, RewardLog, Sample


def _group(prompt_id: str, rewards: list[float], metrics: dict[str, list[float]]) -> Group:
    samples = [
        Sample(index=i, tokens=[1] * (i + 1), logprobs=[0.0] * (i + 1), versions=[0] * (i + 1), finish_reason="stop")
        for i in range(len(rewards))
    ]
    for i, (sample, reward) in enumerate(zip(samples, rewards, strict=True)):
        sample.text, sample.reward = f"{prompt_id}-answer{i}", reward
    log = RewardLog(
        functions={"arith_exact": rewards, "model:/rm": [r / 2 for r in rewards]},
        extra={"judge_note": [f"note{i}" for i in range(len(rewards))]},
        metrics=metrics,
    )
    advantages = [r - sum(rewards) / len(rewards) for r in rewards]
    return Group(PromptRow(prompt_id, f"{prompt_id}?", "7"), [5], samples, advantages, reward_log=log)


def test_log_metric_values_are_averaged_per_step_under_a_reward_prefix():
    groups = [
        _group("a", [1.0, 0.0], {"length": [10.0], "seen": [2.0]}),
        _group("b", [1.0, 1.0], {"length": [20.0, 30.0]}),
    ]
    metrics = summarize_groups(groups, trainer_version=0)
    assert metrics["reward/length"] == 20.0  # (10 + 20 + 30) / 3: every value logged while scoring the step
    assert metrics["reward/seen"] == 2.0
    assert not any(k.startswith("reward/") for k in summarize_groups([_group("c", [1.0, 0.0], {})], 0))


def test_training_accuracy_is_the_first_reward_above_zero_and_each_function_is_logged_as_trl_does():
    group = _group("a", [1.5, 0.5, 0.5, 0.0], {})
    group.reward_log.functions = {
        "arith_exact": [1.0, 0.0, None, 0.0],  # the accuracy reward: one sample right
        "my/rewards.py:partial": [0.5, 0.5, 0.5, 0.0],  # partial credit lifts three summed rewards above 0
    }
    metrics = summarize_groups([group], trainer_version=0)
    assert metrics["accuracy"] == 0.25
    assert metrics["rewards/arith_exact/mean"] == pytest.approx(1 / 3)  # the None is no value, not a zero
    assert metrics["rewards/partial/mean"] == pytest.approx(0.375)
    assert metrics["rewards/partial/std"] == pytest.approx(0.2165, abs=1e-4)
    twin = _group("b", [1.0], {})
    twin.reward_log.functions = {"a.py:r": [1.0], "b.py:r": [0.0]}  # one name, two functions: the whole specs
    assert {k for k in summarize_groups([twin], 0) if k.startswith("rewards/")} == {
        "rewards/a.py:r/mean",
        "rewards/a.py:r/std",
        "rewards/b.py:r/mean",
        "rewards/b.py:r/std",
    }


def test_a_step_writes_its_first_completions_group_by_group():
    groups = [_group("a", [1.0, 0.0, 0.0], {}), _group("b", [1.0, 1.0, 0.0], {})]
    rows = completion_rows(4, groups, limit=4)
    assert [(r["prompt_id"], r["completion"]) for r in rows] == [
        ("a", "a-answer0"),
        ("a", "a-answer1"),
        ("a", "a-answer2"),
        ("b", "b-answer0"),
    ]
    assert rows[0] == {
        "step": 4,
        "prompt_id": "a",
        "prompt": "a?",
        "completion": "a-answer0",
        "reward": 1.0,
        "advantage": 1.0 - 1 / 3,
        "rewards": {"arith_exact": 1.0, "rm": 0.5},  # the names the metrics use (reward_names)
        "extra": {"judge_note": "note0"},
    }
    assert completion_rows(4, groups, limit=0) == []
    columns, data = table(rows[:1])
    assert columns == [
        "step",
        "prompt_id",
        "prompt",
        "completion",
        "reward",
        "advantage",
        "arith_exact",
        "rm",
    ] + ["judge_note"]
    assert data == [[4, "a", "a?", "a-answer0", 1.0, 1.0 - 1 / 3, 1.0, 0.5, "note0"]]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_completions_jsonl_starts_afresh_and_a_resume_drops_the_steps_after_its_checkpoint(tmp_path):
    rows = lambda step: completion_rows(step, [_group("a", [1.0, 0.0], {})], limit=2)  # noqa: E731
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        logger.log_completions(step, rows(step))
    logger.close()
    assert _steps(tmp_path / "completions.jsonl") == [1, 1, 2, 2, 3, 3]
    logger = MetricsLogger(tmp_path, tensorboard=False, resume_step=2)  # a run killed after step 3, resumed at 2
    logger.log_completions(3, rows(3))
    logger.close()
    assert _steps(tmp_path / "completions.jsonl") == [1, 1, 2, 2, 3, 3]
    MetricsLogger(tmp_path, tensorboard=False).close()  # a new run in the same folder, logging no completions
    assert not (tmp_path / "completions.jsonl").exists()
