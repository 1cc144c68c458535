"""RewardPool: weighted combination in worker processes and every failure mode, on shared pools."""

import asyncio
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rl.rewards.hooks import RewardState
from rl.rewards.pool import FAILURE_KINDS, RewardPool, RewardResult

# Each misbehaving function misbehaves only for samples whose column ``mode`` asks for it, so one pool
# serves every scenario; later calls in the same pool prove that it recovered.
REWARDS = """
import asyncio, math, os, time

def length(completions, **kwargs):
    return [float(len(c)) for c in completions]

def boom(completions, mode, **kwargs):
    if "boom" in mode:
        raise RuntimeError("boom-from-reward")
    return [1.0] * len(completions)

def hang(completions, mode, pid_file, **kwargs):
    if "hang" in mode:
        with open(pid_file[0], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    return [1.0] * len(completions)

def short(completions, mode, **kwargs):
    return [1.0] if "short" in mode else [1.0] * len(completions)

def nan(completions, mode, **kwargs):
    return [math.nan if m == "nan" else math.inf if m == "inf" else 1.0 for m in mode]

def maybe(completions, mode, **kwargs):
    return [None if m in ("skip", "skipall") else 1.0 for m in mode]

def never_for_skipall(completions, mode, **kwargs):
    return [None if m == "skipall" else 1.0 for m in mode]

def die(completions, mode, **kwargs):
    if "die" in mode:
        os._exit(3)
    return [1.0] * len(completions)

async def slow_async(completions, **kwargs):
    await asyncio.sleep(0.01)
    return [0.5] * len(completions)

def reward_len(completions, **kwargs):
    return [-abs(20 - len(c)) for c in completions]

def chat_contains_yes(completions, **kwargs):
    return [1.0 if "yes" in completion[0]["content"] else 0.0 for completion in completions]
"""
FAULTY = ["boom", "hang", "short", "nan", "maybe", "never_for_skipall", "die"]
TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def reward_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rewards")
    (path / "user_rewards.py").write_text(REWARDS)
    return path


@pytest.fixture(scope="module")
def pool(reward_dir: Path) -> Iterator[RewardPool]:
    """length (weight 1) + each faulty function (weight 10, 1.0 when well behaved) + async (weight 2)."""
    specs = [("user_rewards.py:length", 1.0)] + [(f"user_rewards.py:{name}", 10.0) for name in FAULTY]
    specs.append(("user_rewards.py:slow_async", 2.0))
    with RewardPool(specs, num_workers=2, timeout_s=TIMEOUT_S, base_dir=reward_dir) as p:
        yield p


@pytest.fixture(scope="module")
def drop_pool(reward_dir: Path) -> Iterator[RewardPool]:
    specs = [
        ("user_rewards.py:length", 1.0),
        ("user_rewards.py:boom", 1.0),
        ("user_rewards.py:nan", 1.0),
        ("user_rewards.py:maybe", 1.0),
        ("user_rewards.py:never_for_skipall", 1.0),
    ]
    with RewardPool(specs, num_workers=1, timeout_s=TIMEOUT_S, on_failure="drop", base_dir=reward_dir) as p:
        yield p


HEALTHY = 70.0 + 1.0  # 7 faulty functions x 10 x 1.0, plus slow_async 2 x 0.5


def _score(pool: RewardPool, completions: list[str], modes: list[str], pid_file: str = "") -> RewardResult:
    n = len(completions)
    return pool.score_sync([""] * n, completions, {"mode": modes, "pid_file": [pid_file] * n})


def _no_failures(result: RewardResult) -> bool:
    return all(result.failures[kind] == 0 for kind in FAILURE_KINDS)


def test_weighted_sum_sync_and_async_functions(pool: RewardPool) -> None:
    result = _score(pool, ["ab", "abcd"], ["ok", "ok"])
    assert result.rewards == [2.0 + HEALTHY, 4.0 + HEALTHY]
    assert _no_failures(result)
    assert result.per_function["user_rewards.py:length"] == [2.0, 4.0]
    assert result.per_function["user_rewards.py:slow_async"] == [0.5, 0.5]


def test_raise_gives_fallback_and_logs(pool: RewardPool, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rl.rewards"):
        result = _score(pool, ["ab", "abc"], ["boom", "ok"])
    assert result.rewards == [2.0 + HEALTHY - 10.0, 3.0 + HEALTHY - 10.0]  # boom's values become 0
    assert result.failures["raised"] == 1 and result.failures["timeout"] == 0
    assert "boom-from-reward" in caplog.text and "user_rewards.py:boom" in caplog.text
    assert _score(pool, ["ab"], ["ok"]).rewards == [2.0 + HEALTHY]


def test_hang_past_timeout_kills_worker_and_recovers(pool: RewardPool, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    start = time.monotonic()
    result = _score(pool, ["abc"], ["hang"], pid_file=str(pid_file))
    elapsed = time.monotonic() - start
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 5.0
    assert result.failures["timeout"] == 1
    assert result.rewards == [3.0 + HEALTHY - 10.0]
    with pytest.raises(ProcessLookupError):  # the hung worker was killed and reaped
        os.kill(int(pid_file.read_text()), 0)
    for _ in range(3):  # both workers (one of them fresh) serve later calls
        ok = _score(pool, ["abcd"], ["ok"])
        assert ok.rewards == [4.0 + HEALTHY] and _no_failures(ok)


def test_wrong_length(pool: RewardPool) -> None:
    result = _score(pool, ["a", "b", "c"], ["short"] * 3)
    assert result.failures["wrong_length"] == 1
    assert result.rewards == [1.0 + HEALTHY - 10.0] * 3
    assert result.per_function["user_rewards.py:short"] == [None, None, None]


def test_nan_and_inf_values(pool: RewardPool) -> None:
    result = _score(pool, ["a", "b", "c"], ["nan", "inf", "ok"])
    assert result.failures["nan"] == 2
    assert result.rewards == [1.0 + HEALTHY - 10.0, 1.0 + HEALTHY - 10.0, 1.0 + HEALTHY]
    assert result.per_function["user_rewards.py:nan"] == [None, None, 1.0]
    assert "user_rewards.py:nan" not in result.errors  # some finite values: the call answered


def test_a_call_with_no_finite_value_failed_and_repeats_stay_off_the_console(
    pool: RewardPool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="rl.rewards"):
        results = [_score(pool, ["a", "b"], ["nan", "inf"]) for _ in range(3)]
    assert all(r.errors["user_rewards.py:nan"] == "nan: no finite value for 2 completions" for r in results)
    said = [r for r in caplog.records if "user_rewards.py:nan" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG] or all(
        r.levelno == logging.DEBUG
        for r in said  # an earlier test of the shared pool gave the first warning
    )


def test_none_is_no_reward_not_failure(pool: RewardPool) -> None:
    result = _score(pool, ["a", "b"], ["skip", "ok"])
    assert result.rewards == [1.0 + HEALTHY - 10.0, 1.0 + HEALTHY]
    assert _no_failures(result)


def test_worker_death_counts_as_raised_and_recovers(pool: RewardPool, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rl.rewards"):
        result = _score(pool, ["abc"], ["die"])
    assert result.failures["raised"] == 1 and result.rewards == [3.0 + HEALTHY - 10.0]
    assert "exit code 3" in caplog.text
    assert _score(pool, ["abc"], ["ok"]).rewards == [3.0 + HEALTHY]


def test_ctrl_c_leaves_the_workers_to_the_run(pool: RewardPool) -> None:
    """Ctrl-C signals the terminal's whole process group: the workers ignore it (the run stops them itself)."""
    assert _no_failures(_score(pool, ["abc"], ["ok"]))
    workers = [slot.process for slot in pool._slots]
    for worker in workers:
        os.kill(worker.pid, signal.SIGINT)
    time.sleep(0.5)
    assert all(worker.is_alive() for worker in workers)
    result = _score(pool, ["abc", "de"], ["ok", "ok"])
    assert _no_failures(result) and result.rewards == [3.0 + HEALTHY, 2.0 + HEALTHY]
    assert [slot.process.pid for slot in pool._slots] == [worker.pid for worker in workers]


def test_drop_policy(drop_pool: RewardPool) -> None:
    result = drop_pool.score_sync([""] * 4, ["a", "bb", "ccc", "dddd"], {"mode": ["ok", "nan", "skip", "skipall"]})
    assert result.rewards == [
        5.0,
        None,
        6.0,
        6.0,
    ]  # nan -> dropped; a None from some functions -> still scored
    assert result.failures["nan"] == 1 and result.failures["none"] == 0
    raised = drop_pool.score_sync([""] * 2, ["a", "b"], {"mode": ["boom", "ok"]})
    assert raised.rewards == [None, None] and raised.failures["raised"] == 1


def test_all_none_is_a_failure(reward_dir: Path) -> None:
    specs = [("user_rewards.py:maybe", 1.0), ("user_rewards.py:never_for_skipall", 2.0)]
    with RewardPool(specs, num_workers=0, base_dir=reward_dir, on_failure="drop") as p:
        result = p.score_sync([""] * 3, ["a", "b", "c"], {"mode": ["skipall", "skip", "ok"]})
    assert result.rewards == [None, 2.0, 3.0]
    assert result.failures["none"] == 1


def test_async_score_does_not_block_event_loop(pool: RewardPool, tmp_path: Path) -> None:
    async def main() -> tuple[list[RewardResult], int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        task = asyncio.create_task(ticker())
        modes = [["hang"], ["ok"], ["boom"]]
        results = await asyncio.gather(
            *(pool.score([""], ["ab"], {"mode": m, "pid_file": [str(tmp_path / "pid")]}) for m in modes)
        )
        task.cancel()
        return results, ticks

    (hung, ok, boom), ticks = asyncio.run(main())
    assert ticks >= 10  # the loop kept running during the ~2 s timeout
    assert hung.failures["timeout"] == 1 and hung.rewards == [2.0 + HEALTHY - 10.0]
    assert ok.rewards == [2.0 + HEALTHY] and _no_failures(ok)
    assert boom.failures["raised"] == 1


def test_a_cancelled_score_leaves_the_pool_serving(reward_dir: Path) -> None:
    """A run cancels groups in flight when it ends; their reward calls, queued or running, must not break the
    dispatch threads (a cancelled future cannot take a result) or the evaluation that follows hangs."""
    specs = [("user_rewards.py:slow_async", 1.0)] * 3  # one worker: the later calls wait in the queue

    async def main() -> RewardResult:
        scoring = asyncio.create_task(pool.score([""], ["ab"]))
        await asyncio.sleep(0.005)
        scoring.cancel()
        await asyncio.gather(scoring, return_exceptions=True)
        return await asyncio.wait_for(pool.score([""], ["ab"]), timeout=30)

    with RewardPool(specs, num_workers=1, base_dir=reward_dir) as pool:
        result = asyncio.run(main())
    assert result.rewards == [1.5] and _no_failures(result)


def test_trl_style_rewards_unmodified(reward_dir: Path) -> None:
    with RewardPool([("user_rewards.py:reward_len", 1.0)], base_dir=reward_dir) as p:
        assert p.score_sync(["q"] * 2, ["x" * 15, "x" * 26], {}).rewards == [-5.0, -6.0]
    completions = [[{"role": "assistant", "content": "yes indeed"}], [{"role": "assistant", "content": "no"}]]
    with RewardPool([("user_rewards.py:chat_contains_yes", 3.0)], base_dir=reward_dir) as p:
        assert p.score_sync([[{"role": "user", "content": "?"}]] * 2, completions, {}).rewards == [3.0, 0.0]


def test_empty_batch_and_bad_columns(pool: RewardPool) -> None:
    empty = pool.score_sync([], [], {"mode": []})
    assert empty.rewards == [] and _no_failures(empty)
    with pytest.raises(ValueError, match="columns of other lengths"):
        pool.score_sync(["", ""], ["a", "b"], {"mode": ["ok"]})


def test_builtin_math_rewards_in_worker_process() -> None:
    """math-verify's signal timeouts run in the worker's main thread."""
    with RewardPool([("math_accuracy", 1.0), ("format", 0.5)], num_workers=1, timeout_s=30.0) as p:
        completions = [r"so \boxed{\frac{1}{2}}", "#### 1,234", "I think 7"]
        result = p.score_sync([""] * 3, completions, {"answer": ["0.5", "1234", "8"]})
    assert result.rewards == [1.5, 1.5, 0.0]
    assert result.per_function["math_accuracy"] == [1.0, 1.0, 0.0]


def test_bad_spec_fails_at_construction_and_close_stops_workers(reward_dir: Path) -> None:
    before = {p.pid for p in mp.active_children()}
    with pytest.raises(ValueError, match=r"user_rewards.py:nope.*has no attribute 'nope'"):
        RewardPool([("user_rewards.py:nope", 1.0)], base_dir=reward_dir)
    p = RewardPool([("user_rewards.py:length", 1.0)], num_workers=2, base_dir=reward_dir)
    spawned = {c.pid for c in mp.active_children()} - before
    assert len(spawned) == 2
    p.close()
    assert not spawned & {c.pid for c in mp.active_children()}
    with pytest.raises(RuntimeError, match="closed"):
        p.score_sync([""], ["a"], {})


def test_unpicklable_column_fails_calls_not_pool(pool: RewardPool) -> None:
    result = pool.score_sync([""], ["ab"], {"mode": ["ok"], "pid_file": [""], "bad": [lambda: None]})
    assert result.failures["raised"] == len(pool.specs) and result.rewards == [0.0]
    assert _score(pool, ["ab"], ["ok"]).rewards == [2.0 + HEALTHY]


def test_in_process_mode_async_and_raise(reward_dir: Path) -> None:
    specs = [("user_rewards.py:length", 1.0), ("user_rewards.py:boom", 1.0)]
    specs.append(("user_rewards.py:slow_async", 4.0))
    with RewardPool(specs, num_workers=0, base_dir=reward_dir) as p:
        result = asyncio.run(p.score([""] * 2, ["a", "bcd"], {"mode": ["boom", "ok"]}))
    assert result.rewards == [3.0, 5.0] and result.failures["raised"] == 1


def test_close_cuts_a_hung_call_short(reward_dir: Path, tmp_path: Path) -> None:
    p = RewardPool([("user_rewards.py:hang", 1.0)], num_workers=1, timeout_s=300.0, base_dir=reward_dir)
    results: list[RewardResult] = []
    columns = {"mode": ["hang"], "pid_file": [str(tmp_path / "pid")]}
    thread = threading.Thread(target=lambda: results.append(p.score_sync([""], ["x"], columns)))
    thread.start()
    time.sleep(0.5)
    start = time.monotonic()
    p.close()
    thread.join(10.0)
    assert time.monotonic() - start < 5.0 and not thread.is_alive()
    assert results[0].failures["raised"] == 1 and results[0].rewards == [0.0]


TRL_KWARGS = """
import numpy as np

def trl_hooks(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, **kwargs):
    log_metric("seen", len(completions))
    log_metric("seen", 10 * trainer_state.global_step)
    log_extra("ids", completion_ids)
    log_extra("too_short", [1])
    step, done = trainer_state.global_step, trainer_state.global_step / trainer_state.max_steps
    return np.array([len(ids) + step + done + trainer_state.weights_version for ids in completion_ids])

def strings(completions, log_metric, **kwargs):
    log_metric("seen", 100.0)  # logged before it fails: kept
    return ["1.0"] * len(completions)
"""


def test_trl_keyword_arguments_numbers_and_strings(tmp_path: Path) -> None:
    """TRL's hooks, trainer_state and completion_ids reach a reward in its worker process and what it logs comes
    back; numpy numbers count, strings are a failure with its error."""
    (tmp_path / "trl_kwargs.py").write_text(TRL_KWARGS)
    specs = [("trl_kwargs.py:trl_hooks", 1.0), ("trl_kwargs.py:strings", 1.0)]
    state = RewardState.at(3, max_steps=4, batch_groups=2, num_rows=8, weights_version=2)
    with RewardPool(specs, num_workers=1, base_dir=tmp_path) as p:
        result = p.score_sync(["q", "q"], ["ab", "c"], {"completion_ids": [[1, 2], [3]]}, state)
    assert result.per_function["trl_kwargs.py:trl_hooks"] == [2 + 3 + 0.75 + 2, 1 + 3 + 0.75 + 2]
    assert result.metrics == {"seen": [2.0, 30.0, 100.0]}
    assert result.extra == {"ids": [[1, 2], [3]]}  # too_short (1 value for 2 completions) is left out
    assert result.failures["raised"] == 1 and list(result.errors) == ["trl_kwargs.py:strings"]
    assert "must return numbers or None, got str '1.0'" in result.errors["trl_kwargs.py:strings"]


def test_a_logged_value_that_cannot_be_sent_back_fails_the_call_not_the_worker(tmp_path: Path) -> None:
    (tmp_path / "unpicklable.py").write_text(
        "def r(completions, log_extra, **kwargs):\n"
        "    log_extra('fn', [lambda: 0 for _ in completions])\n"
        "    return [1.0] * len(completions)\n"
    )
    with RewardPool([("unpicklable.py:r", 1.0)], num_workers=1, base_dir=tmp_path) as p:
        result = p.score_sync(["q"], ["a"])
    assert result.failures["raised"] == 1
    assert "pickle" in result.errors["unpicklable.py:r"].lower()  # its own error, not "reward worker process died"
