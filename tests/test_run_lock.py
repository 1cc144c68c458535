"""One ``rl train`` per run directory: a second one into the same folder is refused in one line, naming the first's
pid, before it starts anything; a killed holder leaves no stale lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from rl.inputs.preflight import BadInput
from rl.loop.run_lock import LOCK_FILE, run_dir_lock

HOLD = "import sys, time; from pathlib import Path; from rl.loop.run_lock import run_dir_lock\n" + (
    "with run_dir_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(300)\n"
)


def _holder(run_dir) -> subprocess.Popen:
    """Another process holding ``run_dir`` (it says so once it does)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_held_run_directory_is_refused_and_free_again_once_released(tmp_path):
    run_dir = tmp_path / "r"
    with run_dir_lock(run_dir):
        assert (run_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(BadInput, match=f"is in use by another rl train \\(pid {os.getpid()}\\)"):
            with run_dir_lock(run_dir):
                pass
    with run_dir_lock(run_dir):  # released at the end of the block
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = _holder(tmp_path)
    with pytest.raises(BadInput, match=f"pid {holder.pid}\\)"):
        with run_dir_lock(tmp_path):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    with run_dir_lock(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"


def test_rl_train_into_a_folder_another_run_holds_says_so_before_it_starts(tiny_model_dir, tmp_path):
    holder = _holder(tmp_path / "r")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rl.cli", "train", "arith_tiny", f"output_dir={tmp_path}", "name=r"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"bad input: {tmp_path / 'r'} is in use by another rl train (pid {holder.pid}); wait for it or stop it, or "
        "give this run another name= or output_dir="
    )
    assert "Ray started" not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [LOCK_FILE]  # the holder's folder untouched
