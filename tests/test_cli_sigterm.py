"""``kill`` on a running ``rl`` command stops it cleanly: no engine process is left behind."""

import os
import signal
import subprocess
import sys

import pytest

from rl.loop.processes import alive, descendants, wait_for

pytestmark = pytest.mark.integration  # starts real Ray or vLLM


def test_sigterm_stops_the_bench_and_its_engine(tiny_model_dir, tmp_path):
    """A long ``rl bench rollout`` gets SIGTERM once its engine is up: the command exits with 143 and the
    vLLM engine-core process it started goes with it (without the handler it would be orphaned)."""
    log = tmp_path / "bench.log"
    cmd = [sys.executable, "-m", "rl.cli", "bench", "rollout", "--model", tiny_model_dir, "--prompts", "32"]
    cmd += ["--max-tokens", "48", "--repeats", "100", "--modes", "plain", "--out", str(tmp_path / "out")]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # the engine core in a process of its own
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    children: set[int] = set()
    try:
        assert wait_for(lambda: "engine up" in log.read_text() or proc.poll() is not None, 600), "no engine"
        assert proc.poll() is None, log.read_text()[-3000:]
        children = descendants(proc.pid)
        assert children, "the engine core should run in a child process"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        assert wait_for(lambda: not any(alive(pid) for pid in children), 60), [p for p in children if alive(p)]
        assert not (tmp_path / "out" / "bench_rollout.json").exists()  # stopped mid-run: no partial result
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in children | descendants(proc.pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
