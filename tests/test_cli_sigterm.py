"""``kill`` on a running ``rl`` command stops it cleanly: no engine process is left behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux ``/proc``)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return predicate()


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
        assert _wait_for(lambda: "engine up" in log.read_text() or proc.poll() is not None, 600), "no engine"
        assert proc.poll() is None, log.read_text()[-3000:]
        children = _descendants(proc.pid)
        assert children, "the engine core should run in a child process"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        assert _wait_for(lambda: not any(_alive(pid) for pid in children), 60), [p for p in children if _alive(p)]
        assert not (tmp_path / "out" / "bench_rollout.json").exists()  # stopped mid-run: no partial result
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in children | _descendants(proc.pid):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
