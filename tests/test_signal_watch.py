"""Steps without reward signal (rl/loop/signal_watch.py): when they are warned of and what the warning says, and a
real run whose reward gives every sample one value saying so once, counting every such step, training on."""

from __future__ import annotations

import logging

import pytest
from small_runs import on_the_warm_engine, small_run

from rl.loop import signal_watch
from rl.loop.driver import run_training
from rl.loop.signal_watch import SILENT_STEPS, SignalWatch
from rl.types import Group, PromptRow, Sample


def group(*rewards: float, advantages: list[float] | None = None) -> Group:
    samples = [Sample(i, [1], [0.0], [0], "stop", reward=r) for i, r in enumerate(rewards)]
    spread = len(set(rewards)) > 1
    return Group(PromptRow("p", "q", "a"), [1], samples, advantages or [float(spread)] * len(rewards))


def test_five_silent_steps_in_a_row_are_warned_of_once_and_a_step_with_signal_starts_the_count_again():
    watch = SignalWatch()
    for step in range(1, SILENT_STEPS):
        assert watch.after_step(step, [group(0.0, 0.0), group(1.0, 1.0)]) == (True, None)
    assert watch.after_step(SILENT_STEPS, [group(1.0, 0.0)]) == (False, None)  # one group with a spread is signal
    warnings = [watch.after_step(step, [group(0.0, 0.0), group(1.0, 1.0)])[1] for step in range(10, 10 + SILENT_STEPS)]
    assert warnings[:-1] == [None] * (SILENT_STEPS - 1)
    assert warnings[-1] == (
        f"steps 10-{9 + SILENT_STEPS}: within every group all samples got the same reward (rewards 0 to 1 across "
        "groups), so every advantage is 0 and the policy learns nothing; give prompts nearer the model's level, more "
        "samples per prompt (shaping.m_keep), or set algorithm.dynamic_sampling=true"
    )
    assert watch.after_step(99, [group(0.0, 0.0)]) == (True, None)  # once per run
    # a batch-wide estimator can give equal-reward groups an advantage: the advantages decide, not the rewards
    assert watch.after_step(100, [group(1.0, 1.0, advantages=[0.5, 0.5])]) == (False, None)


def test_one_value_for_every_sample_is_called_a_reward_that_does_not_score():
    watch = SignalWatch()
    warnings = [watch.after_step(step, [group(1.0, 1.0, 1.0)])[1] for step in range(3, 3 + SILENT_STEPS)]
    assert warnings[-1] is not None and warnings[-1].startswith(
        f"steps 3-{2 + SILENT_STEPS}: every sample got the reward 1, so every advantage is 0"
    )
    assert "check the reward function (completions.jsonl shows what it scored)" in warnings[-1]


CONSTANT = "def constant(prompts, completions, **kwargs):\n    return [1.0] * len(completions)\n"


@pytest.mark.integration
def test_a_run_whose_reward_never_varies_says_so_once_and_counts_its_steps(
    rollout_worker, tiny_model_dir, tmp_path, caplog, monkeypatch
):
    monkeypatch.setattr(signal_watch, "SILENT_STEPS", 2)
    (tmp_path / "constant.py").write_text(CONSTANT)
    cfg = small_run(
        tmp_path, "flat", "train.max_steps=3", f"reward.functions=[{{fn: '{tmp_path}/constant.py:constant'}}]"
    )
    caplog.set_level(logging.WARNING)
    summary = run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))

    assert summary["steps"] == 3 and summary["steps_without_signal"] == 3
    warned = [r.getMessage() for r in caplog.records if "the policy learns nothing" in r.getMessage()]
    assert warned == [warned[0]] and warned[0].startswith("steps 1-2: every sample got the reward 1,"), warned
