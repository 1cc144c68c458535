"""The console shows Tailor's lines: engine chatter and known-harmless warnings go to OUT/logs/, faults stay visible.

The unit tests drive ``rl.output.console`` directly; the integration tests run ``rl train`` and ``rl bench rollout``
on the tiny model in a subprocess and read their whole console (``rl eval``'s: tests/test_models_smollm2.py), and
stop the bench with SIGTERM.
"""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from user_run import user_env

from rl.bench.rollout import PASSES_FILE
from rl.loop.processes import alive, descendants, wait_for
from rl.output.console import ConsoleFilter, LineSieve, run_summary, shown, step_postfix

WEIGHT_LOAD_WARNING = "Failed to load weights"


def test_engine_chatter_and_known_harmless_lines_are_not_shown():
    hidden = [
        "(EngineCore pid=3188) INFO 11-24 20:24:31 [parallel_state.py:1906] world_size=1 rank=0",
        "(EngineCore pid=3188) WARNING 11-24 20:24:54 [layerwise.py:266] RotaryEmbedding: Failed to load weights",
        "(EngineCore pid=3188) WARNING 11-24 20:24:54 [layerwise.py:266] ParallelLMHead: Failed to load weights",
        "2026-11-24 20:23:59,392\tWARNING authentication_token_setup.py:85 -- Token authentication is enabled for "
        "this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.",
        "2026-11-24 20:24:03,171\tINFO worker.py:2038 -- Started a local Ray instance.",
        "[W1124 20:24:31.463876640 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation",
        "Triton is installed, but doesn't include CPU backend. Disabling Triton.",
        "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 105.20it/s]",
        "(MainProcess pid=8029) WARNING 11-25 03:31:49 [input_processor.py:289] vLLM has deprecated support for "
        "supporting different tokenizers for different LoRAs. By default, vLLM uses base model's tokenizer.",
        "03:27:23 WARNING Timeout is disabled as parsing_timeout is None or <= 0, you must provide the logic",
        "04:15:40 WARNING py.warnings .venv/lib/python3.11/site-packages/trl/generation/vllm_client.py:42: "
        "UserWarning: TRL currently supports vLLM versions from 0.22.0 to 0.31.0. You have version 0.32.0 installed.",
        ".venv/lib/python3.11/site-packages/trl/generation/__init__.py:22: UserWarning: TRL currently supports vLLM "
        "versions from 0.22.0 to 0.31.0.",
        ".venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:759: UserWarning: 'pin_memory' argument "
        "is set as true but no accelerator is found, then device pinned memory won't be used.",
        "(RolloutWorker pid=32481) (MainProcess pid=32481) WARNING 11-28 21:49:12 [interface.py:1457] Unknown vLLM "
        "environment variable detected: VLLM_DIST_IDENT",
        "(MainProcess pid=311) WARNING 11-26 11:13:33 [utils.py:648] [shutdown] Process manager: force killing "
        "remaining processes count=1",
        "(MainProcess pid=311) WARNING 11-26 11:13:33 [utils.py:653] [shutdown] Process manager: force killing "
        "remaining process EngineCore pid 533",
        "\x1b[33m(raylet)\x1b[0m A worker died or was killed while executing a task by an unexpected system error. To "
        "troubleshoot the problem, check the logs for the dead worker. Lease ID: 0100 Worker PID: 15170",
        "",
    ]
    assert [line for line in hidden if shown(line)] == []


def test_faults_and_unknown_warnings_are_shown():
    faults = [
        "(EngineCore pid=1) WARNING 11-24 20:24:54 [layerwise.py:266] QKVParallelLinear: Failed to load weights",
        "(EngineCore pid=1) ERROR 11-24 20:24:54 [core.py:1] EngineCore failed to start.",
        "Traceback (most recent call last):",
        "RuntimeError: CUDA out of memory",
        "[W1124 20:24:31 utils.cpp:68] Warning: something else entirely",
        "(EngineCore pid=1) WARNING 11-28 21:49:12 [interface.py:1457] Unknown vLLM environment variable detected: "
        "VLLM_ATENTION_BACKEND",  # a user's own misspelt setting
        ":actor_name:RolloutWorker",  # Ray's mark that names the actor its later lines come from
    ]
    assert [line for line in faults if not shown(line)] == []


def test_an_actor_whose_constructor_raised_shows_nothing_more():
    """Ray's report that an actor's constructor raised, and the traceback after it, stay in the actor's log: the
    run says in one line which actor did not start and why (``driver.did_not_start``)."""
    sieve = LineSieve()
    lines = [
        "WARNING shown before it",
        "Exception raised in creation task: The actor died because of an error raised in its creation task, ...",
        '  File "/work/main/rollout/worker.py", line 39, in __init__',
        "    raise ValueError(",
        "ValueError: No available memory for the cache blocks.",
    ]
    assert [line for line in lines if sieve(line)] == lines[:1]


def test_a_dropped_python_warning_takes_its_source_line_a_traceback_keeps_its_own():
    sieve = LineSieve()
    lines = [
        "/x/dispatcher.py:138: FutureWarning: `torch.distributed.reduce_op` is deprecated, please use ReduceOp",
        '  if hasattr(value, "__dict__"):',
        "Traceback (most recent call last):",
        '  File "/x/core.py", line 3, in run',
        "ValueError: bad",
    ]
    assert [line for line in lines if sieve(line)] == lines[2:]


def test_console_filter_keeps_tailor_info_and_other_libraries_warnings():
    def passes(name: str, level: int, msg: str) -> bool:
        return ConsoleFilter().filter(logging.LogRecord(name, level, __file__, 1, msg, None, None))

    assert passes("rl.driver", logging.INFO, "rollout engines up in 3.0 s")
    assert not passes("vllm.engine", logging.INFO, "Resolved architecture")
    assert passes("py.warnings", logging.WARNING, "UserWarning: something to act on")
    assert not passes("ray", logging.WARNING, "Token authentication is enabled for this Ray cluster.")


def test_route_sends_fd_output_to_the_log_and_only_faults_to_the_console(tmp_path):
    """A process that routes: fd-level writes (as C++ code and child processes make) reach the log file, and the
    console gets Tailor's print and the fault, not the harmless warning."""
    script = textwrap.dedent(
        f"""
        import os, subprocess, sys
        from pathlib import Path
        from rl.output.console import route
        route(Path({str(tmp_path / "logs")!r}))
        os.write(2, b"WARNING 11-24 20:24:54 [layerwise.py:266] RotaryEmbedding: Failed to load weights\\n")
        subprocess.run([sys.executable, "-c", "import sys; print('ERROR child failed', file=sys.stderr)"])
        print("tailor says hello")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["tailor says hello"]
    assert done.stderr.splitlines() == ["ERROR child failed"]
    log = (tmp_path / "logs" / "main.log").read_text()
    assert WEIGHT_LOAD_WARNING in log and "ERROR child failed" in log


def test_run_summary_is_short_and_writes_the_json(tmp_path):
    summary = {"accuracy_before": 0.25, "accuracy_after": 0.5, "train_seconds": 12.3, "steps": 3, "stopped_by": None}
    faults = {"rollout_errors": 2, "reward_failures": {"timeout": 1}, "dropped_groups": {"stale": 7}}
    text = run_summary({**summary, **faults}, tmp_path)
    assert text.splitlines()[0] == "held-out accuracy: 0.250 -> 0.500 in 12 s of training (3 steps)"
    assert "rollout errors 2" in text and "reward calls timed out 1" in text and "stale" not in text
    assert '"rollout_errors": 2' in (tmp_path / "summary.json").read_text()
    run_summary({**summary, "accuracy_after": float("nan"), "stopped_by": "SIGTERM"}, tmp_path)

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    written = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)  # strict, as jq or JS
    assert written["accuracy_after"] is None and written["accuracy_before"] == 0.25


def test_the_training_bar_shows_the_key_metrics():
    metrics = {"reward_mean": 0.5, "accuracy": 0.25, "step_seconds": 1.5, "rollout_tokens_per_s": 812.4}
    text = step_postfix({**metrics, "waste_ratio": 0.125})
    assert text == "reward 0.500, acc 0.25, 1.5 s/step, 812 tok/s, waste 0.12"


def console_of(cmd: list[str], tmp_path: Path) -> str:
    """Run an ``rl`` command as a user does (in a user's environment); its stdout and stderr together."""
    done = subprocess.run(
        [sys.executable, "-m", "rl.cli", *cmd],
        capture_output=True,
        text=True,
        env=user_env(),
        cwd=tmp_path,
        timeout=600,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    return text


def assert_quiet(text: str, max_lines: int) -> None:
    lines = text.replace("\r", "\n").splitlines()  # progress-bar refreshes count too
    assert WEIGHT_LOAD_WARNING not in text and "Traceback" not in text and "Exception ignored" not in text, text
    assert " INFO 1" not in text, text  # no engine INFO line (vLLM's "INFO 11-24 ...")
    assert len(lines) <= max_lines, text


@pytest.mark.integration(seconds=75)
def test_rl_train_console_is_short_and_ends_with_a_summary(user_train_run):
    text = user_train_run.console
    assert user_train_run.returncode == 0, text[-3000:]
    assert_quiet(text, 12)
    assert "\r" not in text, text  # captured here, off a terminal: progress lines, not a bar's refreshes
    lines = [line for line in text.splitlines() if line.strip()]
    progress = [line.split(" (")[0] for line in lines if line.startswith("train:")]
    assert progress == ["train: step 1/2", "train: step 2/2"], text  # the first step and the last
    assert "held-out accuracy:" in text and "rollout engines up in" in text and "s/step" in text
    run_dir = user_train_run.run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2
    import torch  # what the run ran on, for a bug report: the versions as the packages themselves say them

    assert summary["versions"]["torch"] == torch.__version__ and summary["versions"]["vllm"].count(".") >= 2
    synced = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("weight_sync_s", 0) > 0 for r in synced)  # weight syncs ran, yet no load warning was shown
    assert sum(p.stat().st_size for p in (run_dir / "logs").glob("*.log")) > 0  # engine chatter went to the files
    ray_logs = run_dir / "logs" / "ray"  # Ray's own logs are reached from the run directory too
    assert ray_logs.is_symlink() and any(ray_logs.glob("raylet*")), list(ray_logs.iterdir())


@pytest.mark.integration
def test_rl_bench_rollout_shows_progress_and_sigterm_stops_it_and_its_engine(tiny_model_dir, tmp_path):
    """A long ``rl bench rollout``, run as a user runs it: a quiet console shows the engine start and the passes as
    lines (not a bar's carriage-return refreshes: the output is a file), the first one and, once it stops, the last;
    SIGTERM once both modes ran stops it with exit code 143, any child process it started goes with it (on the CPU
    there is none: its engine core runs in the bench's process), and no result is written for a run cut short."""
    log = tmp_path / "bench.log"
    bench = ["bench", "rollout", "--model", tiny_model_dir, "--prompts", "32", "--max-tokens", "48", "--m-keep", "2"]
    bench += ["--modes", "plain,darts", "--repeats", "50", "--no-plots", "--out", str(tmp_path / "b")]
    with log.open("w") as out:
        cmd = [sys.executable, "-m", "rl.cli", *bench]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=user_env(), cwd=tmp_path)
    children: set[int] = set()
    try:
        passes = tmp_path / "b" / PASSES_FILE
        ran_both = lambda: passes.exists() and len(passes.read_text().splitlines()) >= 2  # noqa: E731
        assert wait_for(lambda: ran_both() or proc.poll() is not None, 600), "no pass"
        assert proc.poll() is None, log.read_text()[-3000:]
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        assert wait_for(lambda: not any(alive(pid) for pid in children), 60), [p for p in children if alive(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in children | descendants(proc.pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert not (tmp_path / "b" / "bench_rollout.json").exists()  # stopped mid-run: no partial result
    text = log.read_text()
    assert_quiet(text, 60)
    assert "engine up in" in text and "\r" not in text
    assert text.splitlines()[-1] == "terminated", text[-500:]  # said, as Ctrl-C's "interrupted" is
    lines = [line for line in text.splitlines() if line.startswith("bench: pass ")]
    assert lines[0].startswith("bench: pass 1/100 (") and ": plain repeat 0: " in lines[0], lines
    last = int(re.match(r"bench: pass (\d+)/100 \(", lines[-1]).group(1))  # where the signal stopped it
    assert last >= 2 and f"repeat {(last - 1) // 2}: " in lines[-1], lines


def test_records_before_routing_are_sieved_unless_verbose():
    """preflight calls the reward (and rl bench peer imports TRL) before a run routes its output: known-harmless
    notices, logged or Python warnings, stay off the console then too, Tailor's own lines and real warnings do not;
    --verbose shows everything."""
    code = (
        "import logging, sys; from rl.cli.main import start_logging; start_logging(verbose=sys.argv[1] == 'v'); "
        "logging.getLogger('math_verify.parser').warning('Timeout is disabled as parsing_timeout is None or <= 0'); "
        "logging.getLogger('somelib').warning('a real fault'); logging.getLogger('somelib').info('chatter'); "
        "logging.getLogger('rl.driver').info('tailor line'); import warnings; "
        "warnings.warn('TRL currently supports vLLM versions from 0.22.0'); warnings.warn('a real warning')"
    )
    everything = ["Timeout", "a real fault", "chatter", "tailor line", "TRL currently", "a real warning"]
    for mode, expected in [("quiet", ["a real fault", "tailor line", "a real warning"]), ("v", everything)]:
        err = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True).stderr
        assert [word for word in everything if word in err] == expected, err


def test_sigterm_inside_an_event_loop_is_raised_by_the_loop_not_in_a_task(caplog):
    """``kill`` during an asyncio command (a bench): the exit is raised between task steps, so no task is left
    holding it and asyncio prints no 'Task exception was never retrieved' traceback on the way out (seen once in CI
    when the signal landed in a group's member task). A thread sends it while a task's step keeps the loop busy."""
    import asyncio
    import gc
    import threading
    import time

    from rl.cli.main import _exit_on_sigterm

    async def command() -> None:
        async def busy() -> None:
            while True:
                end = time.monotonic() + 0.05
                while time.monotonic() < end:  # a long step: the signal lands in it
                    pass
                await asyncio.sleep(0)

        task = asyncio.create_task(busy())
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        await asyncio.sleep(30)
        task.cancel()

    before = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with pytest.raises(SystemExit) as stop:
            asyncio.run(command())
    finally:
        signal.signal(signal.SIGTERM, before)
    code = stop.value.code
    del stop  # its traceback keeps the tasks' frames: asyncio reports a task's lost exception when it is collected
    gc.collect()
    assert code == 128 + signal.SIGTERM
    assert "never retrieved" not in caplog.text
