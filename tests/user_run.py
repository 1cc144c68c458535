"""One ``rl train`` on the tiny model run as a user runs it (a subprocess, in the environment a user has),
watched while it runs: its whole console and every TCP socket its process tree listened on. Shared by the console
and loopback tests (tests/conftest.py's ``user_train_run``), so the run is paid for once, by one pytest worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

RUN = [
    "train.max_steps=2",
    "train.batch_groups=2",
    "shaping.m_keep=2",
    "eval.num_problems=2",
    "eval.every=0",
    "rollout.cpu_threads_bind=null",
    "train.save_checkpoint=false",
]


@dataclass
class UserRun:
    returncode: int
    console: str  # stdout and stderr together
    listening: set[tuple[str, str, int]]  # (process name, address, port), sampled every half second
    run_dir: Path


def listening(root: psutil.Process) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of ``root`` and its descendants."""
    found = set()
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return found
    for proc in procs:
        try:
            name = proc.name()
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.add((name, conn.laddr.ip, conn.laddr.port))
        except psutil.Error:  # the process ended between the listing and the look
            continue
    return found


def user_env() -> dict[str, str]:
    """This process's environment less what conftest sets for the tests' in-process engines: an ``rl`` command
    started with it runs as a user's does."""
    return {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}


def run_rl_train(out_dir: Path, name: str = "user") -> UserRun:
    """``rl train arith_tiny`` with ``RUN`` into ``out_dir/name``, sampling its listening sockets until it ends."""
    cmd = [sys.executable, "-m", "rl.cli", "train", "arith_tiny", *RUN, f"output_dir={out_dir}", f"name={name}"]
    env = user_env()
    log = out_dir / f"{name}.console"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=out_dir)
    root, seen = psutil.Process(proc.pid), set()
    deadline = time.monotonic() + 600
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= listening(root)
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    return UserRun(proc.wait(timeout=60), log.read_text(), seen, out_dir / name)


def run_once(root: Path) -> UserRun:
    """The run of ``run_rl_train(root / "user-run")``, made once for every process that asks with the same ``root``
    (the pytest-xdist workers of one session): the first runs it under a file lock and records it, the others wait
    for the record and read it."""
    from filelock import FileLock

    record = root / "user-run.json"
    with FileLock(str(root / "user-run.lock")):
        if not record.is_file():
            (root / "user-run").mkdir(exist_ok=True)
            run = run_rl_train(root / "user-run")
            fields = {"returncode": run.returncode, "console": run.console, "run_dir": str(run.run_dir)}
            record.write_text(json.dumps({**fields, "listening": sorted(run.listening)}))
    data = json.loads(record.read_text())
    listened = {(name, address, port) for name, address, port in data["listening"]}
    return UserRun(data["returncode"], data["console"], listened, Path(data["run_dir"]))
