"""Training goes on through a reward function that raises, hangs, returns NaN, None or the wrong length."""

import pytest
from small_runs import on_the_warm_engine, small_run

from rl.loop.driver import run_training

pytestmark = pytest.mark.integration  # starts real Ray or vLLM

FLAKY = '''
import multiprocessing
import time

calls = 0


def flaky(prompts, completions, answer, **columns):
    """A TRL-style reward whose odd calls fail, each in its own way, and whose even calls work (a reward failing a
    whole step of calls in a row stops the run; a replaced worker counts from 0 again, so a timeout is followed by
    one failure more); the start-up check (in the main process, not a reward worker) gets a plain answer."""
    if multiprocessing.parent_process() is None:
        return [0.0] * len(completions)
    global calls
    calls += 1
    mode = calls % 10
    if mode == 1:
        raise RuntimeError("boom")
    if mode == 3:
        return [float("nan")] * len(completions)
    if mode == 5:
        return [None] * len(completions)
    if mode == 7:
        return [1.0]
    if mode == 9:
        time.sleep(60)  # past the timeout: the worker process is killed and replaced
    return [float(c.rsplit("#", 1)[-1].strip() == a) for c, a in zip(completions, answer)]
'''


def test_training_survives_every_reward_failure(ray_session, rollout_worker, tiny_model_dir, tmp_path):
    (tmp_path / "flaky.py").write_text(FLAKY)
    cfg = small_run(
        tmp_path,
        "flaky",
        "train.max_steps=3",
        f"reward.functions=[{{fn: {tmp_path / 'flaky.py'}:flaky}}]",
        "reward.timeout_s=2",
        "reward.on_failure=zero",
    )
    summary = run_training(cfg, start_actors=on_the_warm_engine(rollout_worker))

    assert summary["steps"] == 3 and summary["rollout_errors"] == 0
    failures = summary["reward_failures"]
    for kind in ("raised", "nan", "none", "wrong_length", "timeout"):
        assert failures.get(kind, 0) >= 1, (kind, failures)
